//! The bodies of the runner's endpoints that keep sessions past their sandbox: pause and
//! wake (`POST /sessions/{id}/pause`, `/resume`), snapshots (`POST
//! /sessions/{id}/snapshots`, `GET /snapshots`, `DELETE /snapshots/{id}`, export and
//! import) and forks (`POST /sessions/{id}/fork`).

use serde::{Deserialize, Serialize};

/// The most sessions one fork makes.
pub const MAX_FORKS: u64 = 16;

/// Whether a session has its sandbox now.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    /// It has a sandbox (frozen between its calls).
    Active,
    /// Its files are on the runner's disk and it has no sandbox; any call wakes it.
    Paused,
}

/// The 200 answer of `POST /sessions/{id}/pause`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseInfo {
    /// The session's id (it keeps it).
    pub id: String,
    /// `paused`.
    pub state: SessionState,
    /// When it was paused (RFC 3339, UTC).
    pub paused_at: String,
    /// The bytes its files take on the runner's disk.
    pub bytes: u64,
}

/// A snapshot, as `POST /sessions/{id}/snapshots` (201) and `GET /snapshots` give it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotInfo {
    /// Its id: `fromSnapshot` of `POST /sessions` starts a session from it.
    pub snapshot_id: String,
    /// The session it was taken of (empty for an imported one).
    pub session_id: String,
    /// When it was taken or imported (RFC 3339, UTC).
    pub created_at: String,
    /// The bytes it takes on the runner's disk.
    pub bytes: u64,
    /// When it ends (RFC 3339, UTC).
    pub expires_at: String,
}

/// The answer of `GET /snapshots`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotList {
    /// Every snapshot of the runner, oldest first.
    pub snapshots: Vec<SnapshotInfo>,
}

/// The body of `POST /sessions/{id}/fork`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkRequest {
    /// How many copies, 1 to 16 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

/// One session a fork made.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkedSession {
    /// Its id.
    pub id: String,
    /// Its idle timeout (the original's), ms.
    pub idle_timeout_ms: u64,
    /// When it ends at the latest if never used (RFC 3339, UTC): it starts paused, and
    /// wakes at its first call.
    pub expires_at: String,
}

/// The 201 answer of `POST /sessions/{id}/fork`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkAnswer {
    /// The new sessions, each with its own copy of the original's files.
    pub sessions: Vec<ForkedSession>,
}

/// The 201 answer of `POST /snapshots/import`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportAnswer {
    /// The new snapshot's id on this runner.
    pub snapshot_id: String,
    /// The bytes it takes on the runner's disk.
    pub bytes: u64,
}
