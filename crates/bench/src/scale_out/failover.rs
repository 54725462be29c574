//! Failover: sandbox-mcp in front of every runner under steady load (the sleeping
//! workload), the last runner SIGKILLed, then started again on the same address.
//!
//! Measured: the calls lost (those the killed runner had in flight: a call that reached
//! a runner is never sent again), the first answer to a call sent after the kill, the
//! latency of the calls sent in the [`WINDOW`] after it next to those before, when
//! sandbox-mcp's health poll marks the runner down, and, once it is started again, when
//! it listens, when it is marked up and when it starts its first program.

use super::{
    one_call, started_at, Call, Front, Sizes, Workload, POLL_EVERY, RUNNER_FLAGS, WORKLOADS,
};
use crate::services::{Binaries, Service};
use crate::stats;
use anyhow::{bail, Context};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// The calls sent this long after the kill are the ones whose latency shows the failover.
pub const WINDOW: Duration = Duration::from_secs(2);
/// The error code of a call whose runner was lost after the call reached it: the only
/// failure a kill may cause (every other call goes to another runner).
const LOST: &str = "runner_connection_lost";
/// How long the restarted runner may take to start its first program.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// How long each phase of the figure lasts.
#[derive(Debug, Clone, Copy)]
pub struct Phases {
    /// Load before the kill.
    pub before: Duration,
    /// From the kill to the runner's restart.
    pub down: Duration,
    /// Load once the restarted runner has started a program.
    pub after: Duration,
}

/// What a runner's SIGKILL under load cost, and its return.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// Runners behind sandbox-mcp.
    pub runners: usize,
    /// Calls in flight at once.
    pub concurrency: usize,
    /// Every call made, and those answered `1`.
    pub calls: usize,
    /// Calls answered `1`.
    pub answered: usize,
    /// Calls sandbox-mcp had at the killed runner just before the kill.
    pub in_flight_at_kill: u64,
    /// The distinct failures (at most three, shortened).
    pub failures: Vec<String>,
    /// Median latency of the calls sent before the kill.
    pub p50_before_ms: f64,
    /// Median and highest latency of the calls sent in the [`WINDOW`] after the kill.
    pub p50_after_kill_ms: Option<f64>,
    /// The same, highest.
    pub max_after_kill_ms: Option<f64>,
    /// From the kill to the first answer to a call sent after it.
    pub first_answer_ms: Option<f64>,
    /// From the kill to sandbox-mcp marking the runner down (its health poll).
    pub marked_down_ms: Option<f64>,
    /// From the restart to the runner's listening line (its pool warm).
    pub listening_ms: f64,
    /// From the restart to sandbox-mcp marking it up.
    pub marked_up_ms: Option<f64>,
    /// From the restart to its first program started.
    pub first_program_ms: Option<f64>,
}

/// Kills the last of `runners` under load and starts it again; `runners` holds the new
/// one afterwards (or one fewer if it could not start).
pub async fn measure(
    bins: &Binaries,
    token: &str,
    runners: &mut Vec<Service>,
    sizes: &Sizes,
) -> anyhow::Result<Failover> {
    let front = Front::start(bins, token, runners, sizes.concurrency).await?;
    let load = Load::start(&front, WORKLOADS[0]);
    let measured = kill_and_restart(bins, token, runners, &front, sizes).await;
    let calls = load.stop().await;
    let stopped = front.stop().await;
    let events = measured?;
    stopped?;
    let calls = calls?;
    if let Some(other) = calls
        .iter()
        .filter_map(|c| c.failure.as_deref())
        .find(|f| !f.contains(LOST))
    {
        bail!("a call failed other than as {LOST} when a runner was killed: {other}");
    }
    Ok(events.figures(&calls, runners.len().max(1), sizes.concurrency))
}

/// When things happened, and what was seen at the kill.
struct Events {
    killed_at: Instant,
    in_flight_at_kill: u64,
    marked_down: Option<Instant>,
    restarted_at: Instant,
    listening: Duration,
    marked_up: Option<Instant>,
    first_program: Option<Instant>,
}

