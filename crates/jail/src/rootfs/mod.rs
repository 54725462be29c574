//! The sandbox's file system: what the jail mounts before it pivots into it.
//!
//! Two parts, made on either side of the clone:
//!
//! - the [`Stage`], made by the jail as host root in a mount namespace of its own (so
//!   nothing of it is seen on the host, and it goes away with the sandbox): a small
//!   tmpfs holding this sandbox's own device nodes, an empty folder and an empty file
//!   (the sources of the masks), and the mount point of the new root. Device nodes made
//!   here are new inodes: a lock or a watch on the sandbox's `/dev/null` touches no
//!   other sandbox's and not the host's. A jail run by an ordinary user makes the stage
//!   inside the new namespaces instead ([`Stage::make_inside`]), where no device node
//!   can be made: the host's are bound in, so their inodes (and `flock` locks on them)
//!   are shared with the host; a sandbox forked from a template binds the nodes the
//!   template made for its index, which later sandboxes of that index bind again.
//!   Whatever it holds, the stage is read-only once made, and so is every node bound
//!   from it: a device still reads and writes (a read-only mount does not stop I/O on a
//!   device), but its times, mode, owner and attributes cannot change (`EROFS`), so a
//!   node shared with the host, with another sandbox or with a later one carries
//!   nothing from one to the other.
//! - the root itself ([`build_root`]), made inside the new namespaces: a tmpfs with the
//!   host's system folders as read-only overlays (a private view of shared files: their
//!   inodes, and so their `flock` locks, belong to this sandbox alone), a generated
//!   `/etc`, a new `/proc` with the host-wide information files masked, a minimal
//!   `/dev`, size-capped `/tmp` and home, and the small folder of the `tools` modules
//!   ([`TOOLS`]), which only the agent writes.

mod etc_tree;
mod host;
mod proc;
mod shown;

pub use etc_tree::EtcTree;
pub use host::HostView;
use host::SharedPath;
pub use shown::ShownFolders;

use crate::error::JailError;
use crate::layout::{
    self, DEPS, HOME, HOME_NODE_MODULES, NODE_MODULES, PACKAGES, SANDBOX_UID, TOOLS,
    TOOLS_NODE_MODULES, TOOLS_PYTHON,
};
use crate::spec::JailSpec;
use nix::mount::{mount, MsFlags};
use nix::sys::stat::{mknod, Mode, SFlag};
use std::fs::{self, File};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Devices every sandbox gets, made anew for each (`/dev/<name>`).
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// The jail's private staging area (see the module documentation).
pub struct Stage {
    dir: PathBuf,
}

impl Stage {
    /// As host root: a mount namespace for the jail alone, and the staging tmpfs on
    /// `dir` in it, with its device nodes, empty folder and empty file.
    pub fn make(dir: &Path) -> Result<Stage, JailError> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).map_err(JailError::MountNs)?;
        let stage = Stage::mount(dir)?;
        for name in DEVICES {
            make_device(name, &stage.devices().join(name))?;
        }
        seal(dir)?;
        Ok(stage)
    }

    /// Inside the new user and mount namespaces (sandbox root, all capabilities there)
    /// of a jail that could not make device nodes (an ordinary user's, or one forked from
    /// a template): the staging tmpfs on `dir`, with the empty folder and the empty file,
    /// and the device nodes of `devices` (a folder of them its maker made for this
    /// sandbox, bound whole), or else the host's (each bound onto an empty file), all
    /// read-only.
    pub fn make_inside(dir: &Path, devices: Option<&Path>) -> Result<Stage, JailError> {
        let stage = Stage::mount(dir)?;
        match devices {
            Some(folder) => bind_read_only(folder, &stage.devices())?,
            None => {
                for name in DEVICES {
                    let target = stage.devices().join(name);
                    File::create(&target).map_err(|source| prepare(&target, source))?;
                    bind_read_only(&Path::new("/dev").join(name), &target)?;
                }
            }
        }
        seal(dir)?;
        Ok(stage)
    }

    /// In the current mount namespace, its mounts made slaves: the staging tmpfs on
    /// `dir`, with its folders and the empty file.
    fn mount(dir: &Path) -> Result<Stage, JailError> {
        make_mounts_slaves()?;
        // Not nodev: the device nodes made here must open from inside the sandbox.
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
        mount_at(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            flags,
            Some("size=64k,nr_inodes=64,mode=0755"),
        )?;
        let stage = Stage {
            dir: dir.to_owned(),
        };
        stage.make_sources()?;
        Ok(stage)
    }

    /// The mount point of the root, the sources of the masks, the devices' folder.
    fn make_sources(&self) -> Result<(), JailError> {
        make_dir(&self.root(), 0o755)?;
        make_dir(&self.empty_dir(), 0o555)?;
        File::create(self.blank()).map_err(|source| prepare(&self.blank(), source))?;
        set_mode(&self.blank(), 0o444)?;
        make_dir(&self.packages(), 0o755)?;
        make_dir(&self.devices(), 0o755)
    }

    /// Where a jail made as host root shows the package set (see [`ShownFolders`]).
    pub fn packages(&self) -> PathBuf {
        self.dir.join("packages")
    }

    /// The mount point of the sandbox's root.
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    fn empty_dir(&self) -> PathBuf {
        self.dir.join("empty")
    }

    fn blank(&self) -> PathBuf {
        self.dir.join("blank")
    }

    fn devices(&self) -> PathBuf {
        self.dir.join("dev")
    }
}

