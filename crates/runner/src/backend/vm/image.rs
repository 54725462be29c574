//! The image a VM boots from, as the runner uses it: its three files, and a lease that
//! keeps `image prune` from removing it while this runner runs.

use super::VmError;
use sandbox_image::{Lease, INFO_FILE, INITRD_FILE, KERNEL_FILE, ROOTFS_FILE};
use std::fs;
use std::path::{Path, PathBuf};

/// The three files a VM boots from, and the lease that keeps the image from being pruned
/// while this runner uses it.
#[derive(Debug)]
pub struct VmImage {
    /// The kernel.
    pub kernel: PathBuf,
    /// The initramfs (the agent as init, and modules).
    pub initrd: PathBuf,
    /// The read-only root image.
    pub rootfs: PathBuf,
    /// Held while the image is in use (`None`: a folder not made by `image build`,
    /// which pruning never touches).
    _lease: Option<Lease>,
}

impl VmImage {
    /// Finds the image's files in `dir`, following a `current` link once, so that a
    /// later build does not change the image under a running runner.
    pub fn open(dir: &Path) -> Result<VmImage, VmError> {
        let dir = fs::canonicalize(dir).map_err(|source| VmError::Image {
            path: dir.to_owned(),
            source,
        })?;
        let file = |name: &str| {
            let path = dir.join(name);
            fs::metadata(&path)
                .map(|_| path.clone())
                .map_err(|source| VmError::Image { path, source })
        };
        let leased = dir.join(INFO_FILE).exists();
        Ok(VmImage {
            kernel: file(KERNEL_FILE)?,
            initrd: file(INITRD_FILE)?,
            rootfs: file(ROOTFS_FILE)?,
            _lease: match leased {
                true => Some(sandbox_image::lease(&dir)?),
                false => None,
            },
        })
    }
}
