//! The agent as the init (PID 1) of a microVM.
//!
//! The guest kernel starts this binary from a small initramfs (`sandbox-agent --init`).
//! It does what an init must before the one job, in this order ([`boot`]):
//!
//! 1. mounts devtmpfs on /dev, proc on /proc and sysfs on /sys;
//! 2. loads the kernel modules shipped in the initramfs (virtio transport, block,
//!    console, vsock, overlay), in the order of their file names;
//! 3. mounts the read-only root image (`/dev/vda`) and makes it the root;
//! 4. mounts the guest's cgroup v2 hierarchy;
//!
//! then makes the sandbox ([`sandbox`]): a cgroup v2 with the runner's memory, CPU and
//! process limits, and in it the same jail as the process backend's (this binary run
//! again), whose agent runs the program as the sandbox user; and serves the runner's
//! exchange by relaying it to that agent, adding whether the sandbox's cgroup saw an
//! OOM kill. The channel to the runner ([`host`]) is the virtio serial port named
//! `agent` (QEMU), or with `sandbox.vsock_port=N` a vsock connection to port N of the
//! host (Firecracker), which the init makes itself and makes again after a snapshot
//! restore ([`crate::serve_restorable`]).
//!
//! Then it powers the VM off (or, where the VMM has no power-off, as Firecracker on
//! x86, resets it, which ends the VMM). Any failure is written to the console (the
//! host keeps the VM's serial output) and also ends the VM: an init never returns.
//!
//! The runner passes the settings on the kernel command line: `sandbox.memory_mb=N`,
//! `sandbox.cpu_quota_us=N`, `sandbox.cpu_period_us=N`, `sandbox.pids_max=N`,
//! `sandbox.tmpfs_mb=N` and `sandbox.vsock_port=N`.

mod boot;
mod host;
mod sandbox;

use crate::{serve_restorable, serve_with, AgentError};
use nix::mount::MsFlags;
use sandbox_jail::cgroup::CgroupError;
use sandbox_protocol::frame::FrameError;
use std::io;
use std::path::{Path, PathBuf};

/// The argument that selects this mode.
pub const INIT_ARG: &str = "--init";

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
    #[error("{0} did not appear in time")]
    NoDevice(String),
    /// Changing into the new root failed.
    #[error("switching to the root image: {0}")]
    SwitchRoot(nix::Error),
    /// The channel device could not be opened.
    #[error("opening the agent channel {path}: {source}")]
    Channel {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// The sandbox's cgroup could not be made.
    #[error("the sandbox's cgroup: {0}")]
    Cgroup(#[from] CgroupError),
    /// The jail could not be started.
    #[error("starting the jail: {0}")]
    Spawn(io::Error),
    /// The jail did not make a sandbox whose agent answered.
    #[error("the jailed sandbox: {0}")]
    Jail(String),
    /// The exchange with the jailed sandbox's agent failed before it was ready.
    #[error("the jailed sandbox's channel: {0}")]
    JailChannel(#[from] FrameError),
    /// Serving the job failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

/// Settings the runner passes on the kernel command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Settings {
    /// Size of the sandbox's /tmp, and of its home, in MiB.
    tmpfs_mb: u64,
    /// The sandbox's memory limit (no swap), in MiB.
    memory_mb: u64,
    /// The sandbox's CPU time per period, in microseconds.
    cpu_quota_us: u64,
    /// The CPU accounting period, in microseconds.
    cpu_period_us: u64,
    /// The most processes (and threads) of the sandbox at once.
    pids_max: u64,
    /// The host's vsock port to connect to, instead of the virtio serial port.
    vsock_port: Option<u32>,
}

impl Settings {
    /// Reads `sandbox.*=N` from a kernel command line; absent values keep their defaults
    /// (the runner's).
    fn parse(cmdline: &str) -> Settings {
        let mut settings = Settings {
            tmpfs_mb: 64,
            memory_mb: 256,
            cpu_quota_us: 50_000,
            cpu_period_us: 100_000,
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
                "sandbox.memory_mb" => settings.memory_mb = value,
                "sandbox.cpu_quota_us" => settings.cpu_quota_us = value,
                "sandbox.cpu_period_us" => settings.cpu_period_us = value,
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
    boot::power_off()
}

fn boot_and_serve() -> Result<(), InitError> {
    boot::mount_kernel_file_systems()?;
    let cmdline = boot::read("/proc/cmdline")?;
    let settings = Settings::parse(&cmdline);
    boot::load_modules()?;
    boot::wait_for(Path::new(boot::ROOT_DEVICE), boot::ROOT_DEVICE)?;
    boot::switch_root()?;
    // Without swap, the default heuristic refuses one allocation larger than the
    // guest's free memory outright (a MemoryError); like the host under a cgroup cap,
    // the guest lets it be made and the cgroup's OOM killer ends the program when it
    // is touched.
    boot::write("/proc/sys/vm/overcommit_memory", "1")?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    boot::mount_fs("cgroup2", "cgroup2", sandbox::CGROUP_MOUNT, flags, None)?;
    let mut jailed = sandbox::Jailed::start(&settings)?;
    match settings.vsock_port {
        Some(port) => serve_restorable(&mut host::VsockHost { port }, &mut jailed)?,
        None => serve_with(&mut host::open_port()?, &mut jailed)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_command_line() {
        let s = Settings::parse(
            "console=ttyS0 sandbox.tmpfs_mb=32 sandbox.pids_max=100 sandbox.memory_mb=300 \
             sandbox.cpu_quota_us=25000 sandbox.cpu_period_us=50000 -- --init",
        );
        assert_eq!(
            s,
            Settings {
                tmpfs_mb: 32,
                memory_mb: 300,
                cpu_quota_us: 25_000,
                cpu_period_us: 50_000,
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
