//! Opening what a path names below the home folder, one component at a time, each from
//! the descriptor of the folder before it: `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! of a single name, so that no symlink is followed and nothing is reached out of the
//! folder, and with `O_NONBLOCK`, so that no open waits (a FIFO's would, for its other
//! end). What was opened is then judged by `fstat` on its descriptor, never by a path
//! resolved again.

use nix::errno::Errno;
use nix::fcntl::{openat2, AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode};
use sandbox_protocol::agent::{FileFailure, FileKind};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

/// Why a file operation was refused, and a sentence for people.
pub(crate) type Refusal = (FileFailure, String);

/// What every open here carries: the last component is never followed if it is a
/// symlink, no open waits, no terminal becomes the agent's, and nothing is inherited.
const ALWAYS: OFlag = OFlag::O_NOFOLLOW
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_NOCTTY)
    .union(OFlag::O_CLOEXEC);

/// Opens `name`, one component, in the folder `dir`: never through or at a symlink,
/// never out of `dir`, never waiting.
pub(super) fn open_in(dir: BorrowedFd<'_>, name: &OsStr, flags: OFlag) -> nix::Result<OwnedFd> {
    let mut how = OpenHow::new().flags(flags | ALWAYS).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    );
    // openat2 refuses a mode without O_CREAT.
    if flags.contains(OFlag::O_CREAT) {
        how = how.mode(Mode::from_bits_truncate(0o644));
    }
    openat2(dir, name, how)
}

/// The kind of a file of mode `st_mode`, as `stat` gives it.
pub(super) fn kind_of(st_mode: u32) -> FileKind {
    match st_mode & libc::S_IFMT {
        libc::S_IFREG => FileKind::File,
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        libc::S_IFIFO => FileKind::Fifo,
        libc::S_IFSOCK => FileKind::Socket,
        _ => FileKind::Device,
    }
}

/// The folder that holds what `path` names (made, with its folders, when `create`), and
/// the last component's name. `path` is relative to `home` and stays below it by its
/// words (the runner checks too).
pub(super) fn parent_of(
    home: BorrowedFd<'_>,
    path: &str,
    create: bool,
) -> Result<(OwnedFd, OsString), Refusal> {
    let bad = || {
        (
            FileFailure::BadPath,
            format!("{path:?} is not a path inside the home folder"),
        )
    };
    let mut parts = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            _ => return Err(bad()),
        }
    }
    let name = parts.pop().ok_or_else(bad)?.to_owned();
    Ok((folder_at(home, &parts, path, create)?, name))
}

/// The folder `parts` names below `base` (made, with its folders, when `create`), each
/// component opened from the one before; `path` words the refusals.
pub(super) fn folder_at(
    base: BorrowedFd<'_>,
    parts: &[&OsStr],
    path: &str,
    create: bool,
) -> Result<OwnedFd, Refusal> {
    let mut dir = open_in(base, OsStr::new("."), OFlag::O_DIRECTORY | OFlag::O_RDONLY)
        .map_err(|e| failure(path, e))?;
    for part in parts {
        dir = folder(dir.as_fd(), part, path, create)?;
    }
    Ok(dir)
}

/// Opens (with `create`, makes first) the folder `name` in `dir`.
fn folder(dir: BorrowedFd<'_>, name: &OsStr, path: &str, create: bool) -> Result<OwnedFd, Refusal> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY;
    match open_in(dir, name, flags) {
        Err(Errno::ENOENT) if create => match mkdirat(dir, name, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => open_in(dir, name, flags).map_err(|e| failure(path, e)),
            Err(e) => Err(failure(path, e)),
        },
        other => other.map_err(|e| failure(path, e)),
    }
}

/// The status of what `fd` holds, refused unless it is a regular file.
pub(super) fn regular(fd: BorrowedFd<'_>, path: &str) -> Result<FileStat, Refusal> {
    let stat = fstat(fd).map_err(|e| failure(path, e))?;
    match kind_of(stat.st_mode) {
        FileKind::File => Ok(stat),
        kind => Err(not_a_file(path, kind)),
    }
}

/// Why opening `name` in `dir` (the last component of `path`) failed with `e`: when
/// something other than a regular file is there, says what (the open refused it; what
/// is looked at here only words the answer).
pub(super) fn refused_open(dir: BorrowedFd<'_>, name: &OsStr, path: &str, e: Errno) -> Refusal {
    let found = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map(|s| kind_of(s.st_mode));
    match found {
        Ok(FileKind::Symlink) => (
            FileFailure::BadPath,
            format!("{path} is a symlink: symlinks are not followed ({e})"),
        ),
        Ok(FileKind::File) | Err(_) => failure(path, e),
        Ok(kind) => not_a_file(path, kind),
    }
}

fn not_a_file(path: &str, kind: FileKind) -> Refusal {
    (
        FileFailure::NotAFile,
        format!(
            "{path} is {}, not a regular file: only regular files are read or written",
            kind.described()
        ),
    )
}

/// The refusal an error of a system call on `path` means.
pub(super) fn failure(path: &str, e: Errno) -> Refusal {
    match e {
        Errno::EXDEV | Errno::ELOOP => (
            FileFailure::BadPath,
            format!("{path} goes through a symlink or out of the home folder: neither is followed ({e})"),
        ),
        Errno::ENOTDIR => (
            FileFailure::BadPath,
            format!("{path} goes through something that is not a folder ({e})"),
        ),
        Errno::EISDIR => not_a_file(path, FileKind::Dir),
        Errno::ENXIO => (
            FileFailure::NotAFile,
            format!("{path} is not a regular file (a socket, or a FIFO or device nobody serves): only regular files are read or written"),
        ),
        Errno::ENOENT => (FileFailure::NotFound, format!("{path}: no such file")),
        // A lease (fcntl F_SETLEASE) a program holds on the file: a blocking open would
        // wait for the program to let go of it (up to the kernel's lease-break-time).
        Errno::EAGAIN => (
            FileFailure::Io,
            format!("{path} is leased by a program of the session (fcntl F_SETLEASE), which has not let go of it yet; try again later"),
        ),
        Errno::ENOSPC | Errno::EDQUOT | Errno::EFBIG => (
            FileFailure::TooLarge,
            format!("{path}: the home folder is full ({e})"),
        ),
        other => (FileFailure::Io, format!("{path}: {other}")),
    }
}

/// The refusal an I/O error on `path` means.
pub(super) fn io_failure(path: &str, e: std::io::Error) -> Refusal {
    match e.raw_os_error() {
        Some(code) => failure(path, Errno::from_raw(code)),
        None => (FileFailure::Io, format!("{path}: {e}")),
    }
}
