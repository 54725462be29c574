//! The store on disk: its folders, the sets in it, their manifests, `current`.
//!
//! ```text
//! <root>/sets/<key>/python/             pip --target tree (PYTHONPATH=<that>)
//! <root>/sets/<key>/python/sandbox_plots.py
//! <root>/sets/<key>/node/node_modules/  npm's install
//! <root>/sets/<key>/manifest.json       Manifest
//! <root>/current -> sets/<key>          replaced atomically
//! <root>/deps/<key>/python/             an inline set: only what the base set lacks
//! <root>/deps/<key>/manifest.json       Manifest (no node packages)
//! <root>/deps/requests/<sha256>         request digest -> deps key
//! <root>/tmp/                           work trees, renamed into place when finished
//! ```

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::tree::{remove_tree, WorkTree};

/// The name of a set's manifest file.
pub const MANIFEST_FILE: &str = "manifest.json";

/// A store of package sets (see the module's layout).
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// A finished set: its folder and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageSet {
    /// The set's folder, `<root>/sets/<key>` (or `<root>/deps/<key>`), canonical.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

/// `manifest.json`: what a set holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The set's key: the hex SHA-256 of its canonical description.
    pub key: String,
    /// The Python it was resolved for (`3.11.2`).
    pub python_version: String,
    /// Its Python packages, sorted by name.
    pub python: Vec<PythonPackage>,
    /// Its npm packages (every entry of the lock), sorted.
    pub node: Vec<NodePackage>,
    /// Disk space of `python/`, in bytes.
    pub python_bytes: u64,
    /// Disk space of `node/`, in bytes.
    pub node_bytes: u64,
    /// When it was built (RFC 3339, UTC).
    pub built_at: String,
}

/// One wheel of a set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PythonPackage {
    /// PEP 503 normalised name.
    pub name: String,
    /// Version.
    pub version: String,
    /// SHA-256 of the wheel file, hex.
    pub sha256: String,
}

/// One npm package of a set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodePackage {
    /// Name (`@scope/name` for scoped packages).
    pub name: String,
    /// Version.
    pub version: String,
    /// The lock's Subresource Integrity string (empty for bundled packages).
    pub integrity: String,
}

/// A failure reading or changing the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A manifest that is not what this crate writes.
    #[error("{}: not a set manifest: {source}", path.display())]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// `current` points somewhere other than `sets/<key>`.
    #[error("{}: points to {target:?}, not to sets/<key>", path.display())]
    BadCurrent {
        /// The link.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
    },
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl PackageSet {
    /// The set's key.
    pub fn key(&self) -> &str {
        &self.manifest.key
    }

    /// The pip `--target` tree: what goes on `PYTHONPATH`.
    pub fn python_dir(&self) -> PathBuf {
        self.dir.join("python")
    }

    /// The `node_modules` folder (for `NODE_PATH`).
    pub fn node_modules_dir(&self) -> PathBuf {
        self.dir.join("node").join("node_modules")
    }

    /// Reads the set in `dir`.
    pub fn open(dir: &Path) -> Result<PackageSet, StoreError> {
        let dir = fs::canonicalize(dir).map_err(io_error(dir))?;
        let path = dir.join(MANIFEST_FILE);
        let bytes = fs::read(&path).map_err(io_error(&path))?;
        let manifest = serde_json::from_slice(&bytes).map_err(|source| StoreError::Manifest {
            path: path.clone(),
            source,
        })?;
        Ok(PackageSet { dir, manifest })
    }
}

impl Store {
    /// Opens the store at `root`, making its folders if they are missing.
    pub fn open(root: impl AsRef<Path>) -> Result<Store, StoreError> {
        let root = root.as_ref();
        for sub in ["sets", "deps/requests", "tmp"] {
            let dir = root.join(sub);
            fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        }
        let root = fs::canonicalize(root).map_err(io_error(root))?;
        Ok(Store { root })
    }

