//! Host folders the sandbox's tree shows (the package set), and where the sandbox's
//! first process reaches them.
//!
//! The tree is built inside the sandbox's namespaces, by the sandbox's root: a host
//! identity of its own that may not pass through a folder only host root may (`/root`),
//! under a stage that may cover the host's `/tmp`, and, in a template's mount namespace,
//! with the host's homes hidden. So the sandbox's maker, while it is still host root in a
//! mount namespace of its own, shows the set read-only there ([`ShownFolders::show`]: the
//! jail on its stage, the template at [`PACKAGES`](crate::layout::PACKAGES), where its interpreter imports from
//! the paths a sandbox sees), and the tree is built from that mount: the set may be
//! anywhere on the host. A mount in the maker's namespace is copied into the
//! sandbox's, where overlayfs may use it (it refuses a descriptor of another namespace's
//! mount). An ordinary user's jail can mount nothing before its namespaces exist: its
//! sandboxes reach the set by its host path ([`ShownFolders::at_host_path`]), held by a
//! descriptor opened in the sandbox's own mount namespace before its stage covers `/tmp`
//! ([`ShownFolders::hold`]); the path must be open to the sandbox's root, another user
//! (the runner checks at start).

use crate::error::JailError;
use crate::rootfs::{mount_at, prepare, remount, EtcTree};
use nix::fcntl::{open, OFlag};
use nix::mount::MsFlags;
use nix::sys::stat::Mode;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a sandbox's first process reaches the host folders its tree shows.
#[derive(Debug, Clone, Default)]
pub struct ShownFolders {
    packages: Option<PathBuf>,
    /// The descriptor [`ShownFolders::hold`] opened, which `packages` names.
    held: Option<Arc<OwnedFd>>,
    /// The maker's copy of the host's folders below `/etc`, if it made one.
    etc: Option<Arc<EtcTree>>,
}

impl ShownFolders {
    /// As host root, in a mount namespace of the caller's own: shows `packages` (if
    /// any) read-only, nosuid and nodev on `target` in it (made if missing: an empty
    /// folder), where every sandbox made from this namespace reaches it.
    pub fn show(packages: Option<&Path>, target: &Path) -> Result<ShownFolders, JailError> {
        let Some(packages) = packages else {
            return Ok(ShownFolders::default());
        };
        std::fs::create_dir_all(target).map_err(|source| prepare(target, source))?;
        mount_at(Some(packages), target, None, MsFlags::MS_BIND, None)?;
        remount(
            target,
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        )?;
        Ok(ShownFolders {
            packages: Some(target.to_owned()),
            ..ShownFolders::default()
        })
    }

    /// The folders by their host paths: `packages`, if any.
    pub fn at_host_path(packages: Option<&Path>) -> ShownFolders {
        ShownFolders {
            packages: packages.map(Path::to_owned),
            ..ShownFolders::default()
        }
    }

    /// In the sandbox's own mount namespace, before its stage is mounted (which may
    /// cover the folders' paths): opens each folder, and names it by its descriptor from
    /// then on (`/proc/self/fd/<n>`, closed on exec and when this is dropped).
    pub(crate) fn hold(&mut self) -> Result<(), JailError> {
        let Some(path) = &self.packages else {
            return Ok(());
        };
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let fd = open(path.as_path(), flags, Mode::empty()).map_err(|e| prepare(path, e.into()))?;
        self.packages = Some(PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())));
        self.held = Some(Arc::new(fd));
        Ok(())
    }

    /// The same, with `tree` as the `/etc` folders every sandbox made from it shows
    /// (see [`EtcTree`]).
    pub fn with_etc(self, tree: EtcTree) -> ShownFolders {
        ShownFolders {
            etc: Some(Arc::new(tree)),
            ..self
        }
    }

    /// The copy of the host's `/etc` folders, if the maker made one.
    pub(crate) fn etc(&self) -> Option<&EtcTree> {
        self.etc.as_deref()
    }

    /// Where the package set is reached, if the tree shows one.
    pub(crate) fn packages(&self) -> Option<&Path> {
        self.packages.as_deref()
    }
}
