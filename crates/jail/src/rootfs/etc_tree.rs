//! A copy of the host folders below `/etc` that sandboxes see, made once by a template
//! (issue 35), so that each of its sandboxes shows `/etc` through one overlay instead of
//! one per folder.
//!
//! A read-only overlay costs its sandbox a superblock, and its teardown an expedited RCU
//! grace period: with the languages' configuration folders, a sandbox had twelve below
//! `/etc` alone, about a tenth of the CPU a Python `print(1)` costs at concurrency 8.
//! Overlayfs does not follow the mounts below a lower folder, so the folders cannot be
//! gathered by binds: the template copies them (about a thousand names and 3 MB with
//! every language) into a tmpfs of its own mount namespace, which its sandboxes find in
//! theirs. Each sandbox's `/etc` is then one overlay of its own (its inodes, and so its
//! locks, are its own, as each folder's overlay's were) whose upper layer is the folder
//! of generated files its root tmpfs holds and whose lower one is the copy.
//!
//! The copy is what the host held when the template started: a folder that appears or
//! changes on the host later shows after the runner's restart (as a folder that appears
//! shows in sandboxes of makers started after it). A jail, which makes one sandbox,
//! overlays each folder instead.
//!
//! The walk goes by descriptors and never follows a link: a symlink is copied as one, a
//! folder or a file is opened by its name in its parent's descriptor with
//! `O_NOFOLLOW` (a file also with `O_NONBLOCK`, and copied only if `fstat` says it is
//! one); FIFOs, sockets and devices are left out. The tmpfs bounds the bytes and names,
//! [`DEPTH_MAX`] the depth.

use super::{make_dir, mount_at, prepare};
use crate::error::JailError;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::mount::MsFlags;
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use std::fs::{self, File};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// The copy's tmpfs: room for every language's folders many times over.
const TREE_OPTIONS: &str = "size=64m,nr_inodes=16384,mode=0755";
/// The deepest folder copied, counted from the folder named.
const DEPTH_MAX: usize = 16;

/// A read-only copy of host folders below `/etc`, at their places below its folder.
#[derive(Debug)]
pub struct EtcTree {
    dir: PathBuf,
}

impl EtcTree {
    /// As root of a mount namespace of the caller's own: a tmpfs on `at` (made if
    /// missing) holding a copy of each of `paths` below `/etc` the host has (a folder,
    /// a file or a symlink: `/etc/ssl/certs` at `<at>/ssl/certs`), then made read-only.
    pub fn make(at: &Path, paths: &[PathBuf]) -> Result<EtcTree, JailError> {
        make_dir(at, 0o755)?;
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        mount_at(Some("tmpfs"), at, Some("tmpfs"), flags, Some(TREE_OPTIONS))?;
        let mut folders = paths.to_vec();
        // A folder before the paths below it, which it then holds.
        folders.sort();
        for path in &folders {
            let (Ok(below), Some(parent), Some(name)) =
                (path.strip_prefix("/etc"), path.parent(), path.file_name())
            else {
                continue;
            };
            let target = at.join(below);
            if below.as_os_str().is_empty() || target.exists() {
                continue;
            }
            let parent_fd = match open_folder(None, parent) {
                Ok(fd) => fd,
                Err(Errno::ENOENT | Errno::ENOTDIR) => continue,
                Err(e) => return Err(prepare(parent, e.into())),
            };
            if let Some(made) = target.parent() {
                make_dir(made, 0o755)?;
            }
            copy_entry(parent_fd.as_fd(), Path::new(name), &target, 0)?;
            // A file named is shown read-only, as a jail shows it.
            if fs::symlink_metadata(&target).is_ok_and(|meta| meta.is_file()) {
                fs::set_permissions(&target, fs::Permissions::from_mode(0o444))
                    .map_err(|e| prepare(&target, e))?;
            }
        }
        let read_only = MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | flags;
        mount_at(None::<&str>, at, None, read_only, None)?;
        Ok(EtcTree { dir: at.to_owned() })
    }

    /// Where the copy is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the host path `path` is one a sandbox with a copy shows from it: below
    /// `/etc`, where it shows nothing but the copy and the files made for it.
    pub fn covers(path: &Path) -> bool {
        path.starts_with("/etc")
    }
}

/// Opens the folder `name` (in `dir`, or as a path) without following a last symlink.
fn open_folder(dir: Option<BorrowedFd<'_>>, name: &Path) -> Result<OwnedFd, Errno> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match dir {
        Some(dir) => openat(dir, name, flags, Mode::empty()),
        None => nix::fcntl::open(name, flags, Mode::empty()),
    }
}

/// Copies what the folder `source` holds into `target` (made), then gives `target` the
/// folder's mode.
fn copy_folder(source: &OwnedFd, target: &Path, depth: usize) -> Result<(), JailError> {
    make_dir(target, 0o755)?;
    let listing = source.try_clone().map_err(|e| prepare(target, e))?;
    let mut names = Vec::new();
    let mut dir = Dir::from_fd(listing).map_err(|e| prepare(target, e.into()))?;
    for entry in dir.iter() {
        let entry = entry.map_err(|e| prepare(target, e.into()))?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(std::ffi::OsStr::from_bytes(name).to_owned());
        }
    }
    for name in names {
        copy_entry(source.as_fd(), Path::new(&name), &target.join(&name), depth)?;
    }
    let stat = fstat(source).map_err(|e| prepare(target, e.into()))?;
    set_mode_of(target, &stat)
}

/// Copies `name` of the folder `dir` to `target`: a symlink as one, a folder (not deeper
/// than [`DEPTH_MAX`]) or a file by its descriptor; anything else, or what went away
/// meanwhile, is left out.
fn copy_entry(
    dir: BorrowedFd<'_>,
    name: &Path,
    target: &Path,
    depth: usize,
) -> Result<(), JailError> {
    let Ok(stat) = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
        return Ok(());
    };
    match SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFLNK => match readlinkat(dir, name) {
            Ok(link) => symlink(link, target).map_err(|e| prepare(target, e)),
            Err(_) => Ok(()),
        },
        SFlag::S_IFDIR if depth < DEPTH_MAX => match open_folder(Some(dir), name) {
            Ok(fd) => copy_folder(&fd, target, depth + 1),
            Err(_) => Ok(()),
        },
        SFlag::S_IFREG => copy_file(dir, name, target),
        _ => Ok(()),
    }
}

/// Copies the file `name` of `dir` to `target`, with its mode, if it still is a file
/// when opened (never waiting on what was swapped in).
fn copy_file(dir: BorrowedFd<'_>, name: &Path, target: &Path) -> Result<(), JailError> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let Ok(fd) = openat(dir, name, flags, Mode::empty()) else {
        return Ok(());
    };
    let stat = fstat(&fd).map_err(|e| prepare(target, e.into()))?;
    if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        return Ok(());
    }
    let mut from = File::from(fd);
    let mut to = File::create(target).map_err(|e| prepare(target, e))?;
    std::io::copy(&mut from, &mut to).map_err(|e| prepare(target, e))?;
    set_mode_of(target, &stat)
}

/// Gives `target` the permission bits of `stat`.
fn set_mode_of(target: &Path, stat: &FileStat) -> Result<(), JailError> {
    let mode = fs::Permissions::from_mode(stat.st_mode & 0o7777);
    fs::set_permissions(target, mode).map_err(|e| prepare(target, e))
}
