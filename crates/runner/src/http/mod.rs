//! The HTTP API: `POST /run` (`run.rs`), the sessions (`sessions.rs`), runs' answers
//! streamed as they run (`ndjson.rs`), `GET /health`, `GET /health/live` and
//! `GET /metrics` ([`health`]), `GET /openapi.json` ([`openapi`]: the API described from
//! this code), and JSON errors ([`codes`]). This file puts them
//! together: the runner's router, and the one it serves while starting.
//!
//! Handlers are thin: read the body (`body.rs`), make the job ([`crate::job`]), hand it
//! to the pool or the session, map the outcome. What they share is in `state.rs`.

use crate::config::RunnerConfig;
use crate::lifecycle::Lifecycle;
use crate::pool::SandboxFactory;
use auth::{require_bearer, Token};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{middleware, Router};
use std::sync::{Arc, OnceLock};
use tower::ServiceExt;

mod answers;
mod auth;
mod body;
pub mod codes;
mod error;
pub mod health;
mod ndjson;
pub mod openapi;
mod output;
mod process_call;
mod processes;
mod run;
mod sessions;
mod snapshots;
mod state;
mod tool_results;
pub use body::{body_bytes, code_limit, decode_object, parse_run};
pub use error::ApiError;
pub use state::{refuse_when_draining, AppState, Base};

/// JSON escaping can make a program's text up to six times longer on the wire.
const JSON_OVERHEAD: usize = 6;

/// The runner's routes, with auth on `/run` and the sessions when a token is configured;
/// their requests count as in flight (a drain waits for them).
pub fn router<B: SandboxFactory>(state: Arc<AppState<B>>) -> Router {
    let body_limit = state.config.code_cap_bytes.saturating_mul(JSON_OVERHEAD) + 64 * 1024;
    let mut protected = Router::new()
        .route("/run", post(run::run::<B>))
        .merge(sessions::routes::<B>(state.config.sessions.file_cap_bytes))
        .merge(processes::routes::<B>())
        .merge(snapshots::routes::<B>())
        .merge(tool_results::routes::<B>());
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
        .route("/metrics", get(health::metrics::<B>))
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

/// The router of a runner whose pool has no sandbox yet: `/health` says `"starting"`
/// (or `"draining"` once SIGTERM came) with 503, `/health/live`, `/metrics` and
/// `/openapi.json` answer, and every other request gets 503 `starting` (nothing is
/// started). [`switch`] replaces it once the pool is ready.
pub fn starting(config: &RunnerConfig, backend: &str, base: &Base) -> Router {
    let state = Arc::new(health::Starting::new(config, backend, base));
    Router::new()
        .route("/health", get(health::starting_health))
        .route("/metrics", get(health::starting_metrics))
        .route("/openapi.json", get(openapi::openapi_json))
        .fallback(|| async { ApiError::Starting })
        .with_state(state)
        .merge(health::live_route(base.lifecycle.clone()))
}

/// A router that serves `starting` until `ready` is set, then `ready`'s router.
pub fn switch(starting: Router, ready: Arc<OnceLock<Router>>) -> Router {
    let service = tower::service_fn(move |request: Request| {
        let router = ready.get().unwrap_or(&starting).clone();
        router.oneshot(request)
    });
    Router::new().fallback_service(service)
}

#[cfg(test)]
mod tests;
