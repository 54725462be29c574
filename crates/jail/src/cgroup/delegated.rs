//! A cgroup v2 subtree delegated to an ordinary user: where a runner without root gets
//! its sandboxes' limits.
//!
//! An ordinary user may make cgroups, set their limits and move processes between them
//! only inside a subtree whose folder and `cgroup.procs` and `cgroup.subtree_control`
//! files belong to them: systemd hands one over for a unit with `Delegate=yes` (for
//! example `systemd-run --user --scope -p Delegate=yes …`), and an admin can do the same
//! by hand (`chown`). Moving a process needs write access to the `cgroup.procs` of the
//! common ancestor of where it is and where it goes, so the runner must already run
//! inside the subtree: its own cgroup (from `/proc/self/cgroup`) is the base.
//!
//! The kernel lets a cgroup enable controllers for its children only while it holds no
//! process itself, so the base's processes (the runner, and whatever shares its unit)
//! move to a leaf of their own, [`LEAF`], before the base enables the memory, cpu and
//! pids controllers below it. A runner started from that leaf (by one that ran before)
//! takes its parent as the base again. Below the base, the layout is the one of
//! [`Hierarchy`](super::Hierarchy): `sandbox-runner/<instance>/<sandbox>`.

use super::{make_dir, v2, CgroupError, CgroupFs};
use std::io;
use std::path::{Path, PathBuf};

/// The leaf of the base that the base's own processes move to.
pub const LEAF: &str = "supervisor";

/// The files of a cgroup that its user must be able to write for it to be delegated.
const DELEGATED_FILES: [&str; 2] = ["cgroup.procs", "cgroup.subtree_control"];

/// The path of this process's cgroup in the unified hierarchy, from the text of
/// `/proc/self/cgroup` (its `0::` line), relative to the hierarchy's root.
pub fn own_path(proc_self_cgroup: &str) -> Option<PathBuf> {
    proc_self_cgroup.lines().find_map(|line| {
        let path = line.strip_prefix("0::")?;
        Some(PathBuf::from(path.trim_start_matches('/')))
    })
}

/// Finds the delegated base for a process whose cgroup is `own` (relative to `mount`),
/// moves the base's processes to its [`LEAF`] and enables the controllers for the
/// base's children. Returns the base.
pub(super) fn prepare(fs: &dyn CgroupFs, mount: &Path, own: &Path) -> Result<PathBuf, CgroupError> {
    if !v2::detect(fs, mount) {
        return Err(CgroupError::NoUnified(mount.to_owned()));
    }
    let own = mount.join(own);
    let base = match own.parent() {
        Some(parent) if own.ends_with(LEAF) && delegated(fs, parent) => parent.to_owned(),
        _ => own,
    };
    if base == mount || !delegated(fs, &base) {
        return Err(CgroupError::NotDelegated(base));
    }
    v2::check_controllers(fs, &base)?;
    let leaf = base.join(LEAF);
    make_dir(fs, &leaf)?;
    move_processes(fs, &base, &leaf)?;
    v2::enable_controllers(fs, &base)?;
    Ok(base)
}

/// Whether this process's user may write the files that delegation hands over.
fn delegated(fs: &dyn CgroupFs, dir: &Path) -> bool {
    DELEGATED_FILES
        .iter()
        .all(|file| fs.writable(&dir.join(file)))
}

/// Moves every process of `from` to `to`, one at a time, as the kernel wants them.
pub(super) fn move_processes(fs: &dyn CgroupFs, from: &Path, to: &Path) -> Result<(), CgroupError> {
    let procs = from.join("cgroup.procs");
    let listed = fs.read(&procs).map_err(|source| CgroupError::Read {
        path: procs.clone(),
        source,
    })?;
    let target = to.join("cgroup.procs");
    for pid in listed.split_whitespace() {
        match fs.write(&target, pid) {
            Ok(()) => {}
            // It ended between the read and the move.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(source) => return Err(write_error(&target, pid, source)),
        }
    }
    Ok(())
}

fn write_error(path: &Path, value: &str, source: io::Error) -> CgroupError {
    CgroupError::Write {
        path: path.to_owned(),
        value: value.to_owned(),
        source,
    }
}
