//! The runner's sessions, which back sandboxes: `POST /sessions`, a session's run, its
//! files (`PUT`/`GET /sessions/{id}/files/{path}`, `GET /sessions/{id}/files`) and
//! `DELETE /sessions/{id}`.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use sandbox_protocol::api::{
    CreateSession, FileList, Limits, RunRequest, RunResponse, SessionInfo,
};

use super::answer::{empty_within, error_from, json_within, read_json, transport_error};
use super::streamed::Listeners;
use super::wait::{ask_until_free, bounded};
use super::{RunnerClient, RunnerError};

/// How long a file or process operation, a listing or a close may take (besides a wait
/// the caller asks for: [`process_output`](RunnerClient::process_output)'s).
pub(super) const OPERATION_TIMEOUT: Duration = Duration::from_secs(60);

impl RunnerClient {
    /// Opens a session. Like a run, it takes a sandbox from the runner's pool, so it waits
    /// for one as long as the runner's queue wait and answer margin allow
    /// ([`Limits::answer_within`], with no run time).
    pub async fn create_session(
        &self,
        request: &CreateSession,
        limits: &Limits,
    ) -> Result<SessionInfo, RunnerError> {
        let deadline = limits.answer_within(Duration::ZERO);
        ask_until_free(deadline, || {
            bounded(deadline, self.create_session_once(request))
        })
        .await
    }

    /// One ask to open a session, without asking again when the runner is busy: the pool
    /// decides where to ask next.
    pub(crate) async fn create_session_once(
        &self,
        request: &CreateSession,
    ) -> Result<SessionInfo, RunnerError> {
        let response = self
            .request(Method::POST, &["sessions"])
            .json(request)
            .send()
            .await
            .map_err(transport_error)?;
        read_json(response, StatusCode::CREATED).await
    }

    /// Runs one program in session `session`, as [`run`](Self::run) does in a fresh
    /// sandbox (its output and tool calls to `listeners` as they come).
    pub async fn run_in_session(
        &self,
        session: &str,
        request: &RunRequest,
        deadline: Duration,
        listeners: Listeners<'_>,
    ) -> Result<RunResponse, RunnerError> {
        self.run_at(&["sessions", session, "run"], request, deadline, listeners)
            .await
    }

    /// Writes `bytes` to `path` (relative to the home folder, `/`-separated, without
    /// `.` or `..`) in session `session`.
    pub async fn put_file(
        &self,
        session: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), RunnerError> {
        let segments = file_segments(session, path);
        let builder = self.request(Method::PUT, &segments).body(bytes);
        empty_within(OPERATION_TIMEOUT, builder)
            .await
            .map_err(file_error)
    }

    /// The bytes of `path` in session `session`, if there are at most `cap` of them.
    pub async fn get_file(
        &self,
        session: &str,
        path: &str,
        cap: usize,
    ) -> Result<Vec<u8>, RunnerError> {
        let segments = file_segments(session, path);
        let builder = self.request(Method::GET, &segments);
        let over_cap = || {
            RunnerError::FileTooLarge(format!(
                "it is over download_file's cap of {}; have a program make a smaller file \
                 (compress, split or summarize it) and download that",
                crate::wording::bytes(cap as u64)
            ))
        };
        bounded(OPERATION_TIMEOUT, async {
            let mut response = builder.send().await.map_err(transport_error)?;
            if response.status() != StatusCode::OK {
                return Err(error_from(response).await);
            }
            if response.content_length().is_some_and(|n| n > cap as u64) {
                return Err(over_cap());
            }
            let mut bytes = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
                if bytes.len() + chunk.len() > cap {
                    return Err(over_cap());
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(bytes)
        })
        .await
        .map_err(file_error)
    }

    /// The session's home folder, recursively.
    pub async fn list_files(&self, session: &str) -> Result<FileList, RunnerError> {
        let builder = self.request(Method::GET, &["sessions", session, "files"]);
        json_within(OPERATION_TIMEOUT, builder, StatusCode::OK).await
    }

    /// Ends the session; its sandbox is destroyed before the runner answers.
    pub async fn close_session(&self, session: &str) -> Result<(), RunnerError> {
        let builder = self.request(Method::DELETE, &["sessions", session]);
        empty_within(OPERATION_TIMEOUT, builder).await
    }
}

fn file_segments<'a>(session: &'a str, path: &'a str) -> Vec<&'a str> {
    ["sessions", session, "files"]
        .into_iter()
        .chain(path.split('/'))
        .collect()
}

/// A 413 from a file operation is about the file (the runner's file cap, or a full home
/// folder), not about a program.
fn file_error(error: RunnerError) -> RunnerError {
    match error {
        RunnerError::Refused {
            status: 413,
            message,
        } => RunnerError::FileTooLarge(message),
        other => other,
    }
}
