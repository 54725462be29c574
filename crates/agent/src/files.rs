//! A session's file operations, done here, inside the sandbox, as the program's user:
//! a path is resolved from the home folder with `openat2(RESOLVE_BENEATH)`, so that
//! neither `..` nor a symlink the program made can lead out of it, and every access is
//! checked against the program user's rights (its file-system ids), never the agent's.

use crate::identity::as_program_user;
use crate::HOME;
use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use sandbox_protocol::agent::{
    decode_bytes, encode_bytes, AgentMessage, FileEntry, FileFailure, FileRequest,
};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// How deep a listing goes.
const LIST_DEPTH: usize = 32;

/// Does one file operation and says how it went.
pub(crate) fn serve(request: &FileRequest) -> AgentMessage {
    let result = as_program_user(|| match request {
        FileRequest::Put { path, data } => put(path, data),
        FileRequest::Get { path, cap } => get(path, *cap),
        FileRequest::List { limit } => list(*limit),
    });
    match result {
        Ok(Ok(message)) => message,
        Ok(Err((reason, message))) => AgentMessage::FileFailed { reason, message },
        Err(e) => AgentMessage::FileFailed {
            reason: FileFailure::Io,
            message: format!("taking the program user's ids: {e}"),
        },
    }
}

type Outcome = Result<AgentMessage, (FileFailure, String)>;

fn put(path: &str, data: &str) -> Outcome {
    let bytes = decode_bytes(data).map_err(|e| (FileFailure::Io, format!("bad base64: {e}")))?;
    let (folders, name) = split(path)?;
    let mut dir = open_home()?;
    for folder in folders {
        dir = enter(&dir, &folder, path, true)?;
    }
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_NOFOLLOW;
    let fd = open_beneath(&dir, &name, flags, path)?;
    File::from(fd)
        .write_all(&bytes)
        .map_err(|e| io_failure(path, e))?;
    Ok(AgentMessage::Stored)
}

fn get(path: &str, cap: u64) -> Outcome {
    let (folders, name) = split(path)?;
    let mut dir = open_home()?;
    for folder in folders {
        dir = enter(&dir, &folder, path, false)?;
    }
    let fd = open_beneath(&dir, &name, OFlag::O_RDONLY, path)?;
    let mut file = File::from(fd);
    let meta = file.metadata().map_err(|e| io_failure(path, e))?;
    if !meta.is_file() {
        return Err((FileFailure::BadPath, format!("{path} is not a file")));
    }
    if meta.len() > cap {
        return Err((
            FileFailure::TooLarge,
            format!(
                "{path} is {} bytes; at most {cap} are handed out",
                meta.len()
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&mut file)
        .take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_failure(path, e))?;
    if bytes.len() as u64 > cap {
        return Err((
            FileFailure::TooLarge,
            format!("{path} grew over {cap} bytes"),
        ));
    }
    Ok(AgentMessage::File {
        data: encode_bytes(&bytes),
    })
}

fn list(limit: usize) -> Outcome {
    let mut files = Vec::new();
    let mut truncated = false;
    walk(
        Path::new(HOME),
        Path::new(""),
        0,
        limit,
        &mut files,
        &mut truncated,
    );
    Ok(AgentMessage::Files { files, truncated })
}

/// Lists `dir` into `files`, folders before what they hold; symlinks are listed as
/// files of their own size, never followed.
fn walk(
    dir: &Path,
    rel: &Path,
    depth: usize,
    limit: usize,
    files: &mut Vec<FileEntry>,
    truncated: &mut bool,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if files.len() >= limit {
            *truncated = true;
            return;
        }
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        let path = rel.join(entry.file_name());
        let is_dir = meta.is_dir();
        files.push(FileEntry {
            path: path.to_string_lossy().into_owned(),
            size: if is_dir { 0 } else { meta.len() },
            kind: if is_dir { "dir" } else { "file" }.to_owned(),
        });
        if is_dir && depth + 1 < LIST_DEPTH {
            walk(&entry.path(), &path, depth + 1, limit, files, truncated);
        }
    }
}

/// The folders and the file name of a relative path that stays below the home folder
/// by its words (the runner checks too; symlinks are the kernel's to refuse).
fn split(path: &str) -> Result<(Vec<PathBuf>, PathBuf), (FileFailure, String)> {
    let bad = || {
        (
            FileFailure::BadPath,
            format!("{path:?} is not a path inside the home folder"),
        )
    };
    let mut parts = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => parts.push(PathBuf::from(part)),
            Component::CurDir => {}
            _ => return Err(bad()),
        }
    }
    let name = parts.pop().ok_or_else(bad)?;
    Ok((parts, name))
}

fn open_home() -> Result<OwnedFd, (FileFailure, String)> {
    nix::fcntl::open(
        HOME,
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| (FileFailure::Io, format!("opening the home folder: {e}")))
}

/// Opens (with `create`, makes first) the folder `name` in `dir`.
fn enter(
    dir: &OwnedFd,
    name: &Path,
    path: &str,
    create: bool,
) -> Result<OwnedFd, (FileFailure, String)> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY;
    match open_beneath(dir, name, flags, path) {
        Err((FileFailure::NotFound, _)) if create => {
            match nix::sys::stat::mkdirat(dir.as_fd(), name, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => open_beneath(dir, name, flags, path),
                Err(e) => Err(failure(path, e)),
            }
        }
        other => other,
    }
}

/// `openat2` of `name` below `dir`, refusing any resolution that leaves `dir` and any
/// magic link.
fn open_beneath(
    dir: &OwnedFd,
    name: &Path,
    flags: OFlag,
    path: &str,
) -> Result<OwnedFd, (FileFailure, String)> {
    let mut how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    // openat2 refuses a mode without O_CREAT.
    if flags.contains(OFlag::O_CREAT) {
        how = how.mode(Mode::from_bits_truncate(0o644));
    }
    openat2(dir.as_fd(), name, how).map_err(|e| failure(path, e))
}

fn failure(path: &str, e: Errno) -> (FileFailure, String) {
    match e {
        Errno::EXDEV | Errno::ELOOP | Errno::ENOTDIR | Errno::EISDIR => (
            FileFailure::BadPath,
            format!("{path} leads out of the home folder or through something not a folder ({e})"),
        ),
        Errno::ENOENT => (FileFailure::NotFound, format!("{path}: no such file")),
        Errno::ENOSPC | Errno::EDQUOT | Errno::EFBIG => (
            FileFailure::TooLarge,
            format!("{path}: the home folder is full ({e})"),
        ),
        other => (FileFailure::Io, format!("{path}: {other}")),
    }
}

fn io_failure(path: &str, e: std::io::Error) -> (FileFailure, String) {
    match e.raw_os_error() {
        Some(code) => failure(path, Errno::from_raw(code)),
        None => (FileFailure::Io, format!("{path}: {e}")),
    }
}
