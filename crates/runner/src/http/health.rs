//! Readiness and liveness: `GET /health` (200 only when ready, 503 with the same body
//! while starting, degraded or draining), `GET /health/live` (200 while the process
//! serves HTTP), and the router a runner serves before its pool has made its first
//! sandbox ([`starting`]), which [`switch`] replaces once the pool is ready.

use super::{metrics_answer, ApiError, AppState, Base};
use crate::config::RunnerConfig;
use crate::lifecycle::Lifecycle;
use crate::metrics::{Metrics, Readiness};
use crate::pool::{PoolState, SandboxFactory};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use sandbox_protocol::api::{health as status, Health, Liveness};
use std::sync::{Arc, OnceLock};
use tower::ServiceExt;

/// `/health`'s answer: 200 only when `health.status` is `"ok"`, 503 otherwise.
fn answer(health: Health) -> (StatusCode, Json<Health>) {
    let code = if health.status == status::OK {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(health))
}

/// What `/health` says of a runner whose pool is as `pool` says.
fn describe(config: &RunnerConfig, backend: &str, base: &Base, pool: &PoolState) -> Health {
    Health {
        status: status::OK.to_owned(),
        instance_id: Some(base.lifecycle.instance_id().to_owned()),
        pool_size: pool.size,
        available: pool.available,
        backend: backend.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        limits: Some(config.limits.clone()),
        sessions: Some(0),
        max_sessions: Some(config.sessions.max_sessions),
        packages: Some(base.deps.describe(&config.sandbox.packages)),
        languages: Some(config.sandbox.languages.infos()),
    }
}

/// Whether to send this runner traffic, and what it offers.
///
/// 200 only when `status` is `ok`; 503 with the same body while it is `starting` (its
/// pool has no sandbox yet), `degraded` (making sandboxes fails and none is warm) or
/// `draining` (after SIGTERM or SIGINT): what a readiness probe needs. `limits` are what
/// every sandbox runs under and the allowances a caller adds to a run's timeout;
/// `languages` the languages offered, `packages` what programs can import.
#[utoipa::path(
    get,
    path = "/health",
    operation_id = "health",
    tag = "service",
    responses(
        (status = 200, description = "Ready: `status` is `ok`", body = Health),
        (
            status = 503,
            description = "Not ready: `status` is `starting`, `degraded` or `draining`",
            body = Health
        ),
    )
)]
pub(super) async fn health<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
) -> (StatusCode, Json<Health>) {
    let pool = state.pool.state();
    let mut health = describe(&state.config, state.backend, &state.base, &pool);
    health.status = started_status(&pool, &state.base.lifecycle).to_owned();
    health.sessions = Some(state.sessions.count());
    answer(health)
}

/// The status of a started runner: draining once SIGTERM came, degraded when making
/// sandboxes fails and none is warm, else ok.
fn started_status(pool: &PoolState, lifecycle: &Lifecycle) -> &'static str {
    if lifecycle.is_draining() {
        status::DRAINING
    } else if pool.failing.is_some() && pool.available == 0 {
        status::DEGRADED
    } else {
        status::OK
    }
}

/// A started runner's life, for `/metrics`.
pub(super) fn readiness(pool: &PoolState, lifecycle: &Lifecycle) -> Readiness {
    Readiness {
        ready: started_status(pool, lifecycle) == status::OK,
        draining: lifecycle.is_draining(),
        in_flight: lifecycle.in_flight(),
    }
}

/// Whether the process serves HTTP: 200 whether it is starting, degraded or draining
/// (a liveness probe).
#[utoipa::path(
    get,
    path = "/health/live",
    operation_id = "liveness",
    tag = "service",
    responses((status = 200, description = "The process serves HTTP", body = Liveness))
)]
pub(super) async fn live(State(lifecycle): State<Arc<Lifecycle>>) -> Json<Liveness> {
    Json(Liveness {
        status: status::ALIVE.to_owned(),
        instance_id: lifecycle.instance_id().to_owned(),
    })
}

/// The liveness route, for both routers.
pub(super) fn live_route(lifecycle: Arc<Lifecycle>) -> Router {
    Router::new()
        .route("/health/live", get(live))
        .with_state(lifecycle)
}

/// What a starting runner answers from.
struct Starting {
    /// `/health`'s body, but for its status.
    health: Health,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    pool: PoolState,
}

/// The router of a runner whose pool has no sandbox yet: `/health` says `"starting"`
/// (or `"draining"` once SIGTERM came) with 503, `/health/live`, `/metrics` and
/// `/openapi.json` answer, and every other request gets 503 `starting` (nothing is
/// started).
pub fn starting(config: &RunnerConfig, backend: &str, base: &Base) -> Router {
    let pool = PoolState {
        size: config.pool.size,
        available: 0,
        waiting: 0,
        failing: None,
    };
    let state = Arc::new(Starting {
        health: describe(config, backend, base, &pool),
        lifecycle: base.lifecycle.clone(),
        metrics: base.metrics.clone(),
        pool,
    });
    Router::new()
        .route("/health", get(starting_health))
        .route("/metrics", get(starting_metrics))
        .route("/openapi.json", get(super::openapi::openapi_json))
        .fallback(|| async { ApiError::Starting })
        .with_state(state)
        .merge(live_route(base.lifecycle.clone()))
}

async fn starting_health(State(state): State<Arc<Starting>>) -> (StatusCode, Json<Health>) {
    let mut health = state.health.clone();
    health.status = if state.lifecycle.is_draining() {
        status::DRAINING
    } else {
        status::STARTING
    }
    .to_owned();
    answer(health)
}

async fn starting_metrics(State(state): State<Arc<Starting>>) -> impl IntoResponse {
    let readiness = Readiness {
        ready: false,
        draining: state.lifecycle.is_draining(),
        in_flight: state.lifecycle.in_flight(),
    };
    metrics_answer(state.metrics.render(&state.pool, &readiness))
}

/// A router that serves `starting` until `ready` is set, then `ready`'s router.
pub fn switch(starting: Router, ready: Arc<OnceLock<Router>>) -> Router {
    let service = tower::service_fn(move |request: Request| {
        let router = ready.get().unwrap_or(&starting).clone();
        router.oneshot(request)
    });
    Router::new().fallback_service(service)
}
