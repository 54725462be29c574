//! The init (PID 1) of a microVM guest (the vm backend): `sandbox-agent --init`.
//!
//! Not for: running programs (the agent of the jailed sandbox it makes does that, as on
//! a host: [`crate::agent`]), nor any process sandbox (the runner makes those on the host,
//! itself or from a template). The guest holds one sandbox, and the init's life is that
//! sandbox's.
//!
//! The guest kernel starts this binary from a small initramfs (`sandbox-agent --init`).
//! It does what an init must before the sandbox's first job, in this order (`boot.rs`):
//!
//! 1. mounts devtmpfs on /dev, proc on /proc and sysfs on /sys;
//! 2. loads the kernel modules shipped in the initramfs (virtio transport, block,
//!    console, vsock, overlay), in the order of their file names;
//! 3. mounts the read-only root image (`/dev/vda`) and makes it the root;
//! 4. mounts the guest's cgroup v2 hierarchy;
//!
//! then makes the sandbox (`sandbox.rs`): a cgroup v2 with the runner's memory, CPU and
//! process limits, and in it the same jail as the process backend's (this binary run
//! again), whose agent runs the program as the sandbox user; and serves the runner's
//! exchange by relaying it to that agent, adding whether the sandbox's cgroup saw an
//! OOM kill. The channel to the runner (`host.rs`) is the virtio serial port named
//! `agent` (QEMU), or with `sandbox.vsock_port=N` a vsock connection to port N of the
//! host (Firecracker), which the init makes itself and makes again after a snapshot
//! restore. Either VM can be snapshotted ([`crate::agent::serve_restorable`]): a
//! session's, saved whole between its calls, takes fresh entropy and the time from
//! the runner before it serves anything after its restore.
//!
//! Beside it, on a thread of its own, the init carries the sandbox's connections to the
//! runner's egress proxy where the runner serves them (`tunnel.rs`: a listener at the
//! proxy's address inside the sandbox, the virtio serial port named `egress`).
//!
//! Then it powers the VM off (or, where the VMM has no power-off, as Firecracker on
//! x86, resets it, which ends the VMM). Any failure is written to the console (the
//! host keeps the VM's serial output) and also ends the VM: an init never returns.
//!
//! The runner passes the settings on the kernel command line: `sandbox.memory_mb=N`,
//! `sandbox.cpu_quota_us=N`, `sandbox.cpu_period_us=N`, `sandbox.pids_max=N`,
//! `sandbox.tmpfs_mb=N` and `sandbox.vsock_port=N`.

mod boot;
mod error;
mod host;
mod relay;
mod sandbox;
mod settings;
mod tunnel;

pub use error::InitError;

use crate::agent::serve_restorable;
use nix::mount::MsFlags;
use settings::Settings;
use std::path::Path;

/// The argument that selects this mode.
pub const INIT_ARG: &str = "--init";

/// Boots, serves the sandbox's exchange (one job, or a session's), and powers the VM
/// off. Never returns.
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
    if settings.vsock_port.is_none() {
        tunnel::start();
    }
    match settings.vsock_port {
        Some(port) => serve_restorable(&mut host::VsockHost { port }, &mut jailed)?,
        None => serve_restorable(&mut host::PortHost, &mut jailed)?,
    }
    Ok(())
}
