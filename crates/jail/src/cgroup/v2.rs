//! cgroup v2: one unified hierarchy; controllers are enabled for a subtree from its
//! parent, and socket buffers count in `memory.max`.

use super::{write, CgroupError, CgroupFs, CgroupLimits};
use std::path::{Path, PathBuf};

/// Controllers every level of our subtree enables for the next.
const CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

/// Whether `mount` is the root of a unified hierarchy.
pub(super) fn detect(fs: &dyn CgroupFs, mount: &Path) -> bool {
    fs.exists(&mount.join("cgroup.controllers"))
}

/// Enables the memory, cpu and pids controllers for the children of `dir`.
pub(super) fn enable_controllers(fs: &dyn CgroupFs, dir: &Path) -> Result<(), CgroupError> {
    check_controllers(fs, dir)?;
    write(
        fs,
        &dir.join("cgroup.subtree_control"),
        "+memory +cpu +pids",
    )
}

/// Whether the memory, cpu and pids controllers are available in `dir` (its parent
/// enabled them for it); the first missing one is named.
pub(super) fn check_controllers(fs: &dyn CgroupFs, dir: &Path) -> Result<(), CgroupError> {
    let controllers = dir.join("cgroup.controllers");
    let available = fs.read(&controllers).map_err(|source| CgroupError::Read {
        path: controllers,
        source,
    })?;
    match CONTROLLERS
        .iter()
        .find(|wanted| !available.split_whitespace().any(|c| c == **wanted))
    {
        Some(missing) => Err(CgroupError::MissingController {
            controller: (*missing).to_owned(),
            path: dir.to_owned(),
        }),
        None => Ok(()),
    }
}

/// Writes the limits of the cgroup in `dir`: memory, no swap, the CPU quota, the
/// process cap.
pub(super) fn set_limits(
    fs: &dyn CgroupFs,
    dir: &Path,
    limits: &CgroupLimits,
) -> Result<(), CgroupError> {
    write(fs, &dir.join("memory.max"), limits.memory_bytes)?;
    let swap = dir.join("memory.swap.max");
    if fs.exists(&swap) {
        write(fs, &swap, 0)?;
    }
    let cpu_max = format!("{} {}", limits.cpu_quota_us, limits.cpu_period_us);
    write(fs, &dir.join("cpu.max"), cpu_max)?;
    write(fs, &dir.join("pids.max"), limits.pids_max)?;
    Ok(())
}

/// The file whose `oom_kill` line counts the cgroup's OOM kills.
pub(super) fn memory_events(dir: &Path) -> PathBuf {
    dir.join("memory.events")
}

/// Kills every process of the cgroup in `dir` at once, where the kernel has
/// `cgroup.kill` (5.14); the caller kills what is left one by one either way.
pub(super) fn kill(fs: &dyn CgroupFs, dir: &Path) {
    let kill_file = dir.join("cgroup.kill");
    if fs.exists(&kill_file) {
        let _ = fs.write(&kill_file, "1");
    }
}
