//! What the data folder says of each thing it keeps, beside its archive: a JSON record,
//! written once (mode 0600) and read back when a runner starts on the folder.

use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A paused session: what it needs to wake under its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PausedRecord {
    /// The session's id.
    pub id: String,
    /// Its idle timeout, ms.
    pub idle_timeout_ms: u64,
    /// Its TTL (counted again from each wake), ms.
    pub ttl_ms: u64,
    /// Runs so far.
    pub runs: u64,
    /// When it was paused, ms since the Unix epoch.
    pub paused_at_ms: u64,
    /// Its folder's bytes.
    pub bytes: u64,
    /// Its backend saved it whole (a VM's memory too), beside its files.
    #[serde(default)]
    pub memory: bool,
    /// The hosts its programs were granted at the runner's proxy, normalized (none: that
    /// runner opened no host). A runner waking it grants only those its own policy
    /// still allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<String>>,
    /// Bytes its programs had moved through the proxy, of its budget over its whole
    /// life (`RUNNER_EGRESS_MAX_BYTES`), which a runner waking it goes on counting from.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub egress_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A snapshot: a session's files, taken at one moment, to start sessions from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRecord {
    /// The snapshot's id.
    pub snapshot_id: String,
    /// The session it was taken of (empty for an imported one).
    pub session_id: String,
    /// When it was taken (or imported), ms since the Unix epoch.
    pub created_at_ms: u64,
    /// Its folder's bytes.
    pub bytes: u64,
    /// Its backend saved the session whole (a VM's memory too), beside its files.
    #[serde(default)]
    pub memory: bool,
}

/// A time as milliseconds since the Unix epoch.
pub fn epoch_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Milliseconds since the Unix epoch as a time.
pub fn from_epoch_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}