    /// The store's folder (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The set `current` points to, or `None` before the first build.
    pub fn current(&self) -> Result<Option<PackageSet>, StoreError> {
        let link = self.root.join("current");
        let target = match fs::read_link(&link) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StoreError::Io { path: link, source }),
        };
        let key = target
            .strip_prefix("sets")
            .ok()
            .and_then(|k| k.to_str())
            .filter(|k| is_key(k));
        match key {
            Some(key) => PackageSet::open(&self.set_dir(key)).map(Some),
            None => Err(StoreError::BadCurrent { path: link, target }),
        }
    }

    /// The base set with this key, if it was built.
    pub fn set(&self, key: &str) -> Result<Option<PackageSet>, StoreError> {
        if !is_key(key) || !self.set_dir(key).join(MANIFEST_FILE).exists() {
            return Ok(None);
        }
        PackageSet::open(&self.set_dir(key)).map(Some)
    }

    /// Removes what builds and resolutions left under `tmp/` when they were killed
    /// (a finished one leaves nothing): entries not modified for `min_age`, which
    /// should be longer than any build's timeout. Returns how many were removed.
    pub fn remove_stale_work(&self, min_age: Duration) -> Result<usize, StoreError> {
        let tmp = self.tmp_dir();
        let now = SystemTime::now();
        let mut removed = 0;
        for entry in fs::read_dir(&tmp).map_err(io_error(&tmp))? {
            let path = entry.map_err(io_error(&tmp))?.path();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue; // removed meanwhile
            };
            let age = meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or_default();
            if age >= min_age {
                remove_tree(&path).map_err(io_error(&path))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    pub(crate) fn set_dir(&self, key: &str) -> PathBuf {
        self.root.join("sets").join(key)
    }

    pub(crate) fn deps_dir(&self, key: &str) -> PathBuf {
        self.root.join("deps").join(key)
    }

    pub(crate) fn request_file(&self, digest: &str) -> PathBuf {
        self.root.join("deps").join("requests").join(digest)
    }

    /// `<root>/tmp/`: work in progress (builds, copies, scratches of [`crate::Unconfined`]).
    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// A fresh work tree under `tmp/`.
    pub(crate) fn work_tree(&self, prefix: &str) -> Result<WorkTree, StoreError> {
        let tmp = self.tmp_dir();
        WorkTree::new(&tmp, prefix).map_err(io_error(&tmp))
    }

    /// Points `current` at `sets/<key>`: a new link under `tmp/`, renamed over the old
    /// one, so a reader always finds a whole link.
    pub(crate) fn point_current(&self, key: &str) -> Result<(), StoreError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let tmp = self.tmp_dir().join(format!(
            "current-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(Path::new("sets").join(key), &tmp).map_err(io_error(&tmp))?;
        let link = self.root.join("current");
        fs::rename(&tmp, &link).map_err(|source| {
            let _ = fs::remove_file(&tmp);
            StoreError::Io { path: link, source }
        })
    }
}

/// Whether `s` looks like a key: 64 lowercase hex digits.
pub(crate) fn is_key(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_store_has_no_current_set() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("store")).unwrap();
        assert!(store.root().join("sets").is_dir());
        assert!(store.root().join("deps/requests").is_dir());
        assert!(store.root().join("tmp").is_dir());
        assert_eq!(store.current().unwrap(), None);
        assert_eq!(store.set(&"0".repeat(64)).unwrap(), None);
    }

    #[test]
    fn current_follows_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let key = "ab".repeat(32);
        let set = store.set_dir(&key);
        fs::create_dir_all(set.join("python")).unwrap();
        let manifest = Manifest {
            key: key.clone(),
            python_version: "3.11.2".into(),
            python: vec![],
            node: vec![],
            python_bytes: 0,
            node_bytes: 0,
            built_at: "2026-01-01T00:00:00Z".into(),
        };
        fs::write(
            set.join(MANIFEST_FILE),
            serde_json::to_vec(&manifest).unwrap(),
        )
        .unwrap();
        store.point_current(&key).unwrap();
        store.point_current(&key).unwrap();
        let current = store.current().unwrap().unwrap();
        assert_eq!(current.manifest, manifest);
        assert_eq!(
            current.python_dir(),
            store.root().join("sets").join(&key).join("python")
        );
        assert_eq!(fs::read_dir(store.tmp_dir()).unwrap().count(), 0);

        std::os::unix::fs::symlink("/etc", store.tmp_dir().join("x")).unwrap();
        fs::rename(store.tmp_dir().join("x"), store.root().join("current")).unwrap();
        assert!(matches!(
            store.current(),
            Err(StoreError::BadCurrent { .. })
        ));
    }

    #[test]
    fn stale_work_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let work = store.work_tree("build").unwrap();
        fs::create_dir_all(work.path().join("set/python")).unwrap();
        crate::tree::make_read_only(&work.path().join("set"), true).unwrap();
        let path = work.path().to_path_buf();
        std::mem::forget(work); // as if the process had been killed
        assert_eq!(
            store.remove_stale_work(Duration::from_secs(3600)).unwrap(),
            0
        );
        assert!(path.exists());
        assert_eq!(store.remove_stale_work(Duration::ZERO).unwrap(), 1);
        assert!(!path.exists());
    }
}
