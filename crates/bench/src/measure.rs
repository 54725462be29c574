//! The measurements: sequential latency, throughput at fixed concurrency, cold start.

use crate::cases::Case;
use crate::clients::{Clients, RunnerApi, Via};
use crate::services::{Binaries, Service};
use crate::stats::{self, Latency};
use anyhow::Context;
use sandbox_protocol::Lang;
use serde::Serialize;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// How long the pool may take to make all its sandboxes again.
pub const REFILL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a sequential run waits once the pool is full: the kernel tears down the
/// previous sandbox's namespaces in the background after its processes are gone
/// (network namespace cleanup runs in a kernel worker), and without this pause that
/// work lands on whichever run comes next.
pub const SETTLE: Duration = Duration::from_millis(50);

/// Sequential latency of one language on every path.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LangLatency {
    /// The language.
    pub lang: Lang,
    /// (a), (b) and (c), in [`Via::ALL`] order.
    pub paths: Vec<(Via, Latency)>,
}

/// Runs `case` `iterations` times on each path in turn (after `warmup` unmeasured
/// rounds). Every run starts on a quiet runner with a full pool: it measures what a
/// request meets when the previous one is done, not the refill behind it.
pub async fn sequential(
    clients: &Clients,
    case: &Case,
    warmup: usize,
    iterations: usize,
) -> anyhow::Result<LangLatency> {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(iterations); Via::ALL.len()];
    for round in 0..warmup + iterations {
        for (via, series) in Via::ALL.iter().zip(samples.iter_mut()) {
            clients.runner.wait_until_full(REFILL_TIMEOUT).await?;
            tokio::time::sleep(SETTLE).await;
            let took = clients.once(*via, case).await?;
            if round >= warmup {
                series.push(took);
            }
        }
    }
    let paths = Via::ALL
        .iter()
        .zip(&samples)
        .map(|(via, series)| {
            stats::latency(series)
                .map(|l| (*via, l))
                .context("no run was measured")
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(LangLatency {
        lang: case.lang.clone(),
        paths,
    })
}

/// Runs per second of one language at one concurrency, on every path.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rate {
    /// The language.
    pub lang: Lang,
    /// Runs in flight at once.
    pub concurrency: usize,
    /// Runs per second of (a), (b) and (c), in [`Via::ALL`] order.
    pub per_second: Vec<(Via, f64)>,
}

/// `skip + runs` runs of `case` with `concurrency` workers, on each path in turn,
/// starting with a full pool. The rate counts the runs after the first `skip`
/// (the pool size): past the sandboxes made ahead, every run waits for a new one,
/// so this measures creation.
pub async fn throughput(
    clients: &Clients,
    case: &Case,
    concurrency: usize,
    skip: usize,
    runs: usize,
) -> anyhow::Result<Rate> {
    let mut per_second = Vec::with_capacity(Via::ALL.len());
    for via in Via::ALL {
        clients.runner.wait_until_full(REFILL_TIMEOUT).await?;
        let mut done =
            run_concurrently(clients, via, case.clone(), concurrency, skip + runs).await?;
        let rate = stats::steady_per_second(&mut done, skip)
            .context("fewer runs completed than were started")?;
        per_second.push((via, rate));
    }
    Ok(Rate {
        lang: case.lang.clone(),
        concurrency,
        per_second,
    })
}

/// Runs `runs` runs with `concurrency` workers; returns when each one ended.
async fn run_concurrently(
    clients: &Clients,
    via: Via,
    case: Case,
    concurrency: usize,
    runs: usize,
) -> anyhow::Result<Vec<Instant>> {
    let workers = vec![clients.clone(); concurrency];
    spread(workers, runs, move |clients: Clients| {
        let case = case.clone();
        async move {
            clients.once(via, &case).await?;
            Ok(Instant::now())
        }
    })
    .await
}

/// `count` jobs shared by one task per worker, each task taking the next job until none
/// is left (a worker stops at its first failing job, which fails the whole); every job's
/// result, in no particular order.
pub async fn spread<W, F, Fut, T>(workers: Vec<W>, count: usize, job: F) -> anyhow::Result<Vec<T>>
where
    W: Clone + Send + 'static,
    F: Fn(W) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = anyhow::Result<T>> + Send,
    T: Send + 'static,
{
    let taken = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for worker in workers {
        let (job, taken) = (job.clone(), taken.clone());
        tasks.spawn(async move {
            let mut done = Vec::new();
            while taken.fetch_add(1, Ordering::Relaxed) < count {
                done.push(job(worker.clone()).await?);
            }
            anyhow::Ok(done)
        });
    }
    let mut done = Vec::with_capacity(count);
    while let Some(joined) = tasks.join_next().await {
        done.extend(joined.context("a worker panicked")??);
    }
    Ok(done)
}

/// A runner's first run after it starts.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ColdStart {
    /// The language of the first run.
    pub lang: Lang,
    /// From spawning the runner to its listening line (the first sandbox is made
    /// before it listens).
    pub listening_ms: f64,
    /// From spawning the runner to the first successful answer.
    pub first_run_ms: f64,
}

/// Starts a new runner, runs `case` once as soon as it listens, and stops it.
pub async fn cold_start(
    bins: &Binaries,
    token: &str,
    case: &Case,
    pool_size: usize,
) -> anyhow::Result<ColdStart> {
    let begun = Instant::now();
    let runner = Service::runner(&bins.runner, token, pool_size).await?;
    let first = async {
        RunnerApi::new(&runner.url, token)?.run(case).await?;
        anyhow::Ok(begun.elapsed())
    }
    .await;
    let listening = runner.started_in;
    runner.stop().await?;
    let first =
        first.with_context(|| format!("the first run of a new runner ({:?})", case.lang))?;
    Ok(ColdStart {
        lang: case.lang.clone(),
        listening_ms: listening.as_secs_f64() * 1e3,
        first_run_ms: first.as_secs_f64() * 1e3,
    })
}
