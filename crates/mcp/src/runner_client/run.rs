//! Running one program on one runner: `POST /run` or a session's run, one ask at a time
//! ([`RunnerClient::run_once`], for the pool, which decides where to ask next) or asking
//! the same runner again while it is busy ([`RunnerClient::run`]). The caller gives the
//! request with its timeout and the deadline of the whole call (the runner's limits make
//! it: [`Limits::answer_within`](sandbox_protocol::api::Limits::answer_within)), and,
//! to see the output while the program runs or to answer its tool calls, [`Listeners`]:
//! the answer is then streamed (`streamed.rs`).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use sandbox_protocol::api::{RunRequest, RunResponse};

use super::answer::{read_json, transport_error};
use super::streamed::{accept_stream, read_streamed, Listeners};
use super::wait::{ask_until_free, bounded};
use super::{RunnerClient, RunnerError};

impl RunnerClient {
    /// Runs one program on this runner, its answer awaited until `deadline` (from now).
    ///
    /// A call waits for a sandbox as long as its deadline allows, not just the runner's
    /// queue wait: while the runner answers that every sandbox is busy (the program has
    /// not started), it asks again. The output and tool calls go to `listeners` as they
    /// come.
    pub async fn run(
        &self,
        request: &RunRequest,
        deadline: Duration,
        listeners: Listeners<'_>,
    ) -> Result<RunResponse, RunnerError> {
        self.run_at(&["run"], request, deadline, listeners).await
    }

    /// [`run`](Self::run) at `segments`: `POST /run`, or a session's run.
    pub(super) async fn run_at(
        &self,
        segments: &[&str],
        request: &RunRequest,
        deadline: Duration,
        listeners: Listeners<'_>,
    ) -> Result<RunResponse, RunnerError> {
        ask_until_free(deadline, || {
            bounded(deadline, self.run_once(segments, request, listeners))
        })
        .await
    }

    /// One ask of a run at `segments`, without asking again when the runner is busy:
    /// the pool decides where to ask next. With listeners (an output tail, or a run that
    /// offers tools, which the runner answers only streamed), the answer is streamed.
    pub(crate) async fn run_once(
        &self,
        segments: &[&str],
        request: &RunRequest,
        listeners: Listeners<'_>,
    ) -> Result<RunResponse, RunnerError> {
        let builder = self.request(Method::POST, segments).json(request);
        if !listeners.stream() {
            let response = builder.send().await.map_err(transport_error)?;
            return read_json(response, StatusCode::OK).await;
        }
        let response = accept_stream(builder)
            .send()
            .await
            .map_err(transport_error)?;
        read_streamed(response, listeners, self).await
    }
}
