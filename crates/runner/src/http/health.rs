//! Readiness, liveness and metrics: `GET /health` (200 only when ready, 503 with the same
//! body while starting, degraded or draining), `GET /health/live` (200 while the process
//! serves HTTP) and `GET /metrics`, of a started runner and of one whose pool has made no
//! sandbox yet ([`super::starting`]).

use super::state::{AppState, Base};
use crate::config::RunnerConfig;
use crate::lifecycle::Lifecycle;
use crate::metrics::{Metrics, Readiness};
use crate::pool::{PoolState, SandboxFactory};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use sandbox_protocol::api::{health as status, Health, Liveness};
use std::sync::Arc;

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
pub(super) struct Starting {
    /// `/health`'s body, but for its status.
    health: Health,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    pool: PoolState,
}

impl Starting {
    /// A runner with `config` and `backend`, starting from `base`.
    pub(super) fn new(config: &RunnerConfig, backend: &str, base: &Base) -> Self {
        let pool = PoolState {
            size: config.pool.size,
            available: 0,
            waiting: 0,
            failing: None,
        };
        Starting {
            health: describe(config, backend, base, &pool),
            lifecycle: base.lifecycle.clone(),
            metrics: base.metrics.clone(),
            pool,
        }
    }
}

/// `GET /health` of a starting runner: 503 `starting` (or `draining`).
pub(super) async fn starting_health(
    State(state): State<Arc<Starting>>,
) -> (StatusCode, Json<Health>) {
    let mut health = state.health.clone();
    health.status = if state.lifecycle.is_draining() {
        status::DRAINING
    } else {
        status::STARTING
    }
    .to_owned();
    answer(health)
}

/// `GET /metrics` of a starting runner.
pub(super) async fn starting_metrics(State(state): State<Arc<Starting>>) -> impl IntoResponse {
    let readiness = Readiness {
        ready: false,
        draining: state.lifecycle.is_draining(),
        in_flight: state.lifecycle.in_flight(),
    };
    metrics_answer(state.metrics.render(&state.pool, &readiness))
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
pub(super) async fn metrics<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
) -> impl IntoResponse {
    let pool = state.pool.state();
    let readiness = readiness(&pool, &state.base.lifecycle);
    let body = state.base.metrics.render(&pool, &readiness);
    let egress = state.base.egress.as_ref().map(|e| e.metrics());
    metrics_answer(with_lines(body, egress.as_deref().unwrap_or_default()))
}

/// The runner's series and `lines` (the proxy's, where the operator opened hosts:
/// connections, bytes and refusals by host), before the exposition's `# EOF`.
fn with_lines(mut body: String, lines: &str) -> String {
    if lines.is_empty() {
        return body;
    }
    let eof = body.strip_suffix("# EOF\n").map(str::len);
    let tail = eof.map(|at| body.split_off(at)).unwrap_or_default();
    body.push_str(lines);
    if !lines.ends_with('\n') {
        body.push('\n');
    }
    body.push_str(&tail);
    body
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
    use super::with_lines;

    #[test]
    fn the_proxys_series_go_before_the_end_of_the_exposition() {
        let runner = "runs_total 1\n# EOF\n".to_owned();
        assert_eq!(with_lines(runner.clone(), ""), runner);
        assert_eq!(
            with_lines(runner, "egress_connections_total{host=\"a.test\"} 2"),
            "runs_total 1\negress_connections_total{host=\"a.test\"} 2\n# EOF\n"
        );
        assert_eq!(with_lines("x 1\n".into(), "y 2\n"), "x 1\ny 2\n");
    }
}
