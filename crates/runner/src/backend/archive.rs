//! What moving a session archive (a session's home folder and `/tmp` as one tar stream,
//! see the `sandbox-archive` crate) between a file of the runner's and a sandbox gives:
//! what it moved ([`ArchiveSummary`]), or why it was refused ([`ArchiveRefusal`]). The
//! moving itself is the channel's ([`channel::pack_to`](super::channel::pack_to),
//! [`channel::unpack_from`](super::channel::unpack_from)), the same for every backend.

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
