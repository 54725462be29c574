//! The runner's package set in the image: the set `current` points at in the package
//! store (made by `sandbox-runner packages build`) is copied whole to
//! [`IMAGE_PACKAGES`], where the guest's jail shows it read-only at `/opt/packages`, as
//! a host's jail does. The set's key is part of the image's cache key.

use super::ImageError;
use sandbox_jail::layout::IMAGE_PACKAGES;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The store's current set: its key (its folder's name) and folder, with its size.
pub struct PackageSet {
    /// The set's key.
    pub key: String,
    /// Its folder in the store.
    pub dir: PathBuf,
    /// Bytes of its regular files.
    pub bytes: u64,
    /// Its files, folders and links.
    pub entries: usize,
}

impl PackageSet {
    /// The set `<store>/current` points at; none when the store has no current set.
    pub fn current(store: &Path) -> Result<Option<PackageSet>, ImageError> {
        let link = store.join("current");
        if fs::symlink_metadata(&link).is_err() {
            return Ok(None);
        }
        let dir = fs::canonicalize(&link).map_err(|e| ImageError::io("resolving", &link, e))?;
        let key = dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (mut bytes, mut entries) = (0, 0);
        measure(&dir, &mut bytes, &mut entries)?;
        Ok(Some(PackageSet {
            key,
            dir,
            bytes,
            entries,
        }))
    }

    /// Copies the set into the staged root at [`IMAGE_PACKAGES`] (modes kept, links
    /// copied as links).
    pub fn stage(&self, root: &Path) -> Result<(), ImageError> {
        let dest = root.join(IMAGE_PACKAGES.trim_start_matches('/'));
        copy_tree(&self.dir, &dest)
    }
}

fn measure(dir: &Path, bytes: &mut u64, entries: &mut usize) -> Result<(), ImageError> {
    for entry in fs::read_dir(dir).map_err(|e| ImageError::io("reading", dir, e))? {
        let entry = entry.map_err(|e| ImageError::io("reading", dir, e))?;
        let meta = entry
            .metadata()
            .map_err(|e| ImageError::io("reading", &entry.path(), e))?;
        *entries += 1;
        if meta.is_dir() {
            measure(&entry.path(), bytes, entries)?;
        } else if meta.is_file() {
            *bytes += meta.size();
        }
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), ImageError> {
    fs::create_dir_all(to).map_err(|e| ImageError::io("creating", to, e))?;
    for entry in fs::read_dir(from).map_err(|e| ImageError::io("reading", from, e))? {
        let entry = entry.map_err(|e| ImageError::io("reading", from, e))?;
        let (source, dest) = (entry.path(), to.join(entry.file_name()));
        let meta =
            fs::symlink_metadata(&source).map_err(|e| ImageError::io("reading", &source, e))?;
        if meta.file_type().is_symlink() {
            let target =
                fs::read_link(&source).map_err(|e| ImageError::io("reading link", &source, e))?;
            std::os::unix::fs::symlink(&target, &dest)
                .map_err(|e| ImageError::io("linking", &dest, e))?;
        } else if meta.is_dir() {
            copy_tree(&source, &dest)?;
            set_mode(&dest, meta.mode())?;
        } else if meta.is_file() {
            super::copy_file(&source, &dest, &meta)?;
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), ImageError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| ImageError::io("setting the mode of", path, e))
}
