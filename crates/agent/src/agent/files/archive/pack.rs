//! Writing the session archive: a walk of the home folder and `/tmp` from their
//! descriptors, as the listing walks (`listing.rs`).
//!
//! Each name is looked at with `fstatat(AT_SYMLINK_NOFOLLOW)`: a symlink is stored as
//! one (`readlinkat`), never followed; a FIFO, a socket or a device is skipped (counted);
//! a folder or a file is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`,
//! `O_NOFOLLOW | O_NONBLOCK`, and what the descriptor holds (`fstat`) is what is stored,
//! so that a symlink, FIFO or anything else swapped in meanwhile is never followed, read
//! or waited on (the name is looked at again, a few times at most). A file is stored
//! at the size `fstat` gave when it was opened: one that grows meanwhile is cut there,
//! one that shrinks is padded with zeros. A hard-linked file is stored whole under each
//! of its names. Every entry goes through the archive's checks (`sandbox_archive::Checker`)
//! before it is written: the bytes and entries allowed, the depth, the path's length.

use super::super::beneath::{failure, io_failure, kind_of, open_in, Refusal};
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat};
use sandbox_archive::{
    AddError, ArchiveError, Candidate, Checker, Claimed, Limits, Root, Short, Writer, BLOCK,
};
use sandbox_protocol::agent::{FileFailure, FileKind};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// The most names read in one walk (skipped ones included): what bounds its time.
const NAMES_READ: u64 = 1_000_000;

/// How often a name that changes kind under the walk is looked at again before it is
/// left out.
const ATTEMPTS: usize = 3;

/// What a whole archive held.
pub(super) struct Packed {
    pub bytes: u64,
    pub entries: u64,
    pub skipped: u64,
}

/// Writes the archive of `home` and `tmp` to `out`, at most `max_bytes` of it.
pub(super) fn write<W: Write>(
    home: BorrowedFd<'_>,
    tmp: BorrowedFd<'_>,
    max_bytes: u64,
    out: W,
) -> Result<Packed, Refusal> {
    let mut walk = Walk {
        writer: Writer::new(out),
        checker: Checker::new(Limits {
            max_bytes,
            max_entries: max_bytes / BLOCK,
        }),
        skipped: 0,
        read: 0,
    };
    for (root, fd) in [(Root::Home, home), (Root::Tmp, tmp)] {
        let name = root.name();
        let dir = open_in(fd, OsStr::new("."), OFlag::O_DIRECTORY | OFlag::O_RDONLY)
            .map_err(|e| failure(name, e))?;
        let stat = fstat(&dir).map_err(|e| failure(name, e))?;
        walk.add(name.as_bytes(), Claimed::Dir, &stat, None)?;
        walk.folder(dir, name.as_bytes())?;
    }
    let entries = walk.checker.entries();
    let skipped = walk.skipped;
    let (_, bytes) = walk
        .writer
        .finish()
        .map_err(|e| added("the archive's end", e))?;
    Ok(Packed {
        bytes,
        entries,
        skipped,
    })
}

/// One walk.
struct Walk<W: Write> {
    writer: Writer<W>,
    checker: Checker,
    /// Entries left out (FIFOs, sockets, devices, names that kept changing).
    skipped: u64,
    /// Names read so far.
    read: u64,
}

impl<W: Write> Walk<W> {
    /// Stores what the folder `fd` (at `path`) holds, folders as they come.
    fn folder(&mut self, fd: OwnedFd, path: &[u8]) -> Result<(), Refusal> {
        let shown = String::from_utf8_lossy(path);
        let mut dir = Dir::from_fd(fd).map_err(|e| failure(&shown, e))?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| failure(&shown, e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            self.read += 1;
            if self.read > NAMES_READ {
                return Err((
                    FileFailure::TooLarge,
                    format!("the session's folders hold more than {NAMES_READ} names"),
                ));
            }
            names.push(OsStr::from_bytes(name).to_owned());
        }
        names.sort_unstable();
        for name in names {
            let child = [path, b"/", name.as_bytes()].concat();
            self.entry(dir.as_fd(), &name, &child)?;
        }
        Ok(())
    }

