//! The agent as the init (PID 1) of a microVM.
//!
//! The guest kernel starts this binary from a small initramfs (`sandbox-agent --init`).
//! It does what an init must before the one job, in this order:
//!
//! 1. mounts devtmpfs on /dev, proc on /proc and sysfs on /sys;
//! 2. loads the kernel modules shipped in the initramfs (virtio transport, block,
//!    console), in the order of their file names;
//! 3. mounts the read-only root image (`/dev/vda`) and makes it the root;
//! 4. mounts size-capped tmpfs on /tmp, the home directory and /dev/shm;
//! 5. caps the number of processes with a cgroup v2 `pids` limit;
//! 6. names the host `sandbox` and brings the loopback interface up (the VM has no
//!    other network device);
//! 7. opens the channel and serves one job as [`crate::serve`] does, adding whether the
//!    guest's OOM killer ended a process of it (the agent is alone in this kernel, so
//!    the system-wide counter is exact). The channel is the virtio serial port named
//!    `agent` (QEMU), or with `sandbox.vsock_port=N` a vsock connection to port N of
//!    the host (Firecracker), which the agent makes itself and makes again after a
//!    snapshot restore ([`crate::serve_restorable`]; the reseed after a restore goes
//!    to the kernel through `RNDADDENTROPY` and `RNDRESEEDCRNG`);
//!
//! then powers the VM off (or, where the VMM has no power-off, as Firecracker on x86,
//! resets it, which ends the VMM). Any failure is written to the console (the host
//! keeps the VM's serial output) and also ends the VM: an init never returns.
//!
//! The runner passes the settings on the kernel command line: `sandbox.tmpfs_mb=N`,
//! `sandbox.pids_max=N` and `sandbox.vsock_port=N`.

use crate::Restorable;
use crate::{run_job, serve_restorable, serve_with, AgentError, JobError, Prepared, HOME};
use nix::mount::{mount, MsFlags};
use sandbox_protocol::agent::{Job, JobOutcome, Reseed};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The argument that selects this mode.
pub const INIT_ARG: &str = "--init";
/// Where the initramfs keeps the modules to load.
const MODULES_DIR: &str = "/modules";
/// Where the root image is mounted before it becomes the root.
const NEW_ROOT: &str = "/newroot";
/// The root image: the first virtio block device.
const ROOT_DEVICE: &str = "/dev/vda";
/// The name the host gives the agent's virtio serial port.
const PORT_NAME: &str = "agent";
/// How long a device may take to appear after its driver is loaded.
const DEVICE_WAIT: Duration = Duration::from_secs(10);
/// The cgroup every process of the job lives in.
const JOB_CGROUP: &str = "/sys/fs/cgroup/job";
/// The guest's host name, as in the process backend's UTS namespace.
const HOSTNAME: &str = "sandbox";
/// Size of /dev/shm, in MiB.
const SHM_MB: u64 = 16;

