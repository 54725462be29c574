//! The channel to the runner, seen from the guest: the virtio serial port QEMU names
//! `agent` ([`PortHost`]), or a vsock connection the init makes to the host
//! (Firecracker, [`VsockHost`]), which it makes again after a snapshot restore. Either
//! way a restored VM feeds the kernel the fresh entropy and the time it gets first.
//!
//! The serial port lives on across a save and restore: the runner stops the VM before
//! its old QEMU lets go of the port's socket, and the new QEMU is connected to the new
//! runner's before the VM runs again, so the guest never sees the host side close (a
//! read would then end, as at the end of the VM's life).

use crate::agent::Restorable;
use sandbox_protocol::agent::Reseed;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The name the host gives the agent's virtio serial port.
const PORT_NAME: &str = "agent";
/// The host's CID: a guest reaches the VMM's host side at this address.
const VMADDR_CID_HOST: u32 = 2;
/// `RNDADDENTROPY` of linux/random.h: `_IOW('R', 0x03, int[2])`.
const RNDADDENTROPY: libc::c_ulong = 0x4008_5203;
/// `RNDRESEEDCRNG` of linux/random.h: `_IO('R', 0x07)`.
const RNDRESEEDCRNG: libc::c_ulong = 0x5207;
/// The most bytes one `RNDADDENTROPY` call carries here.
const ENTROPY_CHUNK: usize = 64;

/// `struct rand_pool_info` of linux/random.h, with a buffer of [`ENTROPY_CHUNK`] bytes.
#[repr(C)]
struct RandPoolInfo {
    entropy_count: libc::c_int,
    buf_size: libc::c_int,
    buf: [u8; ENTROPY_CHUNK],
}

/// The runner, reached over vsock (Firecracker maps the connection to a unix socket
/// on the host).
pub(super) struct VsockHost {
    /// The host's port.
    pub(super) port: u32,
}

impl Restorable for VsockHost {
    type Channel = File;

    fn connect(&mut self) -> io::Result<File> {
        use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, VsockAddr};
        let fd = socket(
            AddressFamily::Vsock,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        connect(fd.as_raw_fd(), &VsockAddr::new(VMADDR_CID_HOST, self.port))?;
        Ok(File::from(fd))
    }

    fn reconnects(&self) -> bool {
        // Firecracker resets every vsock connection of a restored VM.
        true
    }

    fn restored(&mut self, fresh: &Reseed) -> io::Result<()> {
        apply(fresh)
    }
}

/// The runner, reached over the virtio serial port QEMU names [`PORT_NAME`].
pub(super) struct PortHost;

impl Restorable for PortHost {
    type Channel = File;

    /// Opens the port (its device node is numbered by probe order, so it is found by
    /// name in sysfs); not found until its driver has probed it. Close-on-exec: the
    /// jail never inherits it.
    fn connect(&mut self) -> io::Result<File> {
        let device = find_port(PORT_NAME).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no virtio serial port named {PORT_NAME:?}"),
            )
        })?;
        OpenOptions::new().read(true).write(true).open(device)
    }

    fn reconnects(&self) -> bool {
        false
    }

    fn restored(&mut self, fresh: &Reseed) -> io::Result<()> {
        apply(fresh)
    }
}

/// What a restored VM gets first: the entropy into the kernel's pool, and the clock set
/// to the host's time (it stopped when the VM was saved).
fn apply(fresh: &Reseed) -> io::Result<()> {
    reseed(&fresh.reseed)?;
    let time = Duration::from_millis(fresh.unix_time_ms);
    let spec = nix::sys::time::TimeSpec::from_duration(time);
    nix::time::clock_settime(nix::time::ClockId::CLOCK_REALTIME, spec)?;
    Ok(())
}

/// Mixes `entropy` into the kernel's random pool, credited, and reseeds its generator.
fn reseed(entropy: &[u8]) -> io::Result<()> {
    let random = OpenOptions::new().write(true).open("/dev/urandom")?;
    for chunk in entropy.chunks(ENTROPY_CHUNK) {
        let mut info = RandPoolInfo {
            entropy_count: (chunk.len() * 8) as libc::c_int,
            buf_size: chunk.len() as libc::c_int,
            buf: [0; ENTROPY_CHUNK],
        };
        info.buf[..chunk.len()].copy_from_slice(chunk);
        // SAFETY: RNDADDENTROPY reads a rand_pool_info whose buffer holds buf_size
        // bytes; `info` is such a struct, alive for the call.
        if unsafe { libc::ioctl(random.as_raw_fd(), RNDADDENTROPY, &info) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: RNDRESEEDCRNG takes no argument.
    if unsafe { libc::ioctl(random.as_raw_fd(), RNDRESEEDCRNG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The device of the virtio serial port the host names `wanted` (its node is numbered by
/// probe order, so it is found by name in sysfs).
pub(super) fn find_port(wanted: &str) -> Option<PathBuf> {
    let entries = fs::read_dir(Path::new("/sys/class/virtio-ports")).ok()?;
    entries.flatten().find_map(|entry| {
        let name = fs::read_to_string(entry.path().join("name")).unwrap_or_default();
        let device = Path::new("/dev").join(entry.file_name());
        (name.trim() == wanted && device.exists()).then_some(device)
    })
}
