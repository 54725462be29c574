//! The API's errors: each failure, typed down to the layer that failed, mapped to a
//! status and `{"error": {"code", "message"}}`.

use crate::pool::AcquireError;
use crate::session::SessionError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandbox_protocol::agent::FileFailure;
use sandbox_protocol::api::ErrorBody;

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
         GET /health/live and GET /metrics"
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
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            ApiError::Busy(e) => acquire_status_and_code(e),
            ApiError::Sandbox(_) | ApiError::Cancelled | ApiError::RunTask(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "sandbox_failed")
            }
            ApiError::Draining => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
            ApiError::Starting => (StatusCode::SERVICE_UNAVAILABLE, "starting"),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::Session(e) => session_status_and_code(e),
            ApiError::Deps(e) => e.status_and_code(),
        }
    }
}

fn acquire_status_and_code(e: &AcquireError) -> (StatusCode, &'static str) {
    match e {
        AcquireError::QueueFull { .. } => (StatusCode::TOO_MANY_REQUESTS, "pool_exhausted"),
        AcquireError::Timeout(_) => (StatusCode::SERVICE_UNAVAILABLE, "queue_timeout"),
        AcquireError::Closed => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
    }
}

fn session_status_and_code(e: &SessionError) -> (StatusCode, &'static str) {
    match e {
        SessionError::NotFound(_) => (StatusCode::NOT_FOUND, "session_not_found"),
        SessionError::Busy(_) => (StatusCode::CONFLICT, "session_busy"),
        SessionError::TooMany(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_sessions"),
        SessionError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
        SessionError::Acquire(e) => acquire_status_and_code(e),
        SessionError::Sandbox(_) | SessionError::Random(_) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "sandbox_failed")
        }
        SessionError::BadPath(_) | SessionError::File(FileFailure::BadPath, _) => {
            (StatusCode::BAD_REQUEST, "bad_path")
        }
        SessionError::File(FileFailure::NotFound, _) => (StatusCode::NOT_FOUND, "file_not_found"),
        SessionError::File(FileFailure::TooLarge, _) => {
            (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
        }
        SessionError::File(FileFailure::NotAFile, _) => (StatusCode::BAD_REQUEST, "not_a_file"),
        SessionError::File(FileFailure::Io, _) => (StatusCode::BAD_REQUEST, "file_error"),
        SessionError::FileTimeout(_) => (StatusCode::GATEWAY_TIMEOUT, "file_timeout"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let mut response = (status, Json(ErrorBody::new(code, self.to_string()))).into_response();
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
