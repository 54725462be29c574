//! `GET /health`: whether this server is up and how its runners (and upstreams, where
//! configured) are doing; and `GET /metrics`: the runners' numbers, and the calls of
//! upstream tools made from code, in Prometheus's text format. No auth on either, so
//! both only read what the background poll saw: neither sends anything to a runner or
//! an upstream, runners are named by their URL without user name or password, and
//! upstreams by their name alone.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;

use crate::runner_client::{MemberReport, MemberState};
use crate::server::SandboxServer;
use crate::upstreams::{CallCount, Upstreams};

/// The answer of `GET /health`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthReport {
    /// `"ok"`, or `"degraded"` when runners are configured and none takes calls.
    pub status: &'static str,
    /// Whether `SANDBOX_RUNNER_URL` is set.
    pub runner_configured: bool,
    /// Whether some runner answered 200 to its last health poll (at most about one
    /// `SANDBOX_RUNNER_HEALTH_MS` ago) and has not refused a call since.
    pub runner_reachable: bool,
    /// The runners (one per address of a name with several), and their state at the last
    /// poll.
    pub runners: Vec<MemberReport>,
    /// The upstreams whose tools programs call, where configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstreams: Option<Vec<UpstreamReport>>,
    /// This server's version.
    pub version: &'static str,
}

/// One upstream in `GET /health`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamReport {
    /// Its name.
    pub name: String,
    /// Whether it is connected now.
    pub up: bool,
    /// How many of its tools programs may call now.
    pub tools: usize,
}

fn upstream_reports(upstreams: &Upstreams) -> Vec<UpstreamReport> {
    upstreams
        .tools()
        .into_iter()
        .map(|s| UpstreamReport {
            tools: s.tools.len(),
            name: s.name,
            up: s.up,
        })
        .collect()
}

/// Reports what the background poll last saw
/// ([`Runners::look`](crate::runner_client::Runners::look)): answering sends
/// nothing to any runner, however often it is asked.
pub(crate) async fn health(State(server): State<SandboxServer>) -> Json<HealthReport> {
    let (configured, runners) = match server.runner() {
        None => (false, Vec::new()),
        Some(runners) => (true, runners.reports()),
    };
    let reachable = runners.iter().any(|r| r.seen.state == MemberState::Ok);
    Json(HealthReport {
        status: if configured && !reachable {
            "degraded"
        } else {
            "ok"
        },
        runner_configured: configured,
        runner_reachable: reachable,
        runners,
        upstreams: server.upstreams().map(upstream_reports),
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// `GET /metrics`: per runner, calls, failures, retries, calls in flight and whether it
/// is up; where upstreams are configured, per upstream whether it is up, and the calls of
/// its tools made from code by tool and outcome.
pub(crate) async fn metrics(State(server): State<SandboxServer>) -> impl IntoResponse {
    let reports = server.runner().map(|r| r.reports()).unwrap_or_default();
    let mut text = render(&reports);
    if let Some(upstreams) = server.upstreams() {
        text.push_str(&render_upstreams(
            &upstream_reports(upstreams),
            &upstreams.counts(),
        ));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// The Prometheus text of the upstreams and their calls.
fn render_upstreams(upstreams: &[UpstreamReport], calls: &[CallCount]) -> String {
    let mut out = String::new();
    let name = "sandbox_mcp_upstream_up";
    let _ = writeln!(
        out,
        "# HELP {name} 1 when sandbox-mcp is connected to the upstream MCP server.\n# TYPE {name} gauge"
    );
    for upstream in upstreams {
        let _ = writeln!(
            out,
            "{name}{{server=\"{}\"}} {}",
            upstream.name,
            u8::from(upstream.up)
        );
    }
    let name = "sandbox_mcp_upstream_calls_total";
    let _ = writeln!(
        out,
        "# HELP {name} Calls of upstream tools made from code, by server, tool and outcome \
         (ok, error, refused: never sent, timeout).\n# TYPE {name} counter"
    );
    for call in calls {
        let _ = writeln!(
            out,
            "{name}{{server=\"{}\",tool=\"{}\",outcome=\"{}\"}} {}",
            escaped(&call.server),
            escaped(&call.tool),
            call.outcome.as_str(),
            call.calls
        );
    }
    out
}

/// A label value as Prometheus's text format writes it.
fn escaped(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text of `reports`.
fn render(reports: &[MemberReport]) -> String {
    type Field = fn(&MemberReport) -> u64;
    let series: [(&str, &str, &str, Field); 6] = [
        (
            "sandbox_mcp_runner_calls_total",
            "counter",
            "Calls sent to the runner (each attempt counts).",
            |r| r.calls,
        ),
        (
            "sandbox_mcp_runner_failures_total",
            "counter",
            "Calls to the runner that failed and were not sent elsewhere.",
            |r| r.failures,
        ),
        (
            "sandbox_mcp_runner_retries_total",
            "counter",
            "Calls the runner refused before the program started, sent to another runner.",
            |r| r.retries,
        ),
        (
            "sandbox_mcp_runner_in_flight",
            "gauge",
            "Calls this server has at the runner now.",
            |r| r.in_flight as u64,
        ),
        (
            "sandbox_mcp_runner_up",
            "gauge",
            "1 when the runner's last /health answered 200.",
            |r| u64::from(r.seen.state == MemberState::Ok),
        ),
        (
            "sandbox_mcp_runner_available",
            "gauge",
            "Free warm sandboxes at the runner's last /health.",
            |r| r.seen.available.unwrap_or(0) as u64,
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, field) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for report in reports {
            let url = report.url.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(out, "{name}{{runner=\"{url}\"}} {}", field(report));
        }
    }
    out
}
