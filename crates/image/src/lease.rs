//! A running runner's hold on the image it boots from: a shared `flock` on the image's
//! `image.json`, held for the runner's lifetime. Pruning takes the exclusive lock
//! without waiting, and removes an image only if it got it, while holding it. A runner
//! that opens an image just as it is pruned finds it gone once it holds its lock, and
//! says so.

use crate::INFO_FILE;
use nix::fcntl::{Flock, FlockArg};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Why an image could not be leased.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The image's `image.json` could not be opened or locked.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// The image was removed between opening and locking it.
    #[error("the image {} was pruned as it was opened", .0.display())]
    Pruned(PathBuf),
}

/// A running runner's hold on an image folder.
#[derive(Debug)]
pub struct Lease {
    _lock: Flock<fs::File>,
}

/// Takes a lease on the finished image in `dir` (already resolved, not `current`).
pub fn lease(dir: &Path) -> Result<Lease, LeaseError> {
    let info = dir.join(INFO_FILE);
    let file = fs::File::open(&info).map_err(|source| LeaseError::Io {
        action: "opening",
        path: info.clone(),
        source,
    })?;
    let lock = Flock::lock(file, FlockArg::LockShared).map_err(|(_, e)| LeaseError::Io {
        action: "locking",
        path: info.clone(),
        source: e.into(),
    })?;
    if !info.exists() {
        return Err(LeaseError::Pruned(dir.to_owned()));
    }
    Ok(Lease { _lock: lock })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leased_image_cannot_be_locked_for_pruning_and_a_pruned_one_cannot_be_leased() {
        let dir = std::env::temp_dir().join(format!("image-lease-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(INFO_FILE), "{}").unwrap();

        let held = lease(&dir).unwrap();
        let info = fs::File::open(dir.join(INFO_FILE)).unwrap();
        let info = match Flock::lock(info, FlockArg::LockExclusiveNonblock) {
            Ok(_) => panic!("pruning got the lock of a leased image"),
            Err((info, _)) => info,
        };
        drop(held);
        assert!(Flock::lock(info, FlockArg::LockExclusiveNonblock).is_ok());

        fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(
            lease(&dir),
            Err(LeaseError::Io {
                action: "opening",
                ..
            })
        ));
    }
}
