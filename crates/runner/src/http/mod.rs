//! The HTTP API: `POST /run`, the sessions (`sessions.rs`), `GET /health` and
//! `GET /health/live` (see [`health`]), `GET /metrics`, `GET /openapi.json` (see
//! [`openapi`]: the API described from this code), and JSON errors ([`codes`]).
//!
//! Handlers are thin: decode, make the job ([`crate::job`]), hand it to the pool or the
//! session, map the outcome.

use crate::auth::{require_bearer, Token};
use crate::backend::{Backend, RunOutcome};
use crate::config::RunnerConfig;
use crate::deps::InlineDeps;
use crate::job::{self, Jobs, Place};
use crate::lifecycle::Lifecycle;
use crate::metrics::{Metrics, Outcome};
use crate::pool::{Pool, SandboxFactory};
use crate::session::Sessions;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use sandbox_protocol::agent::Job;
use sandbox_protocol::api::{RunRequest, RunResponse};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;
use tracing::Instrument;

pub mod codes;
mod error;
pub mod health;
pub mod openapi;
mod sessions;
pub use error::ApiError;

/// JSON escaping can make a program's text up to six times longer on the wire.
const JSON_OVERHEAD: usize = 6;

/// What a runner has before its pool has made a sandbox: shared by the router it
/// serves while starting ([`health::starting`]) and the one it serves after.
pub struct Base {
    /// How programs' inline dependencies are resolved, or why they are refused.
    pub deps: InlineDeps,
    /// Its instance id, its drain and the requests in flight.
    pub lifecycle: Arc<Lifecycle>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
}

impl Base {
    /// What a runner with `config` and `lifecycle` starts from.
    pub fn new(config: &RunnerConfig, lifecycle: Arc<Lifecycle>) -> Self {
        let packages = &config.sandbox.packages;
        match &packages.set {
            Some(set) => tracing::info!(
                set = %set.dir.display(),
                python = set.manifest.python.len(),
                node = set.manifest.node.len(),
                "package set"
            ),
            None => tracing::warn!(
                store = %packages.store.display(),
                "no package set: programs have the standard libraries only; \
                 `sandbox-runner packages build` builds one (numpy, pandas, matplotlib, ...)"
            ),
        }
        Base {
            deps: InlineDeps::new(&config.sandbox),
            lifecycle,
            metrics: Arc::new(Metrics::new()),
        }
    }
}

/// What the handlers share; `B` makes the sandboxes (the real [`Backend`], or a fake in
/// the router's unit tests).
pub struct AppState<B: SandboxFactory = Backend> {
    /// Validated settings.
    pub config: RunnerConfig,
    /// The warm pool.
    pub pool: Pool<B>,
    /// What the runner had before its pool: inline dependencies, lifecycle, metrics.
    pub base: Base,
    /// The backend's name, for /health.
    pub backend: &'static str,
    /// The sessions.
    pub sessions: Arc<Sessions<B::Sandbox>>,
    next_request: AtomicU64,
}

impl<B: SandboxFactory> AppState<B> {
    /// The state of a runner.
    pub fn new(config: RunnerConfig, pool: Pool<B>, backend: &'static str, base: Base) -> Self {
        AppState {
            sessions: Arc::new(Sessions::new(config.sessions)),
            config,
            pool,
            base,
            backend,
            next_request: AtomicU64::new(1),
        }
    }
}

/// The runner's routes, with auth on `/run` and the sessions when a token is configured;
/// their requests count as in flight (a drain waits for them).
pub fn router<B: SandboxFactory>(state: Arc<AppState<B>>) -> Router {
    let body_limit = state.config.code_cap_bytes.saturating_mul(JSON_OVERHEAD) + 64 * 1024;
    let mut protected = Router::new()
        .route("/run", post(run::<B>))
        .merge(sessions::routes::<B>(state.config.sessions.file_cap_bytes));
    if let Some(token) = &state.config.token {
        let token = Token(Arc::from(token.as_str()));
        protected = protected.route_layer(middleware::from_fn_with_state(token, require_bearer));
    }
    // Outermost, so that a request counts from its headers on, its auth check included.
    protected = protected.route_layer(middleware::from_fn_with_state(
        state.base.lifecycle.clone(),
        count_in_flight,
    ));
    Router::new()
        .merge(protected)
        .route("/health", get(health::health::<B>))
        .route("/metrics", get(metrics::<B>))
        .route("/openapi.json", get(openapi::openapi_json))
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state.clone())
        .merge(health::live_route(state.base.lifecycle.clone()))
}

