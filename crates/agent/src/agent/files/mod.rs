//! A session's file operations, done here, inside the sandbox, as the program's user
//! (every access is checked against its file-system ids, never the agent's), from the
//! home folder's descriptor, which the caller opens (`home.rs`).
//!
//! Every path is opened from that descriptor, one component at a time, with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` and `O_NONBLOCK` ([`beneath`]):
//! neither `..` nor a symlink the program made, nor one it swaps in while an operation
//! runs, leads anywhere, and no open waits. What is read or written is judged by `fstat`
//! on the opened descriptor: only a regular file is, and anything else (a folder, a FIFO,
//! a socket, a device) is refused as `NotAFile` before a byte moves. A listing
//! ([`listing`]) walks the same way and is bounded in entries, bytes and depth. So no
//! file operation can block, whatever the program left in its home folder: reads and
//! writes are of regular files on the home folder's tmpfs. The session archive's two
//! operations ([`archive`]: the home folder and `/tmp` written as one tar stream, or
//! restored from one) walk and create the same way, in both folders.

pub(crate) mod archive;
mod beneath;
mod listing;

use super::identity::as_program_user;
use beneath::{failure, io_failure, open_in, parent_of, refused_open, regular};
use nix::fcntl::OFlag;
use sandbox_protocol::agent::{
    decode_bytes, encode_bytes, AgentMessage, FileFailure, FileRequest, LISTING_BYTES_CEILING,
};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

/// Does one file operation below the folder `home` and says how it went.
pub(crate) fn serve(home: BorrowedFd<'_>, request: &FileRequest) -> AgentMessage {
    let result = as_program_user(|| match request {
        FileRequest::Put { path, data } => put(home, path, data),
        FileRequest::Get { path, cap } => get(home, path, *cap),
        FileRequest::List { limit, max_bytes } => Ok(listing::list(
            home,
            *limit,
            (*max_bytes).min(LISTING_BYTES_CEILING),
        )),
        // Several frames each way: the exchange hands them to `archive`.
        FileRequest::Pack { .. } | FileRequest::Unpack { .. } | FileRequest::UnpackChunk { .. } => {
            Err((
                FileFailure::Io,
                "an archive's request is not a single file operation".into(),
            ))
        }
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

pub(crate) use beneath::Refusal;

type Outcome = Result<AgentMessage, Refusal>;

/// Writes `data` (base64) to `path` below `home`, making its folders. The file is
/// opened without truncating, checked to be a regular file, and only then emptied and
/// written: a FIFO, however held open, gets nothing.
fn put(home: BorrowedFd<'_>, path: &str, data: &str) -> Outcome {
    let bytes = decode_bytes(data).map_err(|e| (FileFailure::Io, format!("bad base64: {e}")))?;
    let (dir, name) = parent_of(home, path, true)?;
    let fd = open_in(dir.as_fd(), &name, OFlag::O_WRONLY | OFlag::O_CREAT)
        .map_err(|e| refused_open(dir.as_fd(), &name, path, e))?;
    regular(fd.as_fd(), path)?;
    nix::unistd::ftruncate(&fd, 0).map_err(|e| failure(path, e))?;
    File::from(fd)
        .write_all(&bytes)
        .map_err(|e| io_failure(path, e))?;
    Ok(AgentMessage::Stored)
}

/// The bytes of the regular file `path` below `home`, if it holds at most `cap`.
fn get(home: BorrowedFd<'_>, path: &str, cap: u64) -> Outcome {
    let (dir, name) = parent_of(home, path, false)?;
    let fd = open_in(dir.as_fd(), &name, OFlag::O_RDONLY)
        .map_err(|e| refused_open(dir.as_fd(), &name, path, e))?;
    let size = regular(fd.as_fd(), path)?.st_size.max(0) as u64;
    if size > cap {
        return Err((
            FileFailure::TooLarge,
            format!("{path} is {size} bytes; at most {cap} are handed out"),
        ));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    File::from(fd)
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

#[cfg(test)]
mod tests;
