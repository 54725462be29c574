//! cgroup v1: one hierarchy per controller, each mounted at `<mount>/<controller>`.
//! Socket buffers are counted apart from the memory limit and get a share of their own.
//! The freezer's tree holds a folder of each sandbox too, which only freezes
//! (`freezer.rs`).

use super::{freezer, write, CgroupError, CgroupFs, CgroupLimits, TOP};
use std::path::{Path, PathBuf};

/// The controllers that hold the limits.
const LIMITS: [&str; 3] = ["memory", "cpu", "pids"];
/// Controllers a v1 host must mount, in the order of a cgroup's folders: the limits'
/// and the freezer.
pub(super) const CONTROLLERS: [&str; 4] = [LIMITS[0], LIMITS[1], LIMITS[2], freezer::V1_CONTROLLER];
/// The share of the memory limit set aside for socket buffers (see
/// [`CgroupLimits::v1_socket_bytes`]).
pub(super) const SOCKET_SHARE: u64 = 16;

/// Whether `mount` holds the v1 hierarchies of the controllers that hold the limits
/// (the freezer's is checked apart, to be named when it alone is missing).
pub(super) fn detect(fs: &dyn CgroupFs, mount: &Path) -> bool {
    LIMITS
        .iter()
        .all(|c| fs.exists(&mount.join(c).join("tasks")))
}

/// The `sandbox-runner` folder of each controller's tree.
pub(super) fn tops(mount: &Path) -> Vec<PathBuf> {
    CONTROLLERS
        .iter()
        .map(|c| mount.join(c).join(TOP))
        .collect()
}

/// The folder of a cgroup (given as its folders in [`CONTROLLERS`]' order) in the tree
/// of `controller`.
pub(super) fn dir<'a>(dirs: &'a [PathBuf], controller: &str) -> &'a Path {
    let index = CONTROLLERS
        .iter()
        .position(|c| *c == controller)
        .unwrap_or(0);
    &dirs[index]
}

/// Writes the limits of a cgroup: socket buffers (required: without them loopback
/// buffers escape every limit) and the rest of the memory, no swap, the CPU quota,
/// the process cap.
pub(super) fn set_limits(
    fs: &dyn CgroupFs,
    dirs: &[PathBuf],
    limits: &CgroupLimits,
) -> Result<(), CgroupError> {
    let mem = dir(dirs, "memory");
    let sockets = limits.v1_socket_bytes();
    let rest = limits.memory_bytes - sockets;
    let tcp = mem.join("memory.kmem.tcp.limit_in_bytes");
    if !fs.exists(&tcp) {
        return Err(CgroupError::NoSocketLimit(tcp));
    }
    write(fs, &tcp, sockets)?;
    write(fs, &mem.join("memory.limit_in_bytes"), rest)?;
    let memsw = mem.join("memory.memsw.limit_in_bytes");
    if fs.exists(&memsw) {
        write(fs, &memsw, rest)?;
    }
    write(fs, &mem.join("memory.swappiness"), 0)?;
    let cpu = dir(dirs, "cpu");
    write(fs, &cpu.join("cpu.cfs_period_us"), limits.cpu_period_us)?;
    write(fs, &cpu.join("cpu.cfs_quota_us"), limits.cpu_quota_us)?;
    write(fs, &dir(dirs, "pids").join("pids.max"), limits.pids_max)?;
    Ok(())
}

/// Raises a cgroup's memory to `memory_bytes` (split as [`set_limits`] splits it). The
/// kernel wants `memory.limit_in_bytes` at most `memory.memsw.limit_in_bytes`: when
/// both grow, the second grows first.
pub(super) fn raise_memory(
    fs: &dyn CgroupFs,
    dirs: &[PathBuf],
    memory_bytes: u64,
) -> Result<(), CgroupError> {
    let mem = dir(dirs, "memory");
    let sockets = memory_bytes / SOCKET_SHARE;
    let rest = memory_bytes - sockets;
    let memsw = mem.join("memory.memsw.limit_in_bytes");
    if fs.exists(&memsw) {
        write(fs, &memsw, rest)?;
    }
    write(fs, &mem.join("memory.limit_in_bytes"), rest)?;
    write(fs, &mem.join("memory.kmem.tcp.limit_in_bytes"), sockets)
}

/// The file whose `oom_kill` line counts the cgroup's OOM kills.
pub(super) fn oom_control(dirs: &[PathBuf]) -> PathBuf {
    dir(dirs, "memory").join("memory.oom_control")
}
