//! `POST /run`: a program in a fresh sandbox, taken from the pool and destroyed after.

use super::answers;
use super::body::{body_bytes, code_limit, parse_run};
use super::error::ApiError;
use super::state::{refuse_when_draining, AppState};
use crate::job::{self, Place};
use crate::metrics::Outcome;
use crate::pool::SandboxFactory;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use sandbox_protocol::agent::Job;
use sandbox_protocol::api::{RunRequest, RunResponse};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;
use tracing::Instrument;

/// The target of a run's log lines: the HTTP API's, as operators (and tests) filter on.
const LOG: &str = "sandbox_runner::http";

/// Runs a program in a fresh sandbox.
///
/// The sandbox has no network and the limits `GET /health` lists; it is destroyed after
/// the run. A compiled language's program is compiled first, in the same sandbox, within
/// the language's compile timeout (on top of `timeoutMs`, which counts from the program's
/// start). A Python program's PEP 723 block is resolved before the run; a refusal runs
/// nothing.
#[utoipa::path(
    post,
    path = "/run",
    operation_id = "runProgram",
    tag = "runs",
    request_body = RunRequest,
    responses(
        (
            status = 200,
            description = "The program ran (whatever its exit code), timed out, was killed \
                           out of memory, or did not compile: the fields say which",
            body = RunResponse
        ),
        answers::RunErrors,
    ),
    security(("bearer" = []))
)]
pub(super) async fn run<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RunResponse>, ApiError> {
    let body = body_bytes(body, code_limit(&state.config))?;
    let job = parse_run(&body, &state.config, Place::OneShot)?;
    let lang = job.lang.clone();
    if let Err(e) = refuse_when_draining(&state.base.lifecycle) {
        state.base.metrics.record(&lang, Outcome::Draining, None);
        return Err(e);
    }
    let id = state.next_request();
    execute(&state, job)
        .instrument(tracing::info_span!(target: LOG, "run", id, %lang))
        .await
        .map(Json)
}

/// Takes a sandbox, runs the job in it, counts and logs the outcome.
async fn execute<B: SandboxFactory>(
    state: &AppState<B>,
    job: Job,
) -> Result<RunResponse, ApiError> {
    let started = Instant::now();
    let lang = job.lang.clone();
    let deps = state.base.deps.resolve(&job).await?;
    // A request still waiting for a sandbox when the drain begins leaves the queue with
    // 503 `draining`: nothing has started, another runner can take it.
    let acquired = tokio::select! {
        biased;
        () = state.base.lifecycle.draining() => Err(ApiError::Draining),
        acquired = state.pool.acquire(&lang) => acquired.map_err(ApiError::from),
    };
    let lease = match acquired {
        Ok(lease) => lease,
        Err(e) => {
            let counted = if matches!(e, ApiError::Draining) {
                Outcome::Draining
            } else {
                Outcome::Rejected
            };
            state.base.metrics.record(&lang, counted, None);
            tracing::info!(target: LOG, error = %e, "rejected");
            return Err(e);
        }
    };
    state.base.metrics.program_started(&lang);
    // The run goes on in its own task, so that its sandbox is always destroyed; a client
    // that goes away drops this handler, and with it `gone`, which ends the run.
    let (gone, client_gone) = oneshot::channel::<()>();
    let task = tokio::spawn(
        lease
            .run(job, deps, async move {
                let _ = client_gone.await;
            })
            .in_current_span(),
    );
    let result = task.await;
    drop(gone);
    let seconds = Some(started.elapsed().as_secs_f64());
    let outcome = match result {
        Ok(Some(Ok(outcome))) => outcome,
        Ok(None) => {
            state.base.metrics.record(&lang, Outcome::Error, seconds);
            return Err(ApiError::Cancelled);
        }
        Ok(Some(Err(e))) => {
            state.base.metrics.record(&lang, Outcome::Error, seconds);
            tracing::error!(target: LOG, error = %e, "run failed");
            return Err(ApiError::Sandbox(Box::new(e)));
        }
        Err(e) => {
            state.base.metrics.record(&lang, Outcome::Error, seconds);
            return Err(e.into());
        }
    };
    let counted = Outcome::of(&outcome);
    state.base.metrics.record(&lang, counted, seconds);
    tracing::info!(target: LOG, outcome = ?counted, exit_code = outcome.job.exit_code, ms = outcome.job.duration_ms, "done");
    Ok(job::answer(outcome, Place::OneShot))
}
