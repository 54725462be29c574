//! The image cache's upkeep: pruning removes every finished image but `current` and
//! those a running runner leases (see [`crate::Lease`]): it takes each image's
//! exclusive lock without waiting, and removes the image only if it got it, while
//! holding it.

use super::ImageError;
use crate::INFO_FILE;
use nix::fcntl::{Flock, FlockArg};
use std::fs;
use std::path::{Path, PathBuf};

/// Folders of the cache that are not images.
const NOT_IMAGES: [&str; 2] = ["downloads", "agent-target"];

/// What a prune did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Images removed, with the bytes they held.
    pub removed: Vec<(String, u64)>,
    /// Images kept because a runner holds them.
    pub in_use: Vec<String>,
}

/// Removes from the cache `out` every finished image that is neither `current` nor
/// leased, and unfinished builds (the caller holds the build lock).
pub fn prune(out: &Path) -> Result<Pruned, ImageError> {
    let current = fs::read_link(out.join("current"))
        .ok()
        .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()));
    let mut pruned = Pruned::default();
    let entries = fs::read_dir(out).map_err(|e| ImageError::io("reading", out, e))?;
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with('.') || NOT_IMAGES.contains(&name.as_str()) {
            continue;
        }
        if Some(&name) == current.as_ref() {
            continue;
        }
        if name.ends_with(".partial") {
            remove(&dir)?;
            continue;
        }
        let Ok(info) = fs::File::open(dir.join(INFO_FILE)) else {
            // Not an image this builder made: left alone.
            continue;
        };
        match Flock::lock(info, FlockArg::LockExclusiveNonblock) {
            Ok(_held) => {
                let bytes = size(&dir);
                remove(&dir)?;
                pruned.removed.push((name, bytes));
            }
            Err(_) => pruned.in_use.push(name),
        }
    }
    Ok(pruned)
}

fn remove(dir: &Path) -> Result<(), ImageError> {
    fs::remove_dir_all(dir).map_err(|e| ImageError::io("removing", dir, e))
}

/// Bytes the files below `dir` hold on disk.
fn size(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => todo.push(entry.path()),
                Ok(m) => total += m.blocks() * 512,
                Err(_) => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease;

    fn image(out: &Path, key: &str) -> PathBuf {
        let dir = out.join(key);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(INFO_FILE), "{}").unwrap();
        fs::write(dir.join("rootfs.ext4"), vec![1u8; 8192]).unwrap();
        dir
    }

    #[test]
    fn prune_keeps_current_and_leased_images_and_removes_the_rest() {
        let out = std::env::temp_dir().join(format!("image-prune-{}", std::process::id()));
        let _ = fs::remove_dir_all(&out);
        fs::create_dir_all(out.join("downloads")).unwrap();
        image(&out, "aaaa");
        image(&out, "bbbb");
        let leased = image(&out, "cccc");
        fs::create_dir_all(out.join("dddd.partial")).unwrap();
        fs::create_dir_all(out.join("not-ours")).unwrap();
        std::os::unix::fs::symlink("aaaa", out.join("current")).unwrap();

        let held = lease(&leased).unwrap();
        let pruned = prune(&out).unwrap();
        assert_eq!(pruned.in_use, ["cccc"]);
        assert_eq!(pruned.removed.len(), 1, "{pruned:?}");
        assert_eq!(pruned.removed[0].0, "bbbb");
        assert!(pruned.removed[0].1 >= 8192, "{pruned:?}");
        for kept in ["aaaa", "cccc", "downloads", "not-ours"] {
            assert!(out.join(kept).exists(), "{kept} was removed");
        }
        assert!(!out.join("bbbb").exists());
        assert!(!out.join("dddd.partial").exists());

        drop(held);
        let pruned = prune(&out).unwrap();
        assert_eq!(pruned.removed.len(), 1, "{pruned:?}");
        assert_eq!(pruned.removed[0].0, "cccc");
        assert!(out.join("aaaa").exists(), "current stays");
        assert!(
            lease(&out.join("cccc")).is_err(),
            "a pruned image cannot be leased"
        );
        let _ = fs::remove_dir_all(&out);
    }
}