/// A step of the boot that failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A file system could not be mounted (or moved).
    #[error("mounting {what} on {target}: {source}")]
    Mount {
        /// What was being mounted.
        what: &'static str,
        /// The mount point.
        target: PathBuf,
        /// What failed underneath.
        source: nix::Error,
    },
    /// A folder could not be made.
    #[error("creating {path}: {source}")]
    CreateDir {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A control file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A kernel module could not be loaded.
    #[error("loading kernel module {path}: {source}")]
    Module {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A device did not show up in time.
    #[error("{0} did not appear within {DEVICE_WAIT:?}")]
    NoDevice(String),
    /// Changing into the new root failed.
    #[error("switching to the root image: {0}")]
    SwitchRoot(nix::Error),
    /// The host name could not be set.
    #[error("setting the host name: {0}")]
    Hostname(nix::Error),
    /// The loopback interface could not be brought up.
    #[error("bringing up the loopback interface: {0}")]
    Loopback(io::Error),
    /// The channel device could not be opened.
    #[error("opening the agent channel {path}: {source}")]
    Channel {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// Serving the job failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

/// Settings the runner passes on the kernel command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Settings {
    tmpfs_mb: u64,
    pids_max: u64,
    /// The host's vsock port to connect to, instead of the virtio serial port.
    vsock_port: Option<u32>,
}

impl Settings {
    /// Reads `sandbox.*=N` from a kernel command line; absent values keep their defaults.
    fn parse(cmdline: &str) -> Settings {
        let mut settings = Settings {
            tmpfs_mb: 64,
            pids_max: 64,
            vsock_port: None,
        };
        for word in cmdline.split_whitespace() {
            let Some((key, value)) = word.split_once('=') else {
                continue;
            };
            let Ok(value) = value.parse::<u64>() else {
                continue;
            };
            match key {
                "sandbox.tmpfs_mb" => settings.tmpfs_mb = value,
                "sandbox.pids_max" => settings.pids_max = value,
                "sandbox.vsock_port" => settings.vsock_port = u32::try_from(value).ok(),
                _ => {}
            }
        }
        settings
    }
}

/// Boots, serves one job, and powers the VM off. Never returns.
pub fn main() -> ! {
    if let Err(e) = boot_and_serve() {
        eprintln!("sandbox-agent init: {e}");
    }
    power_off()
}

fn boot_and_serve() -> Result<(), InitError> {
    mount_kernel_file_systems()?;
    let cmdline = read("/proc/cmdline")?;
    let settings = Settings::parse(&cmdline);
    load_modules()?;
    wait_for(Path::new(ROOT_DEVICE), ROOT_DEVICE)?;
    switch_root()?;
    mount_scratch(settings)?;
    // Without swap, the default heuristic refuses one allocation larger than the
    // guest's memory outright (a MemoryError); like the host under a cgroup cap, the
    // guest lets it be made and OOM-kills the program when it is touched.
    write("/proc/sys/vm/overcommit_memory", "1")?;
    limit_processes(settings)?;
    nix::unistd::sethostname(HOSTNAME).map_err(InitError::Hostname)?;
    crate::net::loopback_up().map_err(InitError::Loopback)?;
    match settings.vsock_port {
        Some(port) => serve_restorable(&mut VsockHost { port }, run_counting_oom)?,
        None => serve_with(&mut open_channel()?, run_counting_oom)?,
    }
    Ok(())
}

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
struct VsockHost {
    port: u32,
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

fn mount_fs(
    what: &'static str,
    fstype: &str,
    target: &str,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), InitError> {
    make_dir(Path::new(target))?;
    mount(Some(what), target, Some(fstype), flags, data).map_err(|source| InitError::Mount {
        what,
        target: target.into(),
        source,
    })
}

fn mount_kernel_file_systems() -> Result<(), InitError> {
    let hardened = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    mount_fs("devtmpfs", "devtmpfs", "/dev", MsFlags::MS_NOSUID, None)?;
    mount_fs("proc", "proc", "/proc", hardened | MsFlags::MS_NODEV, None)?;
    mount_fs("sysfs", "sysfs", "/sys", hardened | MsFlags::MS_NODEV, None)
}

/// Loads every `.ko` of the initramfs in file-name order (the image build numbers them
/// so that dependencies come first), then deletes it to give the memory back.
fn load_modules() -> Result<(), InitError> {
    let entries = match fs::read_dir(MODULES_DIR) {
        Ok(entries) => entries,
        // A kernel with the drivers built in needs no modules.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(InitError::Read {
                path: MODULES_DIR.into(),
                source,
            })
        }
    };
    let mut modules: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    modules.sort();
    for path in modules {
        load_module(&path)?;
        let _ = fs::remove_file(&path);
    }
    Ok(())
}

fn load_module(path: &Path) -> Result<(), InitError> {
    let module_error = |source| InitError::Module {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(module_error)?;
    let no_params = c"";
    // SAFETY: finit_module reads the module from the open descriptor and the
    // NUL-terminated parameter string, both valid for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_finit_module,
            file.as_raw_fd(),
            no_params.as_ptr(),
            0,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(module_error(e));
        }
    }
    Ok(())
}