async fn kill_and_restart(
    bins: &Binaries,
    token: &str,
    runners: &mut Vec<Service>,
    front: &Front,
    sizes: &Sizes,
) -> anyhow::Result<Events> {
    tokio::time::sleep(sizes.failover.before).await;
    let victim = runners.pop().context("no runner to kill")?;
    let url = victim.url.clone();
    let listen = url
        .strip_prefix("http://")
        .context("a runner URL without http://")?
        .to_owned();
    let in_flight_at_kill = front.in_flight_at(&url).await?;
    let killed_at = Instant::now();
    victim.kill().await?;
    let marked_down = watch(sizes.failover.down, || async {
        Ok(!front.sees_up(&url).await?)
    })
    .await?;
    tokio::time::sleep(sizes.failover.down.saturating_sub(killed_at.elapsed())).await;
    let restarted_at = Instant::now();
    let runner =
        Service::runner_at(&bins.runner, token, sizes.pool_size, &listen, RUNNER_FLAGS).await?;
    let listening = runner.started_in;
    runners.push(runner);
    let http = reqwest::Client::new();
    let (mut marked_up, mut first_program) = (None, None);
    let deadline = restarted_at + REJOIN_TIMEOUT;
    while first_program.is_none() || marked_up.is_none() {
        if marked_up.is_none() && front.sees_up(&url).await? {
            marked_up = Some(Instant::now());
        }
        if first_program.is_none() && started_at(&http, &url).await? > 0 {
            first_program = Some(Instant::now());
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    tokio::time::sleep(sizes.failover.after).await;
    Ok(Events {
        killed_at,
        in_flight_at_kill,
        marked_down,
        restarted_at,
        listening,
        marked_up,
        first_program,
    })
}

/// Polls `check` until it holds (when) or `within` has passed (`None`).
async fn watch<F, Fut>(within: Duration, mut check: F) -> anyhow::Result<Option<Instant>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await? {
            return Ok(Some(Instant::now()));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

impl Events {
    fn figures(&self, calls: &[Call], runners: usize, concurrency: usize) -> Failover {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let since = |at: Instant, from: Instant| ms(at.saturating_duration_since(from));
        let before: Vec<Duration> = calls
            .iter()
            .filter(|c| c.ended() <= self.killed_at && c.failure.is_none())
            .map(|c| c.took)
            .collect();
        let window: Vec<Duration> = calls
            .iter()
            .filter(|c| c.began >= self.killed_at && c.began < self.killed_at + WINDOW)
            .map(|c| c.took)
            .collect();
        let longest = window.iter().max().map(|d| ms(*d));
        let window = stats::latency(&window);
        let mut failures: Vec<String> = Vec::new();
        for failure in calls.iter().filter_map(|c| c.failure.as_deref()) {
            let short: String = failure.chars().take(200).collect();
            if failures.len() < 3 && !failures.contains(&short) {
                failures.push(short);
            }
        }
        Failover {
            runners,
            concurrency,
            calls: calls.len(),
            answered: calls.iter().filter(|c| c.failure.is_none()).count(),
            in_flight_at_kill: self.in_flight_at_kill,
            failures,
            p50_before_ms: stats::latency(&before).map_or(f64::NAN, |l| l.p50_ms),
            p50_after_kill_ms: window.map(|l| l.p50_ms),
            max_after_kill_ms: longest,
            first_answer_ms: calls
                .iter()
                .filter(|c| c.began >= self.killed_at && c.failure.is_none())
                .map(|c| since(c.ended(), self.killed_at))
                .min_by(f64::total_cmp),
            marked_down_ms: self.marked_down.map(|at| since(at, self.killed_at)),
            listening_ms: ms(self.listening),
            marked_up_ms: self.marked_up.map(|at| since(at, self.restarted_at)),
            first_program_ms: self.first_program.map(|at| since(at, self.restarted_at)),
        }
    }
}

/// Calls made over and over by workers until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    workers: JoinSet<Vec<Call>>,
}

impl Load {
    /// One worker per session of `front`.
    fn start(front: &Front, workload: Workload) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = JoinSet::new();
        for peer in front.peers() {
            let stop = stop.clone();
            workers.spawn(async move {
                let mut done = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    done.push(one_call(&peer, workload.code).await);
                }
                done
            });
        }
        Load { stop, workers }
    }

    /// Stops the workers once their calls in flight end; every call made.
    async fn stop(mut self) -> anyhow::Result<Vec<Call>> {
        self.stop.store(true, Ordering::Relaxed);
        let mut calls = Vec::new();
        while let Some(joined) = self.workers.join_next().await {
            calls.extend(joined.context("a worker panicked")?);
        }
        if calls.is_empty() {
            bail!("no call was made under load");
        }
        Ok(calls)
    }
}
