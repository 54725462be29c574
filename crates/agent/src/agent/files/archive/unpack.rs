//! Restoring a session archive into the home folder and `/tmp`, every entry checked by
//! `sandbox_archive` before any of its data is read, and created from its parent
//! folder's descriptor (`beneath.rs`), never through a path: folders are made as needed,
//! what stands where an entry goes (a file, a symlink, a FIFO, an empty folder) is
//! removed first, never followed, and a file is created with `O_CREAT | O_EXCL`.
//!
//! Folders are made 0700, so that their entries can be made whatever their own mode
//! says; each gets its mode and time once the archive is read, the deepest first (a
//! 0500 folder still gets its files). `home` and `tmp` themselves get theirs where the
//! sandbox user may set them (`/tmp` is not the user's).

use super::super::beneath::{failure, folder_at, io_failure, kind_of, open_in, Refusal};
use super::pack::refused;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstatat, futimens, mkdirat, utimensat, Mode, UtimensatFlags};
use nix::sys::time::TimeSpec;
use nix::unistd::{symlinkat, unlinkat, UnlinkatFlags};
use sandbox_archive::{each_entry, ArchiveError, Entry, Kind, Limits, Root, Summary};
use sandbox_protocol::agent::{FileFailure, FileKind};
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

/// Why an unpack stopped.
enum Stop {
    /// The archive was refused.
    Archive(ArchiveError),
    /// An entry could not be made.
    Made(Refusal),
}

impl From<ArchiveError> for Stop {
    fn from(e: ArchiveError) -> Self {
        Stop::Archive(e)
    }
}

/// A folder whose mode and time are set once the archive is read.
struct Folder {
    path: Vec<u8>,
    mode: u32,
    mtime: u64,
}

/// Restores the archive `input` (within `limits`) below `home` and `tmp`.
pub(super) fn restore(
    home: BorrowedFd<'_>,
    tmp: BorrowedFd<'_>,
    limits: Limits,
    input: impl Read,
) -> Result<Summary, Refusal> {
    let roots = Roots { home, tmp };
    let mut folders = Vec::new();
    let summary = each_entry(input, limits, |entry, data| {
        roots.make(entry, data, &mut folders).map_err(Stop::Made)
    })
    .map_err(|stop| match stop {
        Stop::Archive(e) => refused(&e),
        Stop::Made(refusal) => refusal,
    })?;
    folders.sort_by_key(|f| std::cmp::Reverse(f.path.split(|b| *b == b'/').count()));
    for folder in &folders {
        roots.settle(folder)?;
    }
    Ok(summary)
}

/// The two folders an archive restores into.
struct Roots<'a> {
    home: BorrowedFd<'a>,
    tmp: BorrowedFd<'a>,
}

impl Roots<'_> {
    /// The folder `parts` names below `root`, made as needed.
    fn folder(&self, root: Root, parts: &[&[u8]], shown: &str) -> Result<OwnedFd, Refusal> {
        let base = match root {
            Root::Home => self.home,
            Root::Tmp => self.tmp,
        };
        let parts: Vec<&OsStr> = parts.iter().map(|p| OsStr::from_bytes(p)).collect();
        folder_at(base, &parts, shown, true)
    }

    /// Makes `entry` (a file's data from `data`).
    fn make(
        &self,
        entry: &Entry,
        data: &mut dyn Read,
        folders: &mut Vec<Folder>,
    ) -> Result<(), Refusal> {
        let shown = entry.shown();
        let folder = || Folder {
            path: entry.path.clone(),
            mode: entry.mode,
            mtime: entry.mtime,
        };
        let (root, parts) = entry.split();
        let Some((name, parents)) = parts.split_last() else {
            folders.push(folder());
            return Ok(());
        };
        let dir = self.folder(root, parents, &shown)?;
        let name = OsStr::from_bytes(name);
        match &entry.kind {
            Kind::Dir => {
                make_folder(dir.as_fd(), name, &shown)?;
                folders.push(folder());
                Ok(())
            }
            Kind::File { size } => {
                clear(dir.as_fd(), name, &shown)?;
                let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
                let fd = open_in(dir.as_fd(), name, flags).map_err(|e| failure(&shown, e))?;
                let mut file = File::from(fd);
                std::io::copy(&mut data.take(*size), &mut file)
                    .map_err(|e| io_failure(&shown, e))?;
                fchmod(&file, Mode::from_bits_truncate(entry.mode))
                    .map_err(|e| failure(&shown, e))?;
                futimens(&file, &TimeSpec::UTIME_OMIT, &time(entry.mtime))
                    .map_err(|e| failure(&shown, e))
            }
            Kind::Symlink { target } => {
                clear(dir.as_fd(), name, &shown)?;
                symlinkat(OsStr::from_bytes(target), dir.as_fd(), name)
                    .map_err(|e| failure(&shown, e))?;
                utimensat(
                    dir.as_fd(),
                    name,
                    &TimeSpec::UTIME_OMIT,
                    &time(entry.mtime),
                    UtimensatFlags::NoFollowSymlink,
                )
                .map_err(|e| failure(&shown, e))
            }
        }
    }

    /// Gives a folder made (or `home`, `tmp`) its mode and time.
    fn settle(&self, folder: &Folder) -> Result<(), Refusal> {
        let shown = String::from_utf8_lossy(&folder.path).into_owned();
        let entry = Entry {
            path: folder.path.clone(),
            kind: Kind::Dir,
            mode: folder.mode,
            mtime: folder.mtime,
        };
        let (root, parts) = entry.split();
        let fd = self.folder(root, &parts, &shown)?;
        let set = fchmod(&fd, Mode::from_bits_truncate(folder.mode))
            .and_then(|()| futimens(&fd, &TimeSpec::UTIME_OMIT, &time(folder.mtime)));
        match set {
            // `home` or `tmp` itself, which the sandbox user may not own.
            Err(Errno::EPERM) if parts.is_empty() => Ok(()),
            other => other.map_err(|e| failure(&shown, e)),
        }
    }
}

/// Makes the folder `name` in `dir` (0700 until it is settled), or keeps the one there.
fn make_folder(dir: BorrowedFd<'_>, name: &OsStr, shown: &str) -> Result<(), Refusal> {
    match mkdirat(dir, name, Mode::from_bits_truncate(0o700)) {
        Ok(()) => Ok(()),
        Err(Errno::EEXIST) => {
            let stat =
                fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(|e| failure(shown, e))?;
            if kind_of(stat.st_mode) == FileKind::Dir {
                return Ok(());
            }
            clear(dir, name, shown)?;
            mkdirat(dir, name, Mode::from_bits_truncate(0o700)).map_err(|e| failure(shown, e))
        }
        Err(e) => Err(failure(shown, e)),
    }
}

/// Removes what stands at `name` in `dir`, without opening or following it: anything
/// but a folder, or an empty folder.
fn clear(dir: BorrowedFd<'_>, name: &OsStr, shown: &str) -> Result<(), Refusal> {
    let removed = match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Err(Errno::EISDIR) => unlinkat(dir, name, UnlinkatFlags::RemoveDir),
        other => other,
    };
    match removed {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(Errno::ENOTEMPTY | Errno::EEXIST) => Err((
            FileFailure::BadPath,
            format!("{shown}: a folder that is not empty stands where the archive has no folder"),
        )),
        Err(e) => Err(failure(shown, e)),
    }
}

/// A time in seconds since the epoch, as `utimensat` takes it.
fn time(seconds: u64) -> TimeSpec {
    TimeSpec::from_duration(Duration::from_secs(seconds.min(i64::MAX as u64)))
}