fn wait_for(path: &Path, what: &str) -> Result<(), InitError> {
    let deadline = Instant::now() + DEVICE_WAIT;
    while !path.exists() {
        if Instant::now() >= deadline {
            return Err(InitError::NoDevice(what.to_owned()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Mounts the root image read-only, moves the kernel file systems into it, and makes
/// it the root (what `switch_root` does; the initramfs stays, it is a few MiB).
fn switch_root() -> Result<(), InitError> {
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NODEV | MsFlags::MS_NOSUID;
    mount_fs("/dev/vda", "ext4", NEW_ROOT, flags, None)?;
    for dir in ["/dev", "/proc", "/sys"] {
        let target = format!("{NEW_ROOT}{dir}");
        mount(
            Some(dir),
            target.as_str(),
            None::<&str>,
            MsFlags::MS_MOVE,
            None::<&str>,
        )
        .map_err(|source| InitError::Mount {
            what: "a kernel file system (move)",
            target: target.clone().into(),
            source,
        })?;
    }
    nix::unistd::chdir(NEW_ROOT).map_err(InitError::SwitchRoot)?;
    mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(InitError::SwitchRoot)?;
    nix::unistd::chroot(".").map_err(InitError::SwitchRoot)?;
    nix::unistd::chdir("/").map_err(InitError::SwitchRoot)
}

fn mount_scratch(settings: Settings) -> Result<(), InitError> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let size = settings.tmpfs_mb;
    let tmp = format!("size={size}m,mode=1777");
    mount_fs("tmpfs", "tmpfs", "/tmp", flags, Some(&tmp))?;
    let home = format!("size={size}m,mode=0755");
    mount_fs("tmpfs", "tmpfs", HOME, flags, Some(&home))?;
    let shm = format!("size={SHM_MB}m,mode=1777");
    mount_fs("tmpfs", "tmpfs", "/dev/shm", flags, Some(&shm))
}

/// Puts the agent (and so everything it starts) in a cgroup with a `pids` cap, as the
/// process backend's cgroup does.
fn limit_processes(settings: Settings) -> Result<(), InitError> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_fs("cgroup2", "cgroup2", "/sys/fs/cgroup", flags, None)?;
    write("/sys/fs/cgroup/cgroup.subtree_control", "+pids")?;
    make_dir(Path::new(JOB_CGROUP))?;
    write(
        &format!("{JOB_CGROUP}/pids.max"),
        &settings.pids_max.to_string(),
    )?;
    write(&format!("{JOB_CGROUP}/cgroup.procs"), "0")
}

/// Opens the virtio serial port the host named [`PORT_NAME`] (its device node is
/// numbered by probe order, so it is found by name in sysfs).
fn open_channel() -> Result<File, InitError> {
    let deadline = Instant::now() + DEVICE_WAIT;
    loop {
        if let Some(device) = find_port()? {
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

fn find_port() -> Result<Option<PathBuf>, InitError> {
    let ports = Path::new("/sys/class/virtio-ports");
    let Ok(entries) = fs::read_dir(ports) else {
        return Ok(None);
    };
    for entry in entries.flatten() {
        let name = fs::read_to_string(entry.path().join("name")).unwrap_or_default();
        let device = Path::new("/dev").join(entry.file_name());
        if name.trim() == PORT_NAME && device.exists() {
            return Ok(Some(device));
        }
    }
    Ok(None)
}

/// Runs the job and adds whether the guest's OOM killer struck meanwhile.
fn run_counting_oom(job: &Job, prepared: Option<Prepared>) -> Result<JobOutcome, JobError> {
    let before = oom_kills();
    let mut outcome = run_job(job, prepared)?;
    outcome.oom_killed = match (before, oom_kills()) {
        (Some(before), Some(after)) => Some(after > before),
        _ => None,
    };
    Ok(outcome)
}

/// The kernel's count of OOM kills since boot.
fn oom_kills() -> Option<u64> {
    let vmstat = fs::read_to_string("/proc/vmstat").ok()?;
    vmstat
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// Ends the VM: a reset where the VMM has no power-off device (a vsock guest runs under
/// Firecracker, which exits when its guest resets, and on x86 halts on a power-off),
/// else a power-off (QEMU's microvm has ACPI).
fn power_off() -> ! {
    let reset = fs::read_to_string("/proc/cmdline").map_or(true, |cmdline| {
        Settings::parse(&cmdline).vsock_port.is_some()
    });
    let first = if reset {
        libc::RB_AUTOBOOT
    } else {
        libc::RB_POWER_OFF
    };
    // SAFETY: reboot() takes a command constant and touches no memory of ours; as PID 1
    // with CAP_SYS_BOOT it ends the machine and does not return.
    unsafe {
        libc::reboot(first);
        // Only if that failed.
        libc::reboot(libc::RB_AUTOBOOT);
    }
    // Only if both failed: an init must not exit. The host kills the VMM anyway.
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn read(path: &str) -> Result<String, InitError> {
    fs::read_to_string(path).map_err(|source| InitError::Read {
        path: path.into(),
        source,
    })
}

fn write(path: &str, value: &str) -> Result<(), InitError> {
    fs::write(path, value).map_err(|source| InitError::Write {
        path: path.into(),
        source,
    })
}

fn make_dir(path: &Path) -> Result<(), InitError> {
    match fs::create_dir_all(path) {
        Ok(()) => Ok(()),
        // A read-only root already holds the folders it needs.
        Err(_) if path.is_dir() => Ok(()),
        Err(source) => Err(InitError::CreateDir {
            path: path.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_command_line() {
        let s = Settings::parse("console=ttyS0 sandbox.tmpfs_mb=32 sandbox.pids_max=100 -- --init");
        assert_eq!(
            s,
            Settings {
                tmpfs_mb: 32,
                pids_max: 100,
                vsock_port: None,
            }
        );
        let defaults = Settings::parse("quiet sandbox.pids_max=lots");
        assert_eq!(defaults.pids_max, 64);
        let vsock = Settings::parse("sandbox.vsock_port=1024 sandbox.vsock_port=-1");
        assert_eq!(vsock.vsock_port, Some(1024));
        let too_big = Settings::parse("sandbox.vsock_port=4294967296");
        assert_eq!(too_big.vsock_port, None);
    }
}