/// Counts the request as in flight until its answer is made.
async fn count_in_flight(
    State(lifecycle): State<Arc<Lifecycle>>,
    request: Request,
    next: Next,
) -> Response {
    let _in_flight = lifecycle.enter();
    next.run(request).await
}

/// Refuses a new run or session once the runner drains: nothing has been started.
pub fn refuse_when_draining(lifecycle: &Lifecycle) -> Result<(), ApiError> {
    if lifecycle.is_draining() {
        Err(ApiError::Draining)
    } else {
        Ok(())
    }
}

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
        openapi::RunErrors,
    ),
    security(("bearer" = []))
)]
async fn run<B: SandboxFactory>(
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
    let id = state.next_request.fetch_add(1, Ordering::Relaxed);
    execute(&state, job)
        .instrument(tracing::info_span!("run", id, %lang))
        .await
        .map(Json)
}

/// The body of a request, or why it is refused: over the limit, 413 saying what
/// `limit` says.
pub fn body_bytes(
    body: Result<Bytes, BytesRejection>,
    limit: impl FnOnce() -> String,
) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge(limit())
        } else {
            ApiError::BadRequest(rejection.body_text())
        }
    })
}

/// What a body over the limit of `/run` (and a session's run) is told.
pub fn code_limit(config: &RunnerConfig) -> impl FnOnce() -> String + '_ {
    move || {
        format!(
            "the request body is over the limit (code may be at most {} bytes)",
            config.code_cap_bytes
        )
    }
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
            tracing::info!(error = %e, "rejected");
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
            tracing::error!(error = %e, "run failed");
            return Err(ApiError::Sandbox(Box::new(e)));
        }
        Err(e) => {
            state.base.metrics.record(&lang, Outcome::Error, seconds);
            return Err(e.into());
        }
    };
    let counted = classify(&outcome);
    state.base.metrics.record(&lang, counted, seconds);
    tracing::info!(outcome = ?counted, exit_code = outcome.job.exit_code, ms = outcome.job.duration_ms, "done");
    Ok(job::answer(outcome, Place::OneShot))
}

/// Decodes a run's body (`POST /run`, a session's run) and makes it the job for the
/// agent ([`Jobs`]), to run at `place`.
pub fn parse_run(body: &[u8], config: &RunnerConfig, place: Place) -> Result<Job, ApiError> {
    Ok(Jobs::api(config).job(decode(body)?, place)?)
}

fn decode(body: &[u8]) -> Result<RunRequest, ApiError> {
    decode_object(
        body,
        r#"{"lang": string, "code": string, "timeoutMs"?: integer}"#,
    )
}

/// Decodes a JSON object body into `T`; `shape` tells a client what was expected.
pub fn decode_object<T: serde::de::DeserializeOwned>(
    body: &[u8],
    shape: &str,
) -> Result<T, ApiError> {
    let refuse = |e: &dyn std::fmt::Display| {
        ApiError::BadRequest(format!("the body must be a JSON object {shape}: {e}"))
    };
    // Decoding through Value first refuses the array form serde would accept for a struct.
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| refuse(&e))?;
    if !value.is_object() {
        return Err(refuse(&"got something other than an object"));
    }
    serde_json::from_value(value).map_err(|e| refuse(&e))
}

/// How a run counts in the metrics.
pub fn classify(outcome: &RunOutcome) -> Outcome {
    if outcome.oom_killed {
        Outcome::Oom
    } else if outcome.job.timed_out {
        Outcome::Timeout
    } else if outcome.job.compile_error {
        Outcome::CompileError
    } else if outcome.job.exit_code == 0 {
        Outcome::Ok
    } else {
        Outcome::Failed
    }
}

/// The runner's metrics, in Prometheus' text format (docs/operations.md lists the series).
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "service",
    responses((
        status = 200,
        description = "Prometheus' text exposition",
        body = String,
        content_type = "text/plain"
    ))
)]
async fn metrics<B: SandboxFactory>(State(state): State<Arc<AppState<B>>>) -> impl IntoResponse {
    let pool = state.pool.state();
    let readiness = health::readiness(&pool, &state.base.lifecycle);
    metrics_answer(state.base.metrics.render(&pool, &readiness))
}

/// The text exposition as `/metrics` answers it.
fn metrics_answer(body: String) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}

#[cfg(test)]
mod tests;
