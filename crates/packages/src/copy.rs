//! Copying an installed tree out of a resolution's scratch into the store, by
//! descriptors and within a size.
//!
//! The scratch was written by the resolver's processes: every step here opens the next
//! component from its parent's descriptor with `O_NOFOLLOW`, checks what it opened with
//! `fstat`, and never resolves a path again, so nothing swapped in meanwhile (a link, a
//! FIFO) is followed or blocks. Only folders and regular files are copied (pip installs
//! nothing else); the copy stops as soon as the content passes the limit.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};

/// How deep a copied tree may go.
const MAX_DEPTH: usize = 64;
/// How many entries a copied tree may have.
const MAX_ENTRIES: u64 = 500_000;

/// Why a tree was not copied.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CopyError {
    /// Its files hold more than the limit.
    #[error("more than {max_bytes} bytes")]
    TooLarge {
        /// The limit.
        max_bytes: u64,
    },
    /// An entry is neither a folder nor a regular file, or the tree is too deep or has
    /// too many entries.
    #[error("{}: {what}", path.display())]
    Unexpected {
        /// The entry, below the tree.
        path: PathBuf,
        /// What is wrong with it.
        what: &'static str,
    },
    /// A file or folder could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The entry, below the tree.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
}

/// What a copy counts as it goes.
struct Budget {
    bytes_left: u64,
    max_bytes: u64,
    entries: u64,
}

/// Copies the folder `from` to `to` (made here; its parent must exist): folders 0755,
/// files 0644 or, where any execute bit was set, 0755. Returns the bytes of content
/// copied. `from` missing is an empty tree.
pub(crate) fn copy_tree(from: &Path, to: &Path, max_bytes: u64) -> Result<u64, CopyError> {
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    std::fs::create_dir(to).map_err(|source| io_at(to, source))?;
    let target = open(to, dir_flags, Mode::empty()).map_err(|e| io_at(to, e.into()))?;
    let source = match open(from, dir_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT) => return Ok(0),
        Err(e) => return Err(io_at(from, e.into())),
    };
    let mut budget = Budget {
        bytes_left: max_bytes,
        max_bytes,
        entries: 0,
    };
    copy_dir(source, &target, Path::new(""), 0, &mut budget)?;
    Ok(max_bytes - budget.bytes_left)
}

/// Copies the entries of the folder open at `source` into the one open at `target`.
fn copy_dir(
    source: OwnedFd,
    target: &OwnedFd,
    below: &Path,
    depth: usize,
    budget: &mut Budget,
) -> Result<(), CopyError> {
    if depth > MAX_DEPTH {
        return Err(unexpected(below, "deeper than a package tree goes"));
    }
    let names = entry_names(&source, below, budget)?;
    for name in names {
        let path = below.join(&name);
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = openat(&source, name.as_os_str(), flags, Mode::empty()).map_err(|e| match e {
            nix::errno::Errno::ELOOP => unexpected(&path, "a symbolic link"),
            e => io_at(&path, e.into()),
        })?;
        let stat = fstat(&fd).map_err(|e| io_at(&path, e.into()))?;
        match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => {
                mkdirat(target, name.as_os_str(), Mode::from_bits_truncate(0o755))
                    .map_err(|e| io_at(&path, e.into()))?;
                let dir_flags =
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                let child = openat(target, name.as_os_str(), dir_flags, Mode::empty())
                    .map_err(|e| io_at(&path, e.into()))?;
                copy_dir(fd, &child, &path, depth + 1, budget)?;
            }
            SFlag::S_IFREG => {
                let executable = stat.st_mode & 0o111 != 0;
                copy_file(fd, target, &name, &path, executable, budget)?;
            }
            _ => return Err(unexpected(&path, "neither a folder nor a regular file")),
        }
    }
    Ok(())
}