/// The stage's tmpfs (on `dir`) made read-only, its superblock and its mount: nothing
/// of it can change, nor be made writable again from inside (the sandbox's namespaces
/// are not the superblock's owner, and the mount's flags are locked in them).
fn seal(dir: &Path) -> Result<(), JailError> {
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    mount_at(None::<&str>, dir, None, flags, None)
}

/// `source` bound on `target`, read-only, nosuid and noexec (not nodev: device nodes
/// must open). A bind made later from it is read-only too: a bind keeps the flags of
/// the mount it copies.
fn bind_read_only(source: &Path, target: &Path) -> Result<(), JailError> {
    mount_at(Some(source), target, None, MsFlags::MS_BIND, None)?;
    remount(
        target,
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
    )
}

/// A character device with the numbers of the host's `/dev/<name>`, mode 0666.
pub fn make_device(name: &str, path: &Path) -> Result<(), JailError> {
    let host = Path::new("/dev").join(name);
    let rdev = fs::metadata(&host)
        .map_err(|source| prepare(&host, source))?
        .rdev();
    mknod(path, SFlag::S_IFCHR, Mode::from_bits_truncate(0o666), rdev)
        .map_err(|e| prepare(path, e.into()))?;
    set_mode(path, 0o666)
}

/// Inside the new namespaces (sandbox root, all capabilities there): the whole tree on
/// the stage's root mount point.
pub fn build_root(
    spec: &JailSpec,
    stage: &Stage,
    host: &HostView,
    sources: &ShownFolders,
) -> Result<(), JailError> {
    let root = stage.root();
    make_mounts_slaves()?;
    mount_tmpfs(&root, "size=4m,nr_inodes=4096,mode=0755", MsFlags::empty())?;
    host.share_system(&root, stage)?;
    if let Some(packages) = sources.packages() {
        share_packages(&root, packages, stage)?;
    }
    if let Some(deps) = &spec.deps {
        bind_deps(&root, deps)?;
    }
    make_dir(&root.join("etc"), 0o755)?;
    write_etc(&root)?;
    let tree = sources.etc();
    host.share_etc(&root, stage, tree.is_none())?;
    let shared = spec.shared.iter();
    let own = shared.filter(|path| tree.is_none() || !EtcTree::covers(path));
    for path in own.filter_map(|path| SharedPath::read(path)) {
        path.place(&root, stage)?;
    }
    if let Some(tree) = tree {
        overlay_etc(&root, tree)?;
    }
    proc::build_proc(&root, stage, host)?;
    build_dev(&root, stage)?;
    let tmp = format!("size={},nr_inodes=16384,mode=1777", spec.tmp_bytes);
    let private = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_tmpfs(&root.join("tmp"), &tmp, private)?;
    let home = root.join(HOME.trim_start_matches('/'));
    let home_opts = format!(
        "size={},nr_inodes=16384,mode=0700,uid={SANDBOX_UID},gid={SANDBOX_UID}",
        spec.home_bytes
    );
    mount_tmpfs(&home, &home_opts, private)?;
    build_tools(&root)
}

/// The folder of the `tools` modules at [`TOOLS`]: a small tmpfs of the sandbox's own,
/// owned by sandbox root (the agent writes a run's modules and makes its socket there;
/// a program, the sandbox user, reads them and connects, and can write nothing there),
/// with its two module folders made now, because an interpreter started ahead of the
/// job caches its import path; and the link by which Node finds `tools` from the home
/// folder. It stays writable when `/` is made read-only (a mount of its own).
fn build_tools(root: &Path) -> Result<(), JailError> {
    let tools = under(root, TOOLS);
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_tmpfs(&tools, "size=8m,nr_inodes=256,mode=0755", flags)?;
    make_dir(&under(root, TOOLS_PYTHON), 0o755)?;
    make_dir(&under(root, TOOLS_NODE_MODULES), 0o755)?;
    let link = under(root, HOME_NODE_MODULES);
    symlink(TOOLS_NODE_MODULES, &link).map_err(|source| prepare(&link, source))
}

