//! Scale-out (issue 15): calls per second through one sandbox-mcp in front of 1, 2 and 3
//! runners, in one run; then what a runner's SIGKILL costs the calls in flight and how
//! long until the others take its share, and its return (see [`failover`]).
//!
//! Every runner is a `sandbox-runner serve` of its own on loopback with a small pool;
//! sandbox-mcp is given a comma list of the first one, two or three runners' URLs and
//! started afresh for each figure. Two programs, both through `tools/call` of
//! `run_python`: one that sleeps 250 ms (the figure grows with sandboxes, so with
//! runners) and `print(1)` (on this one host it is bound by the host's CPU, shared by
//! every runner). How many calls each runner ran is read from its own
//! `sandbox_runner_programs_started_total`.

mod failover;
mod report;

use crate::clients::{call_tool, McpSession, RunnerApi};
use crate::measure::{spread, REFILL_TIMEOUT};
use crate::services::{Binaries, Service};
use crate::stats::{self, Latency};
use anyhow::{bail, ensure, Context};
use rmcp::service::Peer;
use rmcp::RoleClient;
use serde::Serialize;
use std::time::{Duration, Instant};

pub use failover::{Failover, Phases};
pub use report::markdown;

/// The most runners a figure is measured with.
const RUNNERS: usize = 3;
/// The runners' flags: no warm imports, so that a sandbox costs the same whether or not
/// its pool came to rest between calls (warm imports happen only at rest; their cost is
/// the first-plot figure's).
pub const RUNNER_FLAGS: &[&str] = &["--warm-imports", ""];
/// How long sandbox-mcp may take to see every runner it was given as up.
const UP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often sandbox-mcp's `/metrics` and a runner's are read while waiting.
const POLL_EVERY: Duration = Duration::from_millis(10);
/// The longest one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A program every figure runs, through `run_python`.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    /// Its name in the report.
    pub name: &'static str,
    /// The program.
    pub code: &'static str,
}

/// The two programs: one bound by sandboxes, one by the host's CPU.
pub const WORKLOADS: [Workload; 2] = [
    Workload {
        name: "sleep 250 ms",
        code: "import time\ntime.sleep(0.25)\nprint(1)\n",
    },
    Workload {
        name: "print(1)",
        code: "print(1)\n",
    },
];
/// What every program prints.
const EXPECTED: &str = "1\n";

/// How many calls the figures take.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Counted calls per workload and number of runners.
    pub calls: usize,
    /// Uncounted calls before them.
    pub warmup: usize,
    /// Calls in flight at once.
    pub concurrency: usize,
    /// Sandboxes of each runner.
    pub pool_size: usize,
    /// The failover figure's phases.
    pub failover: failover::Phases,
}

/// Everything the section measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleOutFigures {
    /// Sandboxes of each runner.
    pub pool_size: usize,
    /// Calls in flight at once.
    pub concurrency: usize,
    /// Counted calls per figure.
    pub calls: usize,
    /// One row per workload and number of runners.
    pub rates: Vec<ScaleRate>,
    /// A runner killed under load, and started again.
    pub failover: Failover,
}

/// One workload's calls per second with some runners.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleRate {
    /// The workload's name.
    pub workload: &'static str,
    /// Runners behind sandbox-mcp.
    pub runners: usize,
    /// Counted calls per second, from the first counted call's start to the last one's
    /// end.
    pub per_second: f64,
    /// The counted calls' latency.
    pub latency: Latency,
    /// Programs each runner started during the counted calls, in the comma list's order.
    pub per_runner: Vec<u64>,
}

/// Starts the runners, measures, and stops them whatever happened.
pub async fn measure(
    bins: &Binaries,
    token: &str,
    sizes: &Sizes,
) -> anyhow::Result<ScaleOutFigures> {
    let mut runners = Vec::with_capacity(RUNNERS);
    let mut started = Ok(());
    for _ in 0..RUNNERS {
        match Service::runner_with(&bins.runner, token, sizes.pool_size, RUNNER_FLAGS).await {
            Ok(runner) => runners.push(runner),
            Err(e) => {
                started = Err(e);
                break;
            }
        }
    }
    let measured = match started {
        Ok(()) => with_runners(bins, token, &mut runners, sizes).await,
        Err(e) => Err(e),
    };
    for runner in runners {
        if let Err(e) = runner.stop().await {
            eprintln!("bench: stopping a runner: {e:#}");
        }
    }
    measured
}

async fn with_runners(
    bins: &Binaries,
    token: &str,
    runners: &mut Vec<Service>,
    sizes: &Sizes,
) -> anyhow::Result<ScaleOutFigures> {
    let mut rates = Vec::new();
    for workload in WORKLOADS {
        for count in 1..=RUNNERS {
            eprintln!("bench: scale-out, {} on {count} runner(s)", workload.name);
            let rate = rate(bins, token, &runners[..count], &workload, sizes).await?;
            rates.push(rate);
        }
    }
    eprintln!("bench: scale-out, failover");
    let failover = failover::measure(bins, token, runners, sizes).await?;
    Ok(ScaleOutFigures {
        pool_size: sizes.pool_size,
        concurrency: sizes.concurrency,
        calls: sizes.calls,
        rates,
        failover,
    })
}

