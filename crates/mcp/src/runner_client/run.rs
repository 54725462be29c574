//! Running one program on one runner: `POST /run` or a session's run, one ask at a time
//! ([`RunnerClient::run_once`], for the pool, which decides where to ask next) or asking
//! the same runner again while it is busy ([`RunnerClient::run`]).

use std::time::Duration;

use reqwest::StatusCode;
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
        let timeout_ms = request.timeout_ms.unwrap_or(limits.default_timeout_ms);
        let request = RunRequest {
            timeout_ms: Some(timeout_ms),
            ..request.clone()
        };
        let deadline = Duration::from_millis(timeout_ms + compile_ms)
            + Duration::from_millis(limits.queue_timeout_ms)
            + RUN_MARGIN;
        ask_until_free(deadline, || {
            let builder = self.request(reqwest::Method::POST, segments).json(&request);
            bounded(deadline, async {
                let response = builder.send().await.map_err(transport_error)?;
                read_json(response, StatusCode::OK).await
            })
        })
        .await
    }

    /// One ask of a run at `segments`, without asking again when the runner is busy:
    /// the pool decides where to ask next.
    pub(crate) async fn run_once(
        &self,
        segments: &[&str],
        request: &RunRequest,
        limits: &Limits,
    ) -> Result<RunResponse, RunnerError> {
        let timeout_ms = request.timeout_ms.unwrap_or(limits.default_timeout_ms);
        let request = RunRequest {
            timeout_ms: Some(timeout_ms),
            ..request.clone()
        };
        let response = self
            .request(reqwest::Method::POST, segments)
            .json(&request)
            .send()
            .await
            .map_err(transport_error)?;
        read_json(response, StatusCode::OK).await
    }
}
