//! What every process route does: name one process (`ProcessPath`), and ask the
//! session's agent ([`ask`]), waiting a moment for a call in flight.

use super::error::ApiError;
use crate::session::{SessionError, Sessions};
use sandbox_protocol::process::{ProcessAnswer, ProcessFailure, ProcessRequest};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use utoipa::IntoParams;

/// How long a process operation waits for the session's call in flight (a run) to end.
pub(super) const CALL_WAIT: Duration = Duration::from_secs(2);

/// One process of a session: `/sessions/{id}/processes/{pid}/...`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct ProcessPath {
    /// The session's id, as `POST /sessions` answered it.
    pub(super) id: String,
    /// The process's id inside the sandbox, as `POST /sessions/{id}/processes` answered
    /// it.
    #[param(value_type = i32)]
    pub(super) pid: String,
}

impl ProcessPath {
    /// The pid, as a number (one that is not is no process's: 404).
    pub(super) fn pid(&self) -> Result<i32, ApiError> {
        self.pid.parse().map_err(|_| {
            ApiError::Session(SessionError::Process(
                ProcessFailure::NotFound,
                format!("no process {:?} in this session", self.pid),
            ))
        })
    }
}

/// Asks the session's agent, waiting [`CALL_WAIT`] at most for a run in flight.
pub(super) async fn ask<S>(
    sessions: &Arc<Sessions<S>>,
    id: &str,
    request: ProcessRequest,
) -> Result<ProcessAnswer, ApiError>
where
    S: crate::pool::PooledSandbox,
    S::Error: std::fmt::Display + Send,
{
    Ok(sessions.process(id, request, CALL_WAIT).await?)
}
