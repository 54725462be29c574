//! The cgroup freezer: what holds a session's sandbox between its calls. A frozen
//! process does not run whatever signal it gets (SIGCONT too, which ends a SIGSTOP,
//! and which a program can have a timer send it): cgroup v1's `freezer` controller
//! (`freezer.state`), cgroup v2's `cgroup.freeze`.
//!
//! Freezing takes a moment: the kernel stops each process where it next can, and says
//! when all are (v1 `freezer.state` reads `FROZEN`, v2 `cgroup.events` has `frozen 1`);
//! [`Freezer::freeze`] waits for that, within [`FREEZE_LIMIT`]. Thawing is immediate.
//!
//! Killing a frozen cgroup: on v1 a frozen process takes no signal, SIGKILL included,
//! until it thaws; on v2 a fatal signal ends it (and `cgroup.kill` works) frozen or
//! not. The kill paths of [`Cgroup`](super::Cgroup) and [`Hierarchy`](super::Hierarchy)
//! send SIGKILL first and thaw after ([`thaw_dir`]), so that no process of a frozen
//! sandbox runs again before it dies.

use super::{write, CgroupError, CgroupFs, Version};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The v1 controller, mounted at `<mount>/freezer`.
pub(super) const V1_CONTROLLER: &str = "freezer";
/// v1: the state file (`THAWED`, `FREEZING`, `FROZEN`).
const V1_STATE: &str = "freezer.state";
/// v2: the file that freezes (`1`) or thaws (`0`) the cgroup.
const V2_FREEZE: &str = "cgroup.freeze";
/// v2: the file whose `frozen` line says whether every process is frozen.
const V2_EVENTS: &str = "cgroup.events";
/// How long freezing may take before it counts as failed.
pub const FREEZE_LIMIT: Duration = Duration::from_secs(5);
/// The longest pause between two reads of the state while freezing.
const POLL_MAX: Duration = Duration::from_millis(10);

/// The freezer of one sandbox's cgroup.
#[derive(Debug, Clone)]
pub struct Freezer {
    version: Version,
    /// The cgroup's folder in the freezer's tree (v1) or the unified one (v2).
    dir: PathBuf,
    fs: Arc<dyn CgroupFs>,
}

impl Freezer {
    pub(super) fn new(version: Version, dir: PathBuf, fs: Arc<dyn CgroupFs>) -> Freezer {
        Freezer { version, dir, fs }
    }

    /// Freezes every process of the cgroup, and returns once the kernel says that all
    /// are frozen (at most [`FREEZE_LIMIT`]).
    pub fn freeze(&self) -> Result<(), CgroupError> {
        self.freeze_within(FREEZE_LIMIT)
    }

    /// [`freeze`](Self::freeze), waiting at most `limit`.
    pub(super) fn freeze_within(&self, limit: Duration) -> Result<(), CgroupError> {
        let deadline = Instant::now() + limit;
        match self.version {
            Version::V1 => write(&*self.fs, &self.dir.join(V1_STATE), "FROZEN")?,
            Version::V2 => write(&*self.fs, &self.dir.join(V2_FREEZE), 1)?,
        }
        let mut pause = Duration::from_micros(50);
        while !self.frozen()? {
            if Instant::now() >= deadline {
                return Err(CgroupError::FreezeTimeout {
                    path: self.dir.clone(),
                    limit,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(POLL_MAX);
        }
        Ok(())
    }

    /// Lets the cgroup's processes run again.
    pub fn thaw(&self) -> Result<(), CgroupError> {
        match self.version {
            Version::V1 => write(&*self.fs, &self.dir.join(V1_STATE), "THAWED"),
            Version::V2 => write(&*self.fs, &self.dir.join(V2_FREEZE), 0),
        }
    }

    /// Whether the kernel says that every process of the cgroup is frozen.
    pub fn frozen(&self) -> Result<bool, CgroupError> {
        let path = match self.version {
            Version::V1 => self.dir.join(V1_STATE),
            Version::V2 => self.dir.join(V2_EVENTS),
        };
        let text = self.fs.read(&path).map_err(|source| CgroupError::Read {
            path: path.clone(),
            source,
        })?;
        Ok(match self.version {
            Version::V1 => text.trim() == "FROZEN",
            Version::V2 => text.lines().any(|line| line.trim() == "frozen 1"),
        })
    }
}

/// Thaws the cgroup folder `dir` if it is a freezer's (whichever version), for the kill
/// paths: errors are ignored (the folder may be gone already).
pub(super) fn thaw_dir(fs: &dyn CgroupFs, dir: &Path) {
    for (file, value) in [(V1_STATE, "THAWED"), (V2_FREEZE, "0")] {
        let path = dir.join(file);
        if fs.exists(&path) {
            let _ = fs.write(&path, value);
        }
    }
}

/// Checks that a v1 host mounts the freezer under `mount`: a runner does not start
/// without it (see docs/security.md, "Sessions between their calls").
pub(super) fn check_v1(fs: &dyn CgroupFs, mount: &Path) -> Result<(), CgroupError> {
    let tree = mount.join(V1_CONTROLLER);
    if fs.exists(&tree.join("tasks")) {
        Ok(())
    } else {
        Err(CgroupError::NoV1Freezer(tree))
    }
}

/// Checks that the v2 cgroup `dir` (not a root: a root has no freezer) can be frozen
/// (Linux 5.2 and later).
pub(super) fn check_v2(fs: &dyn CgroupFs, dir: &Path) -> Result<(), CgroupError> {
    let file = dir.join(V2_FREEZE);
    if fs.exists(&file) {
        Ok(())
    } else {
        Err(CgroupError::NoV2Freezer(file))
    }
}
