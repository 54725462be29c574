//! Running one program on one runner: `POST /run` or a session's run, one ask at a time
//! ([`RunnerClient::run_once`], for the pool, which decides where to ask next) or asking
//! the same runner again while it is busy ([`RunnerClient::run`]).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use sandbox_protocol::api::{Limits, RunRequest, RunResponse};

use super::answer::{read_json, transport_error};
use super::wait::{ask_until_free, bounded};
use super::{RunnerClient, RunnerError};

/// Time allowed beyond a run's own timeout and the runner's queue wait for the sandbox
/// to report and the network (the process backend's report grace).
pub const RUN_MARGIN: Duration = Duration::from_secs(5);

impl RunnerClient {
    /// Runs one program on a runner with `limits`. The request carries the timeout the
    /// caller means (the runner's default when it gives none, so that the wait here is
    /// bounded by what the runner will do).
    ///
    /// A call waits for a sandbox as long as its own deadline allows (its timeout, the
    /// runner's queue wait and [`RUN_MARGIN`]), not just the runner's queue wait: while
    /// the runner answers that every sandbox is busy (the program has not started), it
    /// asks again.
    pub async fn run(
        &self,
        request: &RunRequest,
        limits: &Limits,
        compile_ms: u64,
    ) -> Result<RunResponse, RunnerError> {
        self.run_at(&["run"], request, limits, compile_ms).await
    }

    /// [`run`](Self::run) at `segments`: `POST /run`, or a session's run.
    pub(super) async fn run_at(
        &self,
        segments: &[&str],
        request: &RunRequest,
        limits: &Limits,
        compile_ms: u64,
    ) -> Result<RunResponse, RunnerError> {
        let deadline = run_deadline(request, limits, compile_ms);
        ask_until_free(deadline, || {
            bounded(deadline, self.run_once(segments, request, limits))
        })
        .await
    }

    /// One ask of a run at `segments`, without asking again when the runner is busy:
    /// the pool decides where to ask next. The request carries the timeout the caller
    /// means (the runner's default when it gives none).
    pub(crate) async fn run_once(
        &self,
        segments: &[&str],
        request: &RunRequest,
        limits: &Limits,
    ) -> Result<RunResponse, RunnerError> {
        let request = RunRequest {
            timeout_ms: Some(timeout_ms(request, limits)),
            ..request.clone()
        };
        let response = self
            .request(Method::POST, segments)
            .json(&request)
            .send()
            .await
            .map_err(transport_error)?;
        read_json(response, StatusCode::OK).await
    }
}

/// How long a run may take from the first ask to its answer, however many runners or
/// asks it takes: its timeout and `compile_ms`, the runner's queue wait, and
/// [`RUN_MARGIN`].
pub(super) fn run_deadline(request: &RunRequest, limits: &Limits, compile_ms: u64) -> Duration {
    Duration::from_millis(timeout_ms(request, limits) + compile_ms)
        + Duration::from_millis(limits.queue_timeout_ms)
        + RUN_MARGIN
}

/// The run's timeout: its own, else the runner's default.
fn timeout_ms(request: &RunRequest, limits: &Limits) -> u64 {
    request.timeout_ms.unwrap_or(limits.default_timeout_ms)
}
