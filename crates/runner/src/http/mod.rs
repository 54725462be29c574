//! The HTTP API: `POST /run`, the sessions (see [`crate::session::routes`]),
//! `GET /health` and `GET /health/live` (see [`health`]), `GET /metrics`, and JSON errors.
//!
//! Handlers are thin: decode and validate, hand the job to the pool, map the outcome.

use crate::auth::{require_bearer, Token};
use crate::backend::{Backend, RunOutcome};
use crate::config::RunnerConfig;
use crate::deps::InlineDeps;
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
use sandbox_protocol::agent::{Job, OutputCaps};
use sandbox_protocol::api::{defaults, RunRequest, RunResponse};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;
use tracing::Instrument;

mod error;
pub mod health;
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
    let mut protected =
        Router::new()
            .route("/run", post(run::<B>))
            .merge(crate::session::routes::routes::<B>(
                state.config.sessions.file_cap_bytes,
            ));
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

async fn run<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RunResponse>, ApiError> {
    let body = body_bytes(body, code_limit(&state.config))?;
    let job = parse_run(&body, &state.config)?;
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
    Ok(to_response(outcome, false))
}

/// Decodes and validates a `POST /run` body into the job for the agent.
pub fn parse_run(body: &[u8], config: &RunnerConfig) -> Result<Job, ApiError> {
    to_job(config, decode(body)?)
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

/// Validates a request against the limits and makes the job for the agent.
fn to_job(config: &RunnerConfig, request: RunRequest) -> Result<Job, ApiError> {
    if request.code.len() > config.code_cap_bytes {
        return Err(ApiError::TooLarge(format!(
            "code is {} bytes; at most {} are accepted",
            request.code.len(),
            config.code_cap_bytes
        )));
    }
    let sandbox = &config.sandbox;
    let language = sandbox
        .languages
        .get(&request.lang)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let max = sandbox.max_timeout.as_millis() as u64;
    let timeout_ms = match request.timeout_ms {
        None => sandbox.default_timeout.as_millis() as u64,
        Some(t) if (1..=max).contains(&t) => t,
        Some(t) => {
            return Err(ApiError::BadRequest(format!(
                "timeoutMs must be between 1 and {max}, not {t}"
            )))
        }
    };
    Ok(Job {
        lang: language.name().clone(),
        recipe: language.recipe.clone(),
        code: request.code,
        timeout_ms,
        stdout_cap: sandbox.output_cap_bytes,
        stderr_cap: sandbox.output_cap_bytes,
        session: false,
        outputs: Some(OutputCaps {
            file_cap: defaults::OUTPUT_FILE_CAP_BYTES,
            total_cap: defaults::OUTPUTS_CAP_BYTES,
            max_files: defaults::OUTPUT_FILES_MAX,
        }),
        python_paths: Vec::new(),
    })
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

/// The API's answer for an outcome; a session's (`session`) says whether the
/// interpreter's state was lost.
pub fn to_response(outcome: RunOutcome, session: bool) -> RunResponse {
    let job = outcome.job;
    RunResponse {
        outputs: job.outputs,
        outputs_truncated: job.outputs_truncated,
        state_lost: session.then_some(job.state_lost),
        stdout: job.stdout,
        stderr: job.stderr,
        exit_code: job.exit_code,
        duration_ms: job.duration_ms,
        timed_out: job.timed_out,
        compile_error: job.compile_error,
        oom_killed: outcome.oom_killed,
        stdout_truncated: job.stdout_truncated,
        stderr_truncated: job.stderr_truncated,
    }
}

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
mod tests {
    //! The router driven in-process, over a pool of the fake backend: every answer of
    //! the API contract, without root or a real sandbox.

    use super::*;
    use crate::config::ServeArgs;
    use crate::pool::tests::fake::Fake;
    use crate::pool::PoolConfig;
    use axum::body::Body;
    use axum::http::{HeaderMap, Request};
    use clap::Parser;
    use http_body_util::BodyExt;
    use serde_json::{json, Value};
    use std::time::Duration;
    use tower::ServiceExt;

    const TOKEN: &str = "router-test-token";

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// A router over a pool of `size` fake sandboxes whose runs take `run_time`.
    async fn router_with(fake: &Fake, size: usize, queue_size: usize) -> Router {
        let life = Arc::new(Lifecycle::with_id("test".into()));
        router_living(fake, size, queue_size, life).await
    }

    /// The same, living `life`.
    async fn router_living(
        fake: &Fake,
        size: usize,
        queue_size: usize,
        life: Arc<Lifecycle>,
    ) -> Router {
        let argv = [
            "sandbox-runner",
            "--token",
            TOKEN,
            "--code-cap-bytes",
            "1000",
        ];
        let config = Cli::parse_from(argv).serve.validate().expect("config");
        let pool_config = PoolConfig {
            size,
            queue_size,
            queue_timeout: Duration::from_millis(200),
        };
        let warm = config.sandbox.languages.warm();
        let pool = Pool::start(Arc::new(fake.clone()), pool_config, warm)
            .await
            .expect("pool");
        let base = Base::new(&config, life);
        router(Arc::new(AppState::new(config, pool, "fake", base)))
    }

    async fn send(router: &Router, request: Request<Body>) -> (StatusCode, HeaderMap, Value) {
        let response = router.clone().oneshot(request).await.expect("an answer");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, headers, body)
    }

    fn post_run(body: &str, token: Option<&str>) -> Request<Body> {
        let mut request = Request::post("/run").header("content-type", "application/json");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.body(Body::from(body.to_owned())).expect("request")
    }

    fn run_body(code: &str) -> String {
        json!({"lang": "python", "code": code, "timeoutMs": 1000}).to_string()
    }

    #[tokio::test]
    async fn a_run_answers_200_with_every_field() {
        let fake = Fake::new();
        let router = router_with(&fake, 1, 4).await;
        let (status, _, body) = send(&router, post_run(&run_body("print(1)"), Some(TOKEN))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        for field in [
            "stdout",
            "stderr",
            "exitCode",
            "durationMs",
            "timedOut",
            "oomKilled",
            "stdoutTruncated",
            "stderrTruncated",
        ] {
            assert!(body.get(field).is_some(), "{field} missing: {body}");
        }
        assert_eq!(body["stdout"], "sandbox 0");
    }

    #[tokio::test]
    async fn without_the_token_401_with_a_bearer_challenge() {
        let router = router_with(&Fake::new(), 1, 4).await;
        for token in [None, Some("wrong")] {
            let (status, headers, body) = send(&router, post_run(&run_body("1"), token)).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
            assert_eq!(body["error"]["code"], "unauthorized");
        }
    }

    #[tokio::test]
    async fn bad_input_400_and_code_over_the_cap_413() {
        let router = router_with(&Fake::new(), 1, 4).await;
        let bad_lang = json!({"lang": "cobol", "code": "x"}).to_string();
        for body in [
            "not json",
            "[]",
            bad_lang.as_str(),
            r#"{"lang":"bash","code":"x","timeoutMs":0}"#,
        ] {
            let (status, _, answer) = send(&router, post_run(body, Some(TOKEN))).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
            assert_eq!(answer["error"]["code"], "bad_request");
        }
        let big = run_body(&"x".repeat(2000));
        let (status, _, answer) = send(&router, post_run(&big, Some(TOKEN))).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    }

    #[tokio::test]
    async fn a_full_pool_gives_503_then_429_with_retry_after() {
        let fake = Fake::new();
        fake.log().run_time = Duration::from_secs(2);
        let router = router_with(&fake, 1, 1).await;
        let busy = tokio::spawn({
            let router = router.clone();
            async move { send(&router, post_run(&run_body("1"), Some(TOKEN))).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let waiting = tokio::spawn({
            let router = router.clone();
            async move { send(&router, post_run(&run_body("2"), Some(TOKEN))).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (status, headers, body) = send(&router, post_run(&run_body("3"), Some(TOKEN))).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert!(headers.contains_key(header::RETRY_AFTER));
        let (status, headers, body) = waiting.await.expect("task");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"]["code"], "queue_timeout");
        assert!(headers.contains_key(header::RETRY_AFTER));
        assert_eq!(busy.await.expect("task").0, StatusCode::OK);
    }

    #[tokio::test]
    async fn a_failed_sandbox_is_a_500_that_says_so() {
        let fake = Fake::new();
        fake.log().fail_runs = true;
        let router = router_with(&fake, 1, 4).await;
        let (status, _, body) = send(&router, post_run(&run_body("1"), Some(TOKEN))).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"]["code"], "sandbox_failed");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("fake"));
    }

    #[tokio::test]
    async fn unknown_paths_404_wrong_methods_405_health_and_metrics_200() {
        let router = router_with(&Fake::new(), 1, 4).await;
        let get = |path: &str| Request::get(path).body(Body::empty()).expect("request");
        let (status, _, body) = send(&router, get("/nope")).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (StatusCode::NOT_FOUND, &json!("not_found"))
        );
        let (status, _, _) = send(&router, get("/run")).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        let (status, _, health) = send(&router, get("/health")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(health["backend"], "fake");
        assert_eq!(health["poolSize"], 1);
        assert_eq!(health["limits"]["codeCapBytes"], 1000);
        let response = router
            .clone()
            .oneshot(get("/metrics"))
            .await
            .expect("answer");
        assert_eq!(response.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn a_draining_runner_refuses_new_runs_and_sessions_with_503_draining() {
        let life = Arc::new(Lifecycle::with_id("0123".into()));
        let router = router_living(&Fake::new(), 1, 4, life.clone()).await;
        let get = |path: &str| Request::get(path).body(Body::empty()).expect("request");
        let (status, _, health) = send(&router, get("/health")).await;
        assert_eq!((status, &health["status"]), (StatusCode::OK, &json!("ok")));
        assert_eq!(health["instanceId"], "0123");
        life.begin_drain();
        let (status, _, health) = send(&router, get("/health")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(health["status"], "draining");
        assert_eq!(health["poolSize"], 1, "every field stays: {health}");
        let (status, _, live) = send(&router, get("/health/live")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(live, json!({"status": "alive", "instanceId": "0123"}));
        let (status, headers, body) = send(&router, post_run(&run_body("1"), Some(TOKEN))).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], "draining");
        assert!(headers.contains_key(header::RETRY_AFTER));
        let session = Request::post("/sessions")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .expect("request");
        let (status, _, body) = send(&router, session).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], "draining");
        assert_eq!(life.in_flight(), 0, "the refused requests left the count");
    }

    #[tokio::test]
    async fn a_request_waiting_for_a_sandbox_when_the_drain_begins_gets_503_draining() {
        let fake = Fake::new();
        fake.log().run_time = Duration::from_secs(1);
        let life = Arc::new(Lifecycle::with_id("x".into()));
        let router = router_living(&fake, 1, 4, life.clone()).await;
        let busy = tokio::spawn({
            let router = router.clone();
            async move { send(&router, post_run(&run_body("1"), Some(TOKEN))).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let waiting = tokio::spawn({
            let router = router.clone();
            async move { send(&router, post_run(&run_body("2"), Some(TOKEN))).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(life.in_flight(), 2);
        life.begin_drain();
        let (status, _, body) = waiting.await.expect("task");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"]["code"], "draining");
        let (status, _, body) = busy.await.expect("task");
        assert_eq!(status, StatusCode::OK, "the run in flight finishes: {body}");
        assert_eq!(fake.log().runs.len(), 1, "the waiting one never ran");
        life.idle().await;
    }
}
