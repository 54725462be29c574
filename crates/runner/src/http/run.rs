//! `POST /run`: a program in a fresh sandbox, taken from the pool and destroyed after;
//! its answer plain, or streamed as it runs (`ndjson.rs`).

use super::answers;
use super::body::{body_bytes, code_limit, parse_run};
use super::error::ApiError;
use super::ndjson;
use super::state::{refuse_when_draining, AppState};
use super::tool_results::ToolRun;
use crate::backend::{DepsMount, RunOutcome};
use crate::job::{self, Place};
use crate::live::LiveOutput;
use crate::metrics::Outcome;
use crate::pool::{Lease, SandboxFactory};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandbox_protocol::agent::Job;
use sandbox_protocol::api::{RunRequest, RunResponse};
use sandbox_protocol::process::StreamLine;
use sandbox_protocol::Lang;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// The target of a run's log lines: the HTTP API's, as operators (and tests) filter on.
const LOG: &str = "sandbox_runner::http";

/// Runs a program in a fresh sandbox.
///
/// The sandbox has no network but the hosts the operator opened and the request is
/// granted (`egress`), through the runner's proxy, and the limits `GET /health` lists; it
/// is destroyed after the run. The answer's `egress` says what the run did through the
/// proxy, when it did anything there. A compiled language's program is compiled first, in the same sandbox, within
/// the language's compile timeout (on top of `timeoutMs`, which counts from the program's
/// start). A Python program's PEP 723 block is resolved before the run; a refusal runs
/// nothing.
///
/// With `Accept: application/x-ndjson` the answer is streamed as the program runs: 200
/// once the program is on its way (every refusal before keeps its status and error
/// body), then `{"stream": "stdout"|"stderr", "data": "..."}` lines as it writes (UTF-8,
/// a character never split between lines, at most 64 KiB of text a line), then one last
/// line: `{"result": {...}}`, exactly the plain answer's body, or `{"error": {"code",
/// "message"}}` if the sandbox failed after the answer began. A VM sandbox sends no
/// output lines, only the last. A client that goes away stops the run, as for a plain
/// answer.
#[utoipa::path(
    post,
    path = "/run",
    operation_id = "runProgram",
    tag = "runs",
    request_body = RunRequest,
    params(
        (
            "Accept" = Option<String>,
            Header,
            description = "`application/x-ndjson` for the answer streamed as the program runs"
        )
    ),
    responses(
        (
            status = 200,
            description = "The program ran (whatever its exit code), timed out, was killed \
                           out of memory, or did not compile: the fields say which. Streamed \
                           (`application/x-ndjson`): output lines, then the result line",
            content(
                (RunResponse = "application/json"),
                (StreamLine<RunResponse> = "application/x-ndjson")
            )
        ),
        answers::RunErrors,
    ),
    security(("bearer" = []))
)]
pub(super) async fn run<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(body, code_limit(&state.config))?;
    let (job, grant) = parse_run(&body, &state.config, Place::OneShot)?;
    let lang = job.lang.clone();
    if let Err(e) = refuse_when_draining(&state.base.lifecycle) {
        state.base.metrics.record(&lang, Outcome::Draining, None);
        return Err(e);
    }
    let tools = ToolRun::of(&state, &job, &headers)?;
    let id = state.next_request();
    let span = tracing::info_span!(target: LOG, "run", id, %lang);
    async move {
        let admitted = admit(&state, &job).await?;
        admitted.lease.grant_egress(grant);
        if ndjson::wanted(&headers) {
            return Ok(stream(state, admitted, job, tools));
        }
        Ok(execute(&state, admitted, job).await?.into_response())
    }
    .instrument(span)
    .await
}

/// A run let in: its inline dependencies resolved, its sandbox taken from the pool.
struct Admitted<B: SandboxFactory> {
    lease: Lease<B>,
    deps: Option<DepsMount>,
    started: Instant,
}