/// The names in the folder open at `dir`, but `.` and `..`, counted in the budget.
fn entry_names(
    dir: &OwnedFd,
    below: &Path,
    budget: &mut Budget,
) -> Result<Vec<OsString>, CopyError> {
    let dup = dir
        .as_fd()
        .try_clone_to_owned()
        .map_err(|source| io_at(below, source))?;
    let mut listing = Dir::from_fd(dup).map_err(|e| io_at(below, e.into()))?;
    let mut names = Vec::new();
    for entry in listing.iter() {
        let entry = entry.map_err(|e| io_at(below, e.into()))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        budget.entries += 1;
        if budget.entries > MAX_ENTRIES {
            return Err(unexpected(below, "more entries than a package tree has"));
        }
        names.push(OsString::from(std::ffi::OsStr::from_bytes(name)));
    }
    Ok(names)
}

/// Copies the regular file open at `fd` to a new file `name` of the folder `target`.
fn copy_file(
    fd: OwnedFd,
    target: &OwnedFd,
    name: &OsString,
    path: &Path,
    executable: bool,
    budget: &mut Budget,
) -> Result<(), CopyError> {
    let mode = if executable { 0o755 } else { 0o644 };
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let out = openat(
        target,
        name.as_os_str(),
        flags,
        Mode::from_bits_truncate(mode),
    )
    .map_err(|e| io_at(path, e.into()))?;
    let mut reader = File::from(fd).take(budget.bytes_left + 1);
    let mut writer = File::from(out);
    let copied = io::copy(&mut reader, &mut writer).map_err(|source| io_at(path, source))?;
    if copied > budget.bytes_left {
        return Err(CopyError::TooLarge {
            max_bytes: budget.max_bytes,
        });
    }
    budget.bytes_left -= copied;
    writer.flush().map_err(|source| io_at(path, source))
}

fn unexpected(path: &Path, what: &'static str) -> CopyError {
    CopyError::Unexpected {
        path: path.to_owned(),
        what,
    }
}

fn io_at(path: &Path, source: io::Error) -> CopyError {
    CopyError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn folders_and_files_are_copied_with_their_modes() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        fs::create_dir_all(from.join("pkg/sub")).unwrap();
        fs::write(from.join("pkg/__init__.py"), "x = 1\n").unwrap();
        fs::write(from.join("pkg/sub/data.bin"), vec![7u8; 5000]).unwrap();
        fs::write(from.join("tool"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(from.join("tool"), fs::Permissions::from_mode(0o700)).unwrap();
        let to = dir.path().join("to");
        assert_eq!(copy_tree(&from, &to, 1 << 20).unwrap(), 5016);
        assert_eq!(
            fs::read(to.join("pkg/sub/data.bin")).unwrap(),
            vec![7u8; 5000]
        );
        let mode = |p: &str| fs::metadata(to.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("tool"), 0o755);
        assert_eq!(mode("pkg/__init__.py"), 0o644);
        assert_eq!(mode("pkg/sub"), 0o755);
    }

    #[test]
    fn a_missing_tree_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let to = dir.path().join("to");
        assert_eq!(copy_tree(&dir.path().join("none"), &to, 10).unwrap(), 0);
        assert_eq!(fs::read_dir(&to).unwrap().count(), 0);
    }

    #[test]
    fn more_than_the_limit_stops_the_copy() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        fs::create_dir(&from).unwrap();
        fs::write(from.join("a"), vec![0u8; 600]).unwrap();
        fs::write(from.join("b"), vec![0u8; 600]).unwrap();
        let err = copy_tree(&from, &dir.path().join("to"), 1000).unwrap_err();
        assert!(
            matches!(err, CopyError::TooLarge { max_bytes: 1000 }),
            "{err}"
        );
    }

    #[test]
    fn links_fifos_and_deep_trees_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        fs::create_dir(&from).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.join("link")).unwrap();
        let err = copy_tree(&from, &dir.path().join("to1"), 1 << 20).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");

        fs::remove_file(from.join("link")).unwrap();
        nix::unistd::mkfifo(&from.join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        let err = copy_tree(&from, &dir.path().join("to2"), 1 << 20).unwrap_err();
        assert!(err.to_string().contains("neither a folder"), "{err}");

        fs::remove_file(from.join("fifo")).unwrap();
        let mut deep = from.clone();
        for _ in 0..=MAX_DEPTH + 1 {
            deep.push("d");
        }
        fs::create_dir_all(&deep).unwrap();
        let err = copy_tree(&from, &dir.path().join("to3"), 1 << 20).unwrap_err();
        assert!(err.to_string().contains("deeper"), "{err}");
    }
}
