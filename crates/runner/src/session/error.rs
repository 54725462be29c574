//! The sessions' settings and errors.

use crate::pool::AcquireError;
use sandbox_protocol::agent::FileFailure;
use sandbox_protocol::process::ProcessFailure;
use std::time::Duration;

/// What a session's idle timeout does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnIdle {
    /// Its files go to the runner's disk, its sandbox is released, and its next call
    /// wakes it.
    Pause,
    /// It ends.
    End,
}

/// The sessions' settings.
#[derive(Debug, Clone, Copy)]
pub struct SessionConfig {
    /// Idle timeout of a session that asks for none.
    pub idle: Duration,
    /// TTL of a session that asks for none.
    pub ttl: Duration,
    /// The longest idle timeout a session may ask for.
    pub max_idle: Duration,
    /// The longest TTL a session may ask for.
    pub max_ttl: Duration,
    /// Sessions open at once.
    pub max_sessions: usize,
    /// The largest file put into or taken from a session.
    pub file_cap_bytes: usize,
    /// The bytes of each output stream kept of a process.
    pub process_output_bytes: u64,
    /// Processes running at once in a session.
    pub max_processes: usize,
    /// What the idle timeout does.
    pub on_idle: OnIdle,
    /// How long a paused session is kept.
    pub paused_ttl: Duration,
    /// How long a snapshot is kept.
    pub snapshot_ttl: Duration,
}

/// Why a session operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// No session has this id (never made, deleted, or expired).
    #[error("no session {0}: it was never made, or it was deleted or has expired; make a new one with POST /sessions")]
    NotFound(String),
    /// A run (or a file operation) of the session is in flight.
    #[error("session {0} is running a program: one run at a time, and its files and processes are answered between runs; retry when it ends")]
    Busy(String),
    /// As many sessions are open as the runner keeps.
    #[error("{0} sessions are open, the most this runner keeps (RUNNER_MAX_SESSIONS); close one or wait for one to expire")]
    TooMany(usize),
    /// The request asks for what cannot be.
    #[error("{0}")]
    BadRequest(String),
    /// No sandbox could be had from the pool.
    #[error(transparent)]
    Acquire(#[from] AcquireError),
    /// The session's sandbox failed; the session is gone.
    #[error("the session's sandbox failed, and the session has ended: {0}")]
    Sandbox(String),
    /// The id could not be drawn.
    #[error("drawing a session id: {0}")]
    Random(std::io::Error),
    /// A file path that leaves the home folder, by its words.
    #[error("{0:?} is not a path inside the home folder (relative, without '..')")]
    BadPath(String),
    /// The agent refused a file operation.
    #[error("{1}")]
    File(FileFailure, String),
    /// The agent refused a process operation.
    #[error("{1}")]
    Process(ProcessFailure, String),
    /// The agent has not answered a file operation in time; the session stays busy
    /// until it does.
    #[error("the sandbox has not answered the file operation within {0:?}; the session stays, busy until it answers")]
    FileTimeout(Duration),
    /// No snapshot has this id.
    #[error("no snapshot {0} on this runner: it was never taken here, or it was deleted or has expired (GET /snapshots lists them)")]
    SnapshotNotFound(String),
    /// What would be stored does not fit; nothing changed.
    #[error("{0}")]
    StorageFull(String),
    /// The data folder failed.
    #[error("{0}")]
    Store(String),
    /// The session's files could not be packed or unpacked; nothing changed.
    #[error("{0}")]
    Archive(String),
    /// An imported archive was refused.
    #[error("{0}")]
    BadArchive(String),
}

impl From<crate::store::StoreError> for SessionError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::Full { .. } => SessionError::StorageFull(e.to_string()),
            e => SessionError::Store(e.to_string()),
        }
    }
}
