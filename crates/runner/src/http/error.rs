//! The API's errors: each failure, typed down to the layer that failed, mapped to a
//! status and `{"error": {"code", "message"}}` (the codes and their statuses are
//! [`codes`]').

use super::codes::{self, ErrorCode};
use crate::job::RequestError;
use crate::live::tools::AnswerError;
use crate::pool::AcquireError;
use crate::session::SessionError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandbox_protocol::agent::FileFailure;
use sandbox_protocol::api::ErrorBody;
use sandbox_protocol::process::ProcessFailure;

/// An error answer: a status and `{"error": {"code", "message"}}`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is not a valid run request (400).
    #[error("{0}")]
    BadRequest(String),
    /// No token, or the wrong one (401).
    #[error("{0}")]
    Unauthorized(&'static str),
    /// The program or the body is over its cap (413).
    #[error("{0}")]
    TooLarge(String),
    /// No sandbox could be had: the queue is full (429), the wait ran out or the runner is shutting down (503).
    #[error(transparent)]
    Busy(#[from] AcquireError),
    /// The sandbox failed (500).
    #[error(transparent)]
    Sandbox(Box<dyn std::error::Error + Send + Sync>),
    /// The run was stopped before it ended (500).
    #[error("the run was stopped before it ended")]
    Cancelled,
    /// The run's task failed (500).
    #[error("the run's task failed: {0}")]
    RunTask(#[from] tokio::task::JoinError),
    /// The runner drains (after SIGTERM/SIGINT): it takes no new run or session (503).
    /// Nothing was started, so the caller may send the same request to another runner.
    #[error(
        "the runner is draining (shutting down): it takes no new runs or sessions; \
         nothing was started, send the request to another runner"
    )]
    Draining,
    /// The runner has not finished starting: its pool has no sandbox yet (503).
    #[error("the runner is starting: it has no sandbox yet; nothing was started, retry shortly")]
    Starting,
    /// No such endpoint (404).
    #[error(
        "no such endpoint: the runner serves POST /run, the sessions, GET /health, \
         GET /health/live, GET /metrics and GET /openapi.json (which describes them all)"
    )]
    NotFound,
    /// The endpoint does not take this method (405).
    #[error("method not allowed on this endpoint")]
    MethodNotAllowed,
    /// A session operation was refused or failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The program's inline dependencies were refused (nothing ran).
    #[error(transparent)]
    Deps(#[from] crate::deps::DepsRefusal),
    /// `egress` names hosts outside the operator's list (400).
    #[error("{0}")]
    EgressNotAllowed(#[from] sandbox_egress::NotAllowed),
    /// A tool call's answer found no run or no call waiting for it (404).
    #[error(transparent)]
    ToolAnswer(#[from] AnswerError),
}

impl ApiError {
    /// Session `id`'s agent answered `what` (a file operation, a process operation) with
    /// a message of another exchange: its channel is out of step (500).
    pub(super) fn out_of_turn(id: &str, what: &str) -> ApiError {
        ApiError::Session(SessionError::Sandbox(format!(
            "session {id}'s agent answered {what} out of turn"
        )))
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        let known = match self {
            ApiError::BadRequest(_) => codes::BAD_REQUEST,
            ApiError::Unauthorized(_) => codes::UNAUTHORIZED,
            ApiError::TooLarge(_) => codes::TOO_LARGE,
            ApiError::Busy(e) => acquire_code(e),
            ApiError::Sandbox(_) | ApiError::Cancelled | ApiError::RunTask(_) => {
                codes::SANDBOX_FAILED
            }
            ApiError::Draining => codes::DRAINING,
            ApiError::Starting => codes::STARTING,
            ApiError::NotFound => codes::NOT_FOUND,
            ApiError::MethodNotAllowed => codes::METHOD_NOT_ALLOWED,
            ApiError::Session(e) => session_code(e),
            ApiError::Deps(e) => return e.status_and_code(),
            ApiError::EgressNotAllowed(_) => codes::EGRESS_NOT_ALLOWED,
            ApiError::ToolAnswer(AnswerError::RunNotFound(_)) => codes::RUN_NOT_FOUND,
            ApiError::ToolAnswer(AnswerError::CallNotFound { .. }) => codes::TOOL_CALL_NOT_FOUND,
        };
        (known.status, known.code)
    }

    /// The error as its answer's body says it: `{"error": {"code", "message"}}` (also the
    /// last line of a streamed answer that failed after it began).
    pub(super) fn body(&self) -> ErrorBody {
        ErrorBody::new(self.status_and_code().1, self.to_string())
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::CodeTooLarge { .. } => ApiError::TooLarge(e.to_string()),
            RequestError::Language(_) | RequestError::Timeout { .. } => {
                ApiError::BadRequest(e.to_string())
            }
        }
    }
}

fn acquire_code(e: &AcquireError) -> ErrorCode {
    match e {
        AcquireError::QueueFull { .. } => codes::POOL_EXHAUSTED,
        AcquireError::Timeout(_) => codes::QUEUE_TIMEOUT,
        AcquireError::Closed => codes::SHUTTING_DOWN,
    }
}

fn session_code(e: &SessionError) -> ErrorCode {
    match e {
        SessionError::NotFound(_) => codes::SESSION_NOT_FOUND,
        SessionError::Busy(_) => codes::SESSION_BUSY,
        SessionError::TooMany(_) => codes::TOO_MANY_SESSIONS,
        SessionError::BadRequest(_) => codes::BAD_REQUEST,
        SessionError::Acquire(e) => acquire_code(e),
        SessionError::Sandbox(_) | SessionError::Random(_) => codes::SANDBOX_FAILED,
        SessionError::BadPath(_) | SessionError::File(FileFailure::BadPath, _) => codes::BAD_PATH,
        SessionError::File(FileFailure::NotFound, _) => codes::FILE_NOT_FOUND,
        SessionError::File(FileFailure::TooLarge, _) => codes::TOO_LARGE,
        SessionError::File(FileFailure::NotAFile, _) => codes::NOT_A_FILE,
        SessionError::File(FileFailure::Io, _) => codes::FILE_ERROR,
        SessionError::FileTimeout(_) => codes::FILE_TIMEOUT,
        SessionError::Process(ProcessFailure::NotFound, _) => codes::PROCESS_NOT_FOUND,
        SessionError::Process(ProcessFailure::Ended, _) => codes::PROCESS_ENDED,
        SessionError::Process(ProcessFailure::TooMany, _) => codes::TOO_MANY_PROCESSES,
        SessionError::Process(ProcessFailure::BadPath, _) => codes::BAD_PATH,
        SessionError::Process(ProcessFailure::StdinFull, _) => codes::STDIN_FULL,
        SessionError::Process(ProcessFailure::Io, _) => codes::PROCESS_ERROR,
        SessionError::SnapshotNotFound(_) => codes::SNAPSHOT_NOT_FOUND,
        SessionError::StorageFull(_) => codes::STORAGE_FULL,
        SessionError::BadArchive(_) => codes::BAD_ARCHIVE,
        SessionError::Store(_) | SessionError::Archive(_) => codes::STORAGE_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, _) = self.status_and_code();
        let mut response = (status, Json(self.body())).into_response();
        let headers = response.headers_mut();
        match self {
            ApiError::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::Busy(_)
            | ApiError::Draining
            | ApiError::Starting
            | ApiError::Session(SessionError::Acquire(_) | SessionError::TooMany(_)) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}