    /// Stores `name` of `dir` (at `path`) and, for a folder, what it holds.
    fn entry(&mut self, dir: BorrowedFd<'_>, name: &OsString, path: &[u8]) -> Result<(), Refusal> {
        let shown = String::from_utf8_lossy(path).into_owned();
        for _ in 0..ATTEMPTS {
            // Gone meanwhile: not stored.
            let Ok(stat) = fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                return Ok(());
            };
            let opened = match kind_of(stat.st_mode) {
                FileKind::Symlink => match readlinkat(dir, name.as_os_str()) {
                    Ok(target) => {
                        let target = target.as_bytes();
                        return self.add(path, Claimed::Symlink { target }, &stat, None);
                    }
                    Err(Errno::ENOENT) => return Ok(()),
                    // No longer a symlink: looked at again.
                    Err(Errno::EINVAL) => continue,
                    Err(e) => return Err(failure(&shown, e)),
                },
                FileKind::File | FileKind::Dir => open_in(dir, name, OFlag::O_RDONLY),
                FileKind::Fifo | FileKind::Socket | FileKind::Device => {
                    self.skipped += 1;
                    return Ok(());
                }
            };
            let fd = match opened {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => return Ok(()),
                // A symlink (ELOOP) or a socket (ENXIO) swapped in: looked at again.
                Err(Errno::ELOOP | Errno::ENXIO) => continue,
                Err(e) => return Err(failure(&shown, e)),
            };
            return self.opened(fd, path);
        }
        self.skipped += 1;
        Ok(())
    }

    /// Stores what the descriptor `fd` (opened at `path`) holds, as `fstat` says.
    fn opened(&mut self, fd: OwnedFd, path: &[u8]) -> Result<(), Refusal> {
        let shown = String::from_utf8_lossy(path).into_owned();
        let stat = fstat(&fd).map_err(|e| failure(&shown, e))?;
        match kind_of(stat.st_mode) {
            FileKind::Dir => {
                self.add(path, Claimed::Dir, &stat, None)?;
                self.folder(fd, path)
            }
            FileKind::File => {
                let size = stat.st_size.max(0) as u64;
                self.add(path, Claimed::File { size }, &stat, Some(File::from(fd)))
            }
            _ => {
                self.skipped += 1;
                Ok(())
            }
        }
    }

    /// Checks the entry and writes it (a file's data from `data`).
    fn add(
        &mut self,
        path: &[u8],
        claimed: Claimed<'_>,
        stat: &FileStat,
        data: Option<File>,
    ) -> Result<(), Refusal> {
        let entry = self
            .checker
            .check(Candidate {
                path,
                claimed,
                mode: stat.st_mode,
                mtime: stat.st_mtime.max(0) as u64,
            })
            .map_err(|e| refused(&e))?;
        let mut data: Box<dyn std::io::Read> = match data {
            Some(file) => Box::new(file),
            None => Box::new(std::io::empty()),
        };
        self.writer
            .add(&entry, &mut data, Short::Pad)
            .map_err(|e| added(&entry.shown(), e))
    }
}

/// The refusal an archive's check means.
pub(super) fn refused(e: &ArchiveError) -> Refusal {
    let reason = match e {
        ArchiveError::Entry {
            problem:
                sandbox_archive::Problem::TooLarge { .. } | sandbox_archive::Problem::TooMany(_),
            ..
        } => FileFailure::TooLarge,
        ArchiveError::Entry { .. } => FileFailure::BadPath,
        _ => FileFailure::Io,
    };
    (reason, e.to_string())
}

/// The refusal a failure to add the entry at `path` means.
fn added(path: &str, e: AddError) -> Refusal {
    match e {
        AddError::Data(e) => io_failure(path, e),
        AddError::ShortData => (FileFailure::Io, format!("{path}: its data ended early")),
        AddError::Write(e) => (FileFailure::Io, format!("sending the archive: {e}")),
    }
}
