//! What keeps a runner's session past its sandbox: `POST /sessions/{id}/pause`, `POST
//! /sessions/{id}/snapshots`, `DELETE /snapshots/{id}` and `POST /sessions/{id}/fork`. A session is started from a
//! snapshot by [`create_session`](RunnerClient::create_session) with `fromSnapshot`, on
//! the runner that holds the snapshot.

use reqwest::{Method, StatusCode};
use sandbox_protocol::snapshot::{ForkAnswer, ForkRequest, ForkedSession, PauseInfo, SnapshotInfo};

use super::answer::{empty_within, json_within};
use super::sessions::OPERATION_TIMEOUT;
use super::{RunnerClient, RunnerError};

impl RunnerClient {
    /// Pauses session `session`: its files go to the runner's disk and its sandbox is
    /// released; its next call wakes it.
    pub async fn pause_session(&self, session: &str) -> Result<PauseInfo, RunnerError> {
        let builder = self.request(Method::POST, &["sessions", session, "pause"]);
        json_within(OPERATION_TIMEOUT, builder, StatusCode::OK).await
    }

    /// Takes a snapshot of session `session`'s files; the session goes on.
    pub async fn snapshot_session(&self, session: &str) -> Result<SnapshotInfo, RunnerError> {
        let builder = self.request(Method::POST, &["sessions", session, "snapshots"]);
        json_within(OPERATION_TIMEOUT, builder, StatusCode::CREATED).await
    }

    /// Deletes snapshot `snapshot` (the sessions started from it keep their files).
    pub async fn delete_snapshot(&self, snapshot: &str) -> Result<(), RunnerError> {
        let builder = self.request(Method::DELETE, &["snapshots", snapshot]);
        empty_within(OPERATION_TIMEOUT, builder).await
    }

    /// Makes `count` new sessions, each with a copy of session `session`'s files.
    pub async fn fork_session(
        &self,
        session: &str,
        count: u64,
    ) -> Result<Vec<ForkedSession>, RunnerError> {
        let request = ForkRequest { count: Some(count) };
        let builder = self
            .request(Method::POST, &["sessions", session, "fork"])
            .json(&request);
        let answer: ForkAnswer =
            json_within(OPERATION_TIMEOUT, builder, StatusCode::CREATED).await?;
        Ok(answer.sessions)
    }
}
