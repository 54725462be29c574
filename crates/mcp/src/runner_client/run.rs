//! Running one program on one runner: `POST /run` or a session's run, one ask at a time
//! ([`RunnerClient::run_once`], for the pool, which decides where to ask next) or asking
//! the same runner again while it is busy ([`RunnerClient::run`]). The caller gives the
//! request with its timeout and the deadline of the whole call (the runner's limits make
//! it: [`Limits::answer_within`](sandbox_protocol::api::Limits::answer_within)), and,
//! to see the output while the program runs, an [`OutputTail`]: the answer is then
//! streamed (`streamed.rs`).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use sandbox_protocol::api::{RunRequest, RunResponse};

use super::answer::{read_json, transport_error};
use super::streamed::{accept_stream, read_streamed};
use super::wait::{ask_until_free, bounded};
use super::{RunnerClient, RunnerError};
use crate::output_tail::OutputTail;

impl RunnerClient {
    /// Runs one program on this runner, its answer awaited until `deadline` (from now).
    ///
    /// A call waits for a sandbox as long as its deadline allows, not just the runner's
    /// queue wait: while the runner answers that every sandbox is busy (the program has
    /// not started), it asks again. With `tail`, the output goes there as it comes.
    pub async fn run(
        &self,
        request: &RunRequest,
        deadline: Duration,
        tail: Option<&OutputTail>,
    ) -> Result<RunResponse, RunnerError> {
        self.run_at(&["run"], request, deadline, tail).await
    }

    /// [`run`](Self::run) at `segments`: `POST /run`, or a session's run.
    pub(super) async fn run_at(
        &self,
        segments: &[&str],
        request: &RunRequest,
        deadline: Duration,
        tail: Option<&OutputTail>,
    ) -> Result<RunResponse, RunnerError> {
        ask_until_free(deadline, || {
            bounded(deadline, self.run_once(segments, request, tail))
        })
        .await
    }

    /// One ask of a run at `segments`, without asking again when the runner is busy:
    /// the pool decides where to ask next. With `tail`, the answer is streamed and the
    /// output goes there as it comes.
    pub(crate) async fn run_once(
        &self,
        segments: &[&str],
        request: &RunRequest,
        tail: Option<&OutputTail>,
    ) -> Result<RunResponse, RunnerError> {
        let builder = self.request(Method::POST, segments).json(request);
        let builder = match tail {
            Some(_) => accept_stream(builder),
            None => builder,
        };
        let response = builder.send().await.map_err(transport_error)?;
        match tail {
            Some(tail) => read_streamed(response, tail).await,
            None => read_json(response, StatusCode::OK).await,
        }
    }
}
