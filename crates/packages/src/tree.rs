//! Directory trees of the store: work trees under `tmp/` that remove themselves, sizes,
//! making a finished tree read-only, and writing small files atomically.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh directory under the store's `tmp/`, removed with what is left in it when
/// dropped. Everything is built in one and renamed out of it when finished, so a
/// failure or a crash never leaves half a set under `sets/` or `deps/`.
#[derive(Debug)]
pub(crate) struct WorkTree {
    path: PathBuf,
}

impl WorkTree {
    /// Makes `<tmp>/<prefix>-<pid>-<n>-<nanos>`.
    pub fn new(tmp: &Path, prefix: &str) -> io::Result<WorkTree> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "{prefix}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = tmp.join(name);
        fs::create_dir(&path)?;
        Ok(WorkTree { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkTree {
    fn drop(&mut self) {
        // Blocking, but what is left is small unless a step failed, and then it is at
        // most one set.
        if let Err(e) = remove_tree(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove a work tree");
        }
    }
}

/// Removes `path` and everything under it, read-only directories included (an
/// ordinary user cannot remove entries of a directory it may not write).
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => return fs::remove_file(path),
        Ok(_) => {}
    }
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    fs::remove_dir_all(path)
}

/// The disk space a tree takes, as `du` counts it: allocated blocks, each hard-linked
/// file once.
pub(crate) fn tree_size(path: &Path) -> io::Result<u64> {
    let mut seen = HashSet::new();
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = fs::symlink_metadata(&p)?;
        if m.nlink() > 1 && !m.is_dir() && !seen.insert((m.dev(), m.ino())) {
            continue;
        }
        total += m.blocks() * 512;
        if m.is_dir() {
            for entry in fs::read_dir(&p)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(total)
}

/// Makes everything under `path` read-only: directories 0555, executables 0555, other
/// files 0444, owned by root when this process is root. `path` itself is left alone
/// when `include_top` is false: an ordinary user can only rename a directory it may
/// write, so the top is done after the rename.
pub(crate) fn make_read_only(path: &Path, include_top: bool) -> io::Result<()> {
    let as_root = nix::unistd::geteuid().is_root();
    let mut stack = vec![(path.to_path_buf(), true)];
    while let Some((p, top)) = stack.pop() {
        let m = fs::symlink_metadata(&p)?;
        if m.file_type().is_symlink() {
            if as_root {
                std::os::unix::fs::lchown(&p, Some(0), Some(0))?;
            }
            continue;
        }
        if m.is_dir() {
            for entry in fs::read_dir(&p)? {
                stack.push((entry?.path(), false));
            }
        }
        if top && !include_top {
            continue;
        }
        if as_root {
            std::os::unix::fs::lchown(&p, Some(0), Some(0))?;
        }
        let mode = if m.is_dir() || m.mode() & 0o111 != 0 {
            0o555
        } else {
            0o444
        };
        fs::set_permissions(&p, fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a
/// rename, so a reader sees the old content or the new, never a part.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    fs::write(&tmp, bytes)?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// Whether `e` says that the target of a directory rename already exists.
pub(crate) fn is_taken(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::AlreadyExists | io::ErrorKind::DirectoryNotEmpty
    ) || e.raw_os_error() == Some(nix::libc::ENOTEMPTY)
        || e.raw_os_error() == Some(nix::libc::EEXIST)
}

/// Seconds since the epoch as an RFC 3339 UTC time (`2026-05-01T12:00:00Z`).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_709_210_096)),
            "2024-02-29T12:34:56Z"
        );
    }

    #[test]
    fn read_only_trees_are_sized_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let work = WorkTree::new(dir.path(), "t").unwrap();
        let root = work.path().to_path_buf();
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/b/f"), vec![1u8; 10_000]).unwrap();
        fs::write(root.join("x.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(root.join("x.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("a", root.join("link")).unwrap();
        assert!(tree_size(&root).unwrap() >= 10_000);

        make_read_only(&root, false).unwrap();
        let mode = |p: &str| fs::metadata(root.join(p)).unwrap().mode() & 0o7777;
        assert_eq!(mode("a"), 0o555);
        assert_eq!(mode("a/b/f"), 0o444);
        assert_eq!(mode("x.sh"), 0o555);
        assert_ne!(fs::metadata(&root).unwrap().mode() & 0o7777, 0o555);
        make_read_only(&root, true).unwrap();
        assert_eq!(fs::metadata(&root).unwrap().mode() & 0o7777, 0o555);

        drop(work);
        assert!(!root.exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn atomic_writes_replace() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
