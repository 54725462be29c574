//! The channel to the runner, seen from the guest: the virtio serial port QEMU names
//! `agent`, or a vsock connection the init makes to the host (Firecracker), which it
//! makes again after a snapshot restore, feeding the kernel the fresh entropy and the
//! time it gets first.

use super::error::InitError;
use crate::agent::Restorable;
use sandbox_protocol::agent::Reseed;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The name the host gives the agent's virtio serial port.
const PORT_NAME: &str = "agent";
/// How long the port may take to appear after its driver is loaded.
const PORT_WAIT: Duration = Duration::from_secs(10);
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

    fn restored(&mut self, fresh: &Reseed) -> io::Result<()> {
        reseed(&fresh.reseed)?;
        let time = Duration::from_millis(fresh.unix_time_ms);
        let spec = nix::sys::time::TimeSpec::from_duration(time);
        nix::time::clock_settime(nix::time::ClockId::CLOCK_REALTIME, spec)?;
        Ok(())
    }
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

/// Opens the virtio serial port the host named [`PORT_NAME`] (its device node is
/// numbered by probe order, so it is found by name in sysfs). Close-on-exec: the
/// jail never inherits it.
pub(super) fn open_port() -> Result<File, InitError> {
    let deadline = Instant::now() + PORT_WAIT;
    loop {
        if let Some(device) = find_port() {
            return OpenOptions::new()
                .read(true)
                .write(true)
                .open(&device)
                .map_err(|source| InitError::Channel {
                    path: device,
                    source,
                });
        }
        if Instant::now() >= deadline {
            return Err(InitError::NoDevice(format!(
                "the virtio serial port {PORT_NAME:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn find_port() -> Option<PathBuf> {
    let entries = fs::read_dir(Path::new("/sys/class/virtio-ports")).ok()?;
    entries.flatten().find_map(|entry| {
        let name = fs::read_to_string(entry.path().join("name")).unwrap_or_default();
        let device = Path::new("/dev").join(entry.file_name());
        (name.trim() == PORT_NAME && device.exists()).then_some(device)
    })
}
