//! `GET /health`: whether this server is up and whether its runner answers; no auth.

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use crate::server::SandboxServer;

/// The answer of `GET /health`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthReport {
    /// `"ok"`, or `"degraded"` when a configured runner does not answer.
    pub status: &'static str,
    /// Whether `SANDBOX_RUNNER_URL` is set.
    pub runner_configured: bool,
    /// Whether the runner answered its `/health` just now.
    pub runner_reachable: bool,
    /// This server's version.
    pub version: &'static str,
}

/// Asks the runner (if any) and reports.
pub(crate) async fn health(State(server): State<SandboxServer>) -> Json<HealthReport> {
    let (configured, reachable) = match server.runner() {
        None => (false, false),
        Some(runner) => (true, runner.health().await.is_ok()),
    };
    Json(HealthReport {
        status: if configured && !reachable {
            "degraded"
        } else {
            "ok"
        },
        runner_configured: configured,
        runner_reachable: reachable,
        version: env!("CARGO_PKG_VERSION"),
    })
}