/// Resolves the job's inline dependencies and takes a sandbox for it (waiting in the
/// pool's queue); a refusal is counted and logged.
async fn admit<B: SandboxFactory>(state: &AppState<B>, job: &Job) -> Result<Admitted<B>, ApiError> {
    let started = Instant::now();
    let lang = &job.lang;
    let deps = state.base.deps.resolve(job).await?;
    let data = state
        .base
        .data_stack
        .as_ref()
        .is_some_and(|s| s.wanted_by(job));
    // A request still waiting for a sandbox when the drain begins leaves the queue with
    // 503 `draining`: nothing has started, another runner can take it.
    let acquired = tokio::select! {
        biased;
        () = state.base.lifecycle.draining() => Err(ApiError::Draining),
        acquired = state.pool.acquire(lang, data) => acquired.map_err(ApiError::from),
    };
    match acquired {
        Ok(lease) => {
            state.base.metrics.program_started(lang);
            Ok(Admitted {
                lease,
                deps,
                started,
            })
        }
        Err(e) => {
            let counted = if matches!(e, ApiError::Draining) {
                Outcome::Draining
            } else {
                Outcome::Rejected
            };
            state.base.metrics.record(lang, counted, None);
            tracing::info!(target: LOG, error = %e, "rejected");
            Err(e)
        }
    }
}

/// Runs the job in its sandbox and answers once it ends.
async fn execute<B: SandboxFactory>(
    state: &AppState<B>,
    admitted: Admitted<B>,
    job: Job,
) -> Result<Json<RunResponse>, ApiError> {
    // A client that goes away drops this handler, and with it `gone`, which ends the run.
    let (gone, client_gone) = oneshot::channel::<()>();
    let running = admitted.start(job, None, async move {
        let _ = client_gone.await;
    });
    let answer = running.answer(state).await;
    drop(gone);
    answer.map(Json)
}

/// Answers at once with the streamed answer, whose task awaits the job's run; a client
/// that goes away (it drops the answer's body) ends the run. A run with `tools` takes
/// answers to its calls until its last line.
fn stream<B: SandboxFactory>(
    state: Arc<AppState<B>>,
    admitted: Admitted<B>,
    job: Job,
    tools: Option<ToolRun>,
) -> Response {
    let (live, chunks, registered) = ToolRun::live(tools);
    let (writer, response) = ndjson::answer(state.base.lifecycle.enter());
    let running = admitted.start(job, Some(live), writer.gone());
    let ended = async move {
        let answer = running.answer(&state).await;
        drop(registered);
        answer
    };
    tokio::spawn(writer.relay(chunks, ended).in_current_span());
    response
}

impl<B: SandboxFactory> Admitted<B> {
    /// Starts the job in its sandbox (its output to `live`), in a task of its own so that
    /// its sandbox is always destroyed; `cancelled` completing first stops it.
    fn start(
        self,
        job: Job,
        live: Option<LiveOutput>,
        cancelled: impl Future<Output = ()> + Send + 'static,
    ) -> Running<B> {
        let lang = job.lang.clone();
        let run = self.lease.run(job, self.deps, live, cancelled);
        Running {
            task: tokio::spawn(run.in_current_span()),
            lang,
            started: self.started,
        }
    }
}

/// A run under way in its task, and what its answer needs.
struct Running<B: SandboxFactory> {
    task: JoinHandle<Option<Result<RunOutcome, B::Error>>>,
    lang: Lang,
    started: Instant,
}

impl<B: SandboxFactory> Running<B> {
    /// The answer for the run's end: counted and logged.
    async fn answer(self, state: &AppState<B>) -> Result<RunResponse, ApiError> {
        let result = self.task.await;
        let (lang, metrics) = (&self.lang, &state.base.metrics);
        let seconds = Some(self.started.elapsed().as_secs_f64());
        let outcome = match result {
            Ok(Some(Ok(outcome))) => outcome,
            Ok(None) => {
                metrics.record(lang, Outcome::Error, seconds);
                return Err(ApiError::Cancelled);
            }
            Ok(Some(Err(e))) => {
                metrics.record(lang, Outcome::Error, seconds);
                tracing::error!(target: LOG, error = %e, "run failed");
                return Err(ApiError::Sandbox(Box::new(e)));
            }
            Err(e) => {
                metrics.record(lang, Outcome::Error, seconds);
                return Err(e.into());
            }
        };
        let counted = Outcome::of(&outcome);
        metrics.record(lang, counted, seconds);
        tracing::info!(target: LOG, outcome = ?counted, exit_code = outcome.job.exit_code, ms = outcome.job.duration_ms, "done");
        Ok(job::answer(outcome, Place::OneShot))
    }
}