/// One figure: a fresh sandbox-mcp in front of `runners`, warmed up, then the counted
/// calls.
async fn rate(
    bins: &Binaries,
    token: &str,
    runners: &[Service],
    workload: &Workload,
    sizes: &Sizes,
) -> anyhow::Result<ScaleRate> {
    let front = Front::start(bins, token, runners, sizes.concurrency).await?;
    let measured = async {
        for runner in runners {
            RunnerApi::new(&runner.url, token)?
                .wait_until_full(REFILL_TIMEOUT)
                .await?;
        }
        let peers = front.peers();
        let warm = calls(&peers, workload, sizes.warmup).await?;
        ensure_all_answered(&warm)?;
        let before = programs_started(&front.http, runners).await?;
        let begun = Instant::now();
        let counted = calls(&peers, workload, sizes.calls).await?;
        let elapsed = begun.elapsed();
        let after = programs_started(&front.http, runners).await?;
        ensure_all_answered(&counted)?;
        let took: Vec<Duration> = counted.iter().map(|c| c.took).collect();
        anyhow::Ok(ScaleRate {
            workload: workload.name,
            runners: runners.len(),
            per_second: stats::per_second(counted.len(), elapsed),
            latency: stats::latency(&took).context("no call was counted")?,
            per_runner: after.iter().zip(&before).map(|(a, b)| a - b).collect(),
        })
    }
    .await;
    let stopped = front.stop().await;
    let measured = measured?;
    stopped?;
    Ok(measured)
}

/// sandbox-mcp in front of some runners, and MCP sessions with it (one per worker:
/// sandbox-mcp bounds the calls in flight per session).
struct Front {
    mcp: Service,
    sessions: Vec<McpSession>,
    http: reqwest::Client,
}

impl Front {
    /// Starts sandbox-mcp with the runners' URLs as a comma list, waits until it sees
    /// every one of them up, and opens `sessions` MCP sessions.
    async fn start(
        bins: &Binaries,
        token: &str,
        runners: &[Service],
        sessions: usize,
    ) -> anyhow::Result<Front> {
        let urls: Vec<&str> = runners.iter().map(|r| r.url.as_str()).collect();
        let mcp_token = crate::token()?;
        let mcp = Service::mcp(&bins.mcp, &mcp_token, &urls.join(","), token).await?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .context("building the HTTP client")?;
        let connected = async {
            wait_until_up(&http, &mcp, &urls).await?;
            let mut opened = Vec::with_capacity(sessions);
            for _ in 0..sessions {
                opened.push(McpSession::connect(&mcp.url, &mcp_token).await?);
            }
            anyhow::Ok(opened)
        }
        .await;
        match connected {
            Ok(sessions) => Ok(Front {
                mcp,
                sessions,
                http,
            }),
            Err(e) => {
                let _ = mcp.stop().await;
                Err(e)
            }
        }
    }

    /// Whether sandbox-mcp's last health poll of `runner` found it up.
    async fn sees_up(&self, runner: &str) -> anyhow::Result<bool> {
        Ok(runner_up(&self.http, &self.mcp, runner).await? == Some(true))
    }

    /// Calls sandbox-mcp has at `runner` now.
    async fn in_flight_at(&self, runner: &str) -> anyhow::Result<u64> {
        let text = metrics_text(&self.http, &metrics_url(&self.mcp)).await?;
        let name = format!(
            "sandbox_mcp_runner_in_flight{{runner=\"{}\"}}",
            as_listed(runner)
        );
        Ok(sample(&text, &name).unwrap_or(0.0) as u64)
    }

    /// A handle on each session.
    fn peers(&self) -> Vec<Peer<RoleClient>> {
        self.sessions.iter().map(McpSession::peer).collect()
    }

    async fn stop(self) -> anyhow::Result<()> {
        let mut closed = Ok(());
        for session in self.sessions {
            closed = closed.and(session.close().await);
        }
        let stopped = self.mcp.stop().await.context("stopping sandbox-mcp");
        closed?;
        stopped
    }
}