/// A read-only overlay of `lower` on `target`. Its inodes are this mount's own, so a
/// lock taken on a file of it blocks nobody outside the sandbox; the page cache stays
/// the host's (nothing is copied). Overlayfs wants two layers when it has no upper one:
/// the stage's empty folder is the second.
fn overlay(lower: &Path, target: &Path, stage: &Stage) -> Result<(), JailError> {
    let options = format!(
        "lowerdir={}:{}",
        lower.display(),
        stage.empty_dir().display()
    );
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_at(
        Some("overlay"),
        target,
        Some("overlay"),
        flags,
        Some(&options),
    )
}

/// `/etc` as one read-only overlay: the files made for the sandbox (its root tmpfs's
/// `/etc`, the upper layer) over the maker's copy of the host's folders.
fn overlay_etc(root: &Path, tree: &EtcTree) -> Result<(), JailError> {
    let etc = root.join("etc");
    let options = format!("lowerdir={}:{}", etc.display(), tree.dir().display());
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_at(
        Some("overlay"),
        &etc,
        Some("overlay"),
        flags,
        Some(&options),
    )
}

/// The package set, read-only at [`PACKAGES`], and the link Node finds it by.
fn share_packages(root: &Path, packages: &Path, stage: &Stage) -> Result<(), JailError> {
    let target = under(root, PACKAGES);
    make_dir(&target, 0o755)?;
    overlay(packages, &target, stage)?;
    let link = under(root, NODE_MODULES);
    let to = format!("{PACKAGES}/node/node_modules");
    symlink(&to, &link).map_err(|source| prepare(&link, source))
}

/// The runner's folder for this sandbox's inline dependencies at [`DEPS`]: a slave of
/// the runner's shared mount (this namespace's mounts are all slaves, see
/// [`make_mounts_slaves`]), so that a set the runner mounts there later shows here.
/// Read-only, so that not even a mount point can be made in it from inside.
fn bind_deps(root: &Path, deps: &Path) -> Result<(), JailError> {
    let target = under(root, DEPS);
    make_dir(&target, 0o755)?;
    mount_at(Some(deps), &target, None, MsFlags::MS_BIND, None)?;
    remount(
        &target,
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
    )
}

/// `path` (absolute, as the sandbox sees it) below the new root.
fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

fn write_etc(root: &Path) -> Result<(), JailError> {
    for (name, content) in layout::etc_files() {
        let path = root.join("etc").join(name);
        fs::write(&path, content).map_err(|source| prepare(&path, source))?;
    }
    Ok(())
}

/// A tmpfs /dev with this sandbox's own device nodes bound in (read-only, as the
/// stage's are: see [`bind_read_only`]), the usual links, and /dev/shm.
fn build_dev(root: &Path, stage: &Stage) -> Result<(), JailError> {
    let dev = root.join("dev");
    mount_tmpfs(
        &dev,
        "size=64k,nr_inodes=64,mode=0755",
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
    )?;
    for name in DEVICES {
        let target = dev.join(name);
        File::create(&target).map_err(|source| prepare(&target, source))?;
        let flags = MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
        mount_at(
            Some(&stage.devices().join(name)),
            &target,
            None,
            flags,
            None,
        )?;
    }
    let links = [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ];
    for (name, to) in links {
        let link = dev.join(name);
        symlink(to, &link).map_err(|source| prepare(&link, source))?;
    }
    let shm_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_tmpfs(
        &dev.join("shm"),
        "size=16m,nr_inodes=1024,mode=1777",
        shm_flags,
    )?;
    remount(
        &dev,
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
    )
}

/// Every mount of the current mount namespace made a slave: nothing mounted here
/// propagates to another namespace; what the host mounts below a shared mount of its
/// own still shows here. Of that, the sandbox keeps after `pivot_root` only what was
/// bound into its tree from such a mount: [`JailSpec::deps`]. Every mount the jail
/// makes anew (tmpfs, overlays, proc) is private, as a new mount below a slave is.
fn make_mounts_slaves() -> Result<(), JailError> {
    mount_at(
        None::<&str>,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None,
    )
}

fn mount_tmpfs(target: &Path, options: &str, flags: MsFlags) -> Result<(), JailError> {
    make_dir(target, 0o755)?;
    mount_at(Some("tmpfs"), target, Some("tmpfs"), flags, Some(options))
}

/// Changes the flags of the mount at `target` (a bind remount).
pub fn remount(target: &Path, flags: MsFlags) -> Result<(), JailError> {
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | flags;
    mount_at(None::<&Path>, target, None, flags, None)
}

/// `mount(2)`, its error naming the target.
pub fn mount_at<S: nix::NixPath + ?Sized>(
    source: Option<&S>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), JailError> {
    mount(source, target, fstype, flags, data).map_err(|source| JailError::Mount {
        target: target.to_owned(),
        source,
    })
}

fn make_dir(path: &Path, mode: u32) -> Result<(), JailError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(|source| prepare(path, source))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), JailError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|source| prepare(path, source))
}

/// A preparation step's error, naming its path.
pub fn prepare(path: &Path, source: std::io::Error) -> JailError {
    JailError::Prepare {
        path: path.to_owned(),
        source,
    }
}
