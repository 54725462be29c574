//! A CPU cgroup of the bench's own, beside the runner's `sandbox-runner` group.
//!
//! The runner puts every sandbox below one `sandbox-runner` cgroup, and the kernel
//! shares CPU between sibling groups by weight: when other work loads the host, all
//! sandboxes together get the share of one group, while an interpreter spawned from
//! the root group competes task by task. Without this, a loaded host measures that
//! difference instead of what a sandbox costs. The bench joins a sibling group with
//! the default weight once the services are started (they stay where they are), so
//! that its direct spawns and the sandboxes are scheduled alike. On an idle host it
//! changes nothing.

use anyhow::Context;
use std::path::{Path, PathBuf};

/// Where cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The bench's CPU cgroup while it is in it.
pub struct CpuGroup {
    dir: PathBuf,
    root: PathBuf,
}

impl CpuGroup {
    /// Makes the group and moves this whole process (every thread) into it.
    pub fn join() -> anyhow::Result<CpuGroup> {
        let mount = Path::new(CGROUP_ROOT);
        let root = if mount.join("cgroup.controllers").exists() {
            mount.to_owned()
        } else {
            mount.join("cpu")
        };
        let dir = root.join(format!("bench-direct-{}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let group = CpuGroup { dir, root };
        move_self(&group.dir)?;
        Ok(group)
    }

    /// The group's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Moves this process back to the root group and removes the group.
    pub fn leave(self) -> anyhow::Result<()> {
        move_self(&self.root)?;
        std::fs::remove_dir(&self.dir).with_context(|| format!("removing {}", self.dir.display()))
    }
}

fn move_self(group: &Path) -> anyhow::Result<()> {
    let procs = group.join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string())
        .with_context(|| format!("moving the bench into {}", procs.display()))
}