/// Waits until sandbox-mcp's `/metrics` shows every one of `urls` up.
async fn wait_until_up(http: &reqwest::Client, mcp: &Service, urls: &[&str]) -> anyhow::Result<()> {
    let deadline = Instant::now() + UP_TIMEOUT;
    loop {
        let mut all = true;
        for url in urls {
            all &= runner_up(http, mcp, url).await? == Some(true);
        }
        if all {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("sandbox-mcp did not see all of {urls:?} up within {UP_TIMEOUT:?}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// `sandbox_mcp_runner_up` of `runner` in sandbox-mcp's `/metrics` (it reports without
/// polling, unlike its `/health`): `None` when the runner is not listed.
async fn runner_up(
    http: &reqwest::Client,
    mcp: &Service,
    runner: &str,
) -> anyhow::Result<Option<bool>> {
    let text = metrics_text(http, &metrics_url(mcp)).await?;
    let name = format!("sandbox_mcp_runner_up{{runner=\"{}\"}}", as_listed(runner));
    Ok(sample(&text, &name).map(|v| v >= 1.0))
}

/// A runner's URL as sandbox-mcp lists it (with a final `/`).
fn as_listed(url: &str) -> String {
    format!("{}/", url.trim_end_matches('/'))
}

/// sandbox-mcp's `/metrics` URL (its listening URL ends with `/mcp`).
fn metrics_url(mcp: &Service) -> String {
    let base = mcp.url.strip_suffix("/mcp").unwrap_or(&mcp.url);
    format!("{base}/metrics")
}

/// Programs each runner started so far (its `sandbox_runner_programs_started_total`,
/// every language).
async fn programs_started(http: &reqwest::Client, runners: &[Service]) -> anyhow::Result<Vec<u64>> {
    let mut counts = Vec::with_capacity(runners.len());
    for runner in runners {
        counts.push(started_at(http, &runner.url).await?);
    }
    Ok(counts)
}

/// Programs the runner at `url` started so far.
async fn started_at(http: &reqwest::Client, url: &str) -> anyhow::Result<u64> {
    let text = metrics_text(http, &format!("{url}/metrics")).await?;
    Ok(sum(&text, "sandbox_runner_programs_started_total") as u64)
}

async fn metrics_text(http: &reqwest::Client, url: &str) -> anyhow::Result<String> {
    http.get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .with_context(|| format!("GET {url}"))?
        .text()
        .await
        .with_context(|| format!("reading {url}"))
}

/// The value of the series named exactly `name` (labels included).
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| line.strip_prefix(name))
        .find_map(|rest| rest.trim().parse().ok())
}

/// The sum of every series of the metric `metric`, whatever its labels.
fn sum(text: &str, metric: &str) -> f64 {
    text.lines()
        .filter_map(|line| line.strip_prefix(metric))
        .filter(|rest| rest.starts_with('{') || rest.starts_with(' '))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One call's fate.
#[derive(Debug, Clone)]
pub struct Call {
    /// When it was sent.
    pub began: Instant,
    /// How long it took.
    pub took: Duration,
    /// `None` when it answered `1`; else what went wrong.
    pub failure: Option<String>,
}

impl Call {
    /// When its answer came.
    pub fn ended(&self) -> Instant {
        self.began + self.took
    }
}

fn ensure_all_answered(calls: &[Call]) -> anyhow::Result<()> {
    if let Some(failed) = calls.iter().find_map(|c| c.failure.as_ref()) {
        bail!("a call failed with every runner up: {failed}");
    }
    Ok(())
}

/// `count` calls of `workload`, one worker per session of `peers`; every call's fate.
async fn calls(
    peers: &[Peer<RoleClient>],
    workload: &Workload,
    count: usize,
) -> anyhow::Result<Vec<Call>> {
    let code = workload.code;
    let done = spread(
        peers.to_vec(),
        count,
        move |peer: Peer<RoleClient>| async move { anyhow::Ok(one_call(&peer, code).await) },
    )
    .await?;
    ensure!(done.len() == count, "{} of {count} calls made", done.len());
    Ok(done)
}

/// One `tools/call` of `run_python` with `code`, whatever happens to it.
async fn one_call(peer: &Peer<RoleClient>, code: &str) -> Call {
    let began = Instant::now();
    let failure =
        match tokio::time::timeout(CALL_TIMEOUT, call_tool(peer, "run_python", code)).await {
            Err(_) => Some(format!("no answer within {CALL_TIMEOUT:?}")),
            Ok(Err(e)) => Some(format!("{e:#}")),
            Ok(Ok(result)) => match &result.structured_content {
                Some(s) if result.is_error != Some(true) && s["stdout"] == EXPECTED => None,
                Some(s) => Some(s.to_string()),
                None => Some(format!("{:?}", result.content)),
            },
        };
    Call {
        began,
        took: began.elapsed(),
        failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP x\n\
        sandbox_runner_programs_started_total{lang=\"python\"} 7\n\
        sandbox_runner_programs_started_total{lang=\"bash\"} 2\n\
        sandbox_runner_programs_started_totally 100\n\
        sandbox_mcp_runner_up{runner=\"http://127.0.0.1:1\"} 1\n\
        sandbox_mcp_runner_up{runner=\"http://127.0.0.1:12\"} 0\n";

    #[test]
    fn metrics_are_read_by_exact_series_and_summed_by_metric() {
        assert_eq!(sum(TEXT, "sandbox_runner_programs_started_total"), 9.0);
        let up = |url: &str| sample(TEXT, &format!("sandbox_mcp_runner_up{{runner=\"{url}\"}}"));
        assert_eq!(up("http://127.0.0.1:1"), Some(1.0));
        assert_eq!(up("http://127.0.0.1:12"), Some(0.0));
        assert_eq!(up("http://127.0.0.1:2"), None);
    }
}
