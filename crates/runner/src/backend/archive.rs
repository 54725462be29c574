//! A session archive (a session's home folder and `/tmp` as one tar stream, see the
//! `sandbox-archive` crate) moved between a file of the runner's and a sandbox: what an
//! operation moved ([`ArchiveSummary`]), why one was refused ([`ArchiveRefusal`]), and
//! the file's side of both, the same for every backend ([`pack_to`], [`unpack_from`]).

use super::channel::{self, ChannelError};
use sandbox_archive::{Limits, BLOCK};
use std::path::Path;
use tokio::io::{AsyncRead, AsyncWrite};

/// What one archive operation moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveSummary {
    /// The archive's bytes.
    pub bytes: u64,
    /// Its entries.
    pub entries: u64,
}

/// Why an archive operation was refused; the sandbox (and its session) goes on.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveRefusal {
    /// The archive would be larger than the limit.
    #[error("the session's files take more than {limit} bytes as an archive")]
    TooLarge {
        /// The limit, in bytes of archive.
        limit: u64,
    },
    /// The sandbox refused: the agent's words (a path it could not read or make, an
    /// archive it found wrong, a full folder).
    #[error("{0}")]
    Refused(String),
    /// The runner's file could not be opened, written or read.
    #[error("the archive file: {0}")]
    Io(std::io::Error),
}

/// What an archive operation gives: the summary or a refusal, or the sandbox's failure.
pub type ArchiveOutcome = Result<Result<ArchiveSummary, ArchiveRefusal>, ChannelError>;

/// Writes the session archive of the sandbox at the other end of `s` to the file `to`
/// (created 0600, truncated), at most `max_bytes` of it.
pub async fn pack_to<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    to: &Path,
    max_bytes: u64,
) -> ArchiveOutcome {
    let opened = tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(to)
        .await;
    let mut file = match opened {
        Ok(file) => file,
        Err(e) => return Ok(Err(ArchiveRefusal::Io(e))),
    };
    channel::pack(s, max_bytes, &mut file).await
}

/// Restores the session archive in the file `from` (one the runner wrote, or checked
/// with `sandbox_archive::normalize`) into the sandbox at the other end of `s`. The
/// agent checks it again, within what the file's size allows: its bytes, and an entry
/// per 512-byte block at most.
pub async fn unpack_from<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    from: &Path,
) -> ArchiveOutcome {
    let opened = match tokio::fs::File::open(from).await {
        Ok(file) => file.metadata().await.map(|m| (file, m.len())),
        Err(e) => Err(e),
    };
    let (mut file, len) = match opened {
        Ok(opened) => opened,
        Err(e) => return Ok(Err(ArchiveRefusal::Io(e))),
    };
    let limits = Limits {
        max_bytes: len,
        max_entries: len / BLOCK,
    };
    channel::unpack(s, &mut file, limits).await
}

#[cfg(test)]
mod tests;
