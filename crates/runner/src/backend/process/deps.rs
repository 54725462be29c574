//! A program's inline dependencies, mounted read-only into its running sandbox.
//!
//! A sandbox's mount namespace is its own, and nobody inside may mount, so the runner
//! mounts from the host, through mount propagation:
//!
//! - at start, `<state>/deps/<instance>/sandboxes` is bound onto itself and made a
//!   *shared* mount (`<instance>` names this life of this runner, as its cgroups do, so
//!   that runners sharing a host keep apart, and one that starts again removes what a
//!   dead one left);
//!   each sandbox gets a folder below it, which its jail binds at
//!   [`DEPS`](sandbox_jail::layout::DEPS) as a *slave* (the sandbox receives mounts from
//!   the host, and sends none back);
//! - to give sandbox `id` the set `key`, the runner binds the set's folder in a private
//!   staging mount, makes that bind read-only, and moves it onto
//!   `sandboxes/<id>/<key>`: the move propagates a copy, read-only as it was made, into
//!   that sandbox alone (every other sandbox's slave is rooted at its own folder).
//!
//! A mount changed after it propagated would not change its copies: that is why the
//! bind is made read-only before the move, never after. Inside, the copy is locked to
//! the sandbox's less privileged user namespace: it can be neither unmounted nor made
//! writable there.

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use sandbox_jail::cgroup::{instance_alive, instance_name};
use std::fs;
use std::path::{Path, PathBuf};

/// Why inline dependencies could not be mounted.
#[derive(Debug, thiserror::Error)]
pub enum DepsMountError {
    /// A folder could not be made or read.
    #[error("inline dependencies: {path}: {source}")]
    Io {
        /// The folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: std::io::Error,
    },
    /// A mount step failed.
    #[error("inline dependencies: {step} {path}: {source}")]
    Mount {
        /// What was being done.
        step: &'static str,
        /// The mount point concerned.
        path: PathBuf,
        /// What failed underneath.
        source: nix::Error,
    },
    /// A set's key is not a plain name.
    #[error("inline dependencies: bad set key {0:?}")]
    BadKey(String),
}

/// The runner's shared mount for inline dependencies, and its staging area.
#[derive(Debug)]
pub struct DepsMounts {
    /// The shared mount: a folder per sandbox below it.
    shared: PathBuf,
    /// A private mount where a bind is made read-only before it is moved.
    stage: PathBuf,
}

impl DepsMounts {
    /// Sets up `<state_dir>/deps/<instance>`, first removing what dead runners left in
    /// `<state_dir>/deps`.
    pub fn setup(state_dir: &Path) -> Result<DepsMounts, DepsMountError> {
        let all = state_dir.join("deps");
        remove_dead(&all);
        let root = all.join(instance_name());
        let mounts = DepsMounts {
            shared: root.join("sandboxes"),
            stage: root.join("stage"),
        };
        for (dir, propagation) in [
            (&mounts.shared, MsFlags::MS_SHARED),
            (&mounts.stage, MsFlags::MS_PRIVATE),
        ] {
            if dir.exists() {
                fs::remove_dir_all(dir).map_err(|source| io(dir, source))?;
            }
            make_dir(dir)?;
            mount_step("binding", Some(dir.as_path()), dir, MsFlags::MS_BIND)?;
            mount_step("setting the propagation of", None, dir, propagation)?;
        }
        Ok(mounts)
    }

    /// Makes sandbox `id`'s folder (for its jail to bind) and returns it.
    pub fn sandbox_dir(&self, id: u64) -> Result<PathBuf, DepsMountError> {
        let dir = self.shared.join(id.to_string());
        make_dir(&dir)?;
        Ok(dir)
    }

    /// Mounts `source` read-only as set `key` in sandbox `id` (nothing when it is
    /// there already) and returns the folder the sandbox sees it at.
    pub fn mount(&self, id: u64, key: &str, source: &Path) -> Result<String, DepsMountError> {
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(DepsMountError::BadKey(key.to_owned()));
        }
        let inside = format!("{}/{key}", sandbox_jail::layout::DEPS);
        let target = self.shared.join(id.to_string()).join(key);
        if target.exists() {
            return Ok(inside);
        }
        let staged = self.stage.join(format!("{id}-{key}"));
        make_dir(&staged)?;
        let result = self.stage_and_move(source, &staged, &target);
        let _ = fs::remove_dir(&staged);
        if result.is_err() {
            let _ = umount2(&target, MntFlags::MNT_DETACH);
            let _ = fs::remove_dir(&target);
        }
        result.map(|()| inside)
    }

    fn stage_and_move(
        &self,
        source: &Path,
        staged: &Path,
        target: &Path,
    ) -> Result<(), DepsMountError> {
        mount_step("binding", Some(source), staged, MsFlags::MS_BIND)?;
        let moved = (|| {
            mount_step("making private", None, staged, MsFlags::MS_PRIVATE)?;
            let read_only = MsFlags::MS_REMOUNT
                | MsFlags::MS_BIND
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV;
            mount_step("making read-only", None, staged, read_only)?;
            make_dir(target)?;
            mount_step("moving", Some(staged), target, MsFlags::MS_MOVE)
        })();
        if moved.is_err() {
            let _ = umount2(staged, MntFlags::MNT_DETACH);
        }
        moved
    }

    /// Unmounts and removes this runner's folders (every sandbox must be gone).
    pub fn remove(&self) {
        if let Some(root) = self.shared.parent() {
            unmount_below(root);
            let _ = fs::remove_dir_all(root);
        }
    }

    /// Unmounts everything sandbox `id` was given and removes its folder. A folder
    /// that holds nothing was given no set (each is mounted on a folder of its own,
    /// which a sandbox, seeing it read-only, cannot make): it is removed without
    /// reading the mount table, as most sandboxes' are.
    pub fn release(&self, id: u64) {
        let dir = self.shared.join(id.to_string());
        if fs::remove_dir(&dir).is_ok() {
            return;
        }
        unmount_below(&dir);
        let _ = fs::remove_dir_all(&dir);
    }
}

/// Removes the folders (and unmounts the mounts) of runner instances no longer alive.
fn remove_dead(all: &Path) {
    let Ok(entries) = fs::read_dir(all) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !instance_alive(&name) {
            unmount_below(&entry.path());
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Detaches every mount at or below `dir` (deepest first), as this process sees them.
fn unmount_below(dir: &Path) {
    let Ok(table) = fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<PathBuf> = table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .filter(|point| point.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for point in points {
        let _ = umount2(&point, MntFlags::MNT_DETACH);
    }
}

/// A mount point as mountinfo writes it (space, tab, newline and backslash escaped).
fn unescape(field: &str) -> PathBuf {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    PathBuf::from(out)
}

fn mount_step(
    step: &'static str,
    source: Option<&Path>,
    target: &Path,
    flags: MsFlags,
) -> Result<(), DepsMountError> {
    mount(source, target, None::<&str>, flags, None::<&str>).map_err(|source| {
        DepsMountError::Mount {
            step,
            path: target.to_owned(),
            source,
        }
    })
}

fn make_dir(dir: &Path) -> Result<(), DepsMountError> {
    fs::create_dir_all(dir).map_err(|source| io(dir, source))
}

fn io(path: &Path, source: std::io::Error) -> DepsMountError {
    DepsMountError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::unescape;
    use std::path::Path;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b\011c"), Path::new("/a b\tc"));
        assert_eq!(unescape(r"/plain"), Path::new("/plain"));
        assert_eq!(unescape(r"/x\zz"), Path::new(r"/x\zz"));
    }
}
