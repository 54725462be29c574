//! CPU per run (the baseline of issue 16): what one run costs the host in CPU time, as
//! the kernel counts it for a cgroup, next to spawning the interpreter directly.
//!
//! The runner is started inside a `cpuacct` group of the bench's own (cgroup v1), so the
//! group counts the runner and everything it starts: jails, agents, interpreters, and the
//! sandboxes made in place of those the runs used (the jail moves a sandbox into cgroups
//! of the memory, cpu and pids hierarchies only, never out of this one). The bench's
//! direct spawns are counted by a second group holding the bench itself while they run.
//! Both sides run the same one-liners at the same concurrency; a sandboxed window ends
//! once the pool is full again, so every run's replacement is counted. Not counted on
//! either side: the kernel's own workers (a sandbox's network namespace is torn down by
//! one), and the bench's HTTP client for POST /run. The runner runs without warm imports
//! (`--warm-imports ""`): a python sandbox made at rest would otherwise import the data
//! stack, a cost the first-plot figure shows apart. Two runners, one after the other: with
//! templates (the default) and with `--templates false` (jails, executed programs); the
//! direct spawns are measured again for each.

use crate::cases::{Case, CASES};
use crate::clients::{direct, RunnerApi};
use crate::measure::{spread, REFILL_TIMEOUT, SETTLE};
use crate::services::{Binaries, Service};
use anyhow::{ensure, Context};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where cgroup v1's cpuacct hierarchy is mounted.
const CPUACCT: &str = "/sys/fs/cgroup/cpuacct";

/// How many runs a figure takes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Counted runs per language and path.
    pub runs: usize,
    /// Runs in flight at once.
    pub concurrency: usize,
    /// Sandboxes of the runner.
    pub pool_size: usize,
}

/// Everything the figure measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuFigures {
    /// Counted runs per language and path.
    pub runs: usize,
    /// Runs in flight at once.
    pub concurrency: usize,
    /// Sandboxes of the runner.
    pub pool_size: usize,
    /// One row per language.
    pub rows: Vec<CpuRow>,
}

/// One language's CPU per run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuRow {
    /// The language.
    pub lang: String,
    /// CPU per direct spawn, ms.
    pub direct_ms: f64,
    /// CPU per POST /run, ms (the runner, the sandbox and its replacement), sandboxes
    /// forked from a template (the runner's default).
    pub sandboxed_ms: f64,
    /// The same with `--templates false`: each sandbox made by a jail, each program
    /// executed.
    pub jail_ms: f64,
}

/// A cpuacct group of the bench's own.
struct Acct {
    dir: PathBuf,
}

impl Acct {
    fn make(name: &str) -> anyhow::Result<Acct> {
        let dir = Path::new(CPUACCT).join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Acct { dir })
    }

    /// Moves this process (every thread) into the group.
    fn join(&self) -> anyhow::Result<()> {
        join(&self.dir)
    }

    /// CPU time of the group's processes so far, live and dead, in ns.
    fn usage_ns(&self) -> anyhow::Result<u64> {
        let path = self.dir.join("cpuacct.usage");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{} holds {text:?}", path.display()))
    }

    fn remove(self) -> anyhow::Result<()> {
        std::fs::remove_dir(&self.dir).with_context(|| format!("removing {}", self.dir.display()))
    }
}

fn join(dir: &Path) -> anyhow::Result<()> {
    let procs = dir.join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string())
        .with_context(|| format!("moving the bench into {}", procs.display()))
}

/// Measures every language; `Ok(None)` (saying why) where the host has no cgroup v1
/// cpuacct hierarchy to count with.
pub async fn measure(
    bins: &Binaries,
    token: &str,
    sizes: &Sizes,
) -> anyhow::Result<Option<CpuFigures>> {
    if !Path::new(CPUACCT).join("cpuacct.usage").is_file() {
        eprintln!("bench: CPU per run not measured: no cgroup v1 cpuacct hierarchy at {CPUACCT}");
        return Ok(None);
    }
    let (runner_group, direct_group) = (Acct::make("bench-runner")?, Acct::make("bench-direct")?);
    let groups = (&runner_group, &direct_group);
    let measured = async {
        let templates = in_groups(bins, token, sizes, groups, true).await?;
        let jails = in_groups(bins, token, sizes, groups, false).await?;
        anyhow::Ok((templates, jails))
    }
    .await;
    let back = join(Path::new(CPUACCT));
    let removed = runner_group.remove().and(direct_group.remove());
    let (mut figures, jails) = measured?;
    back?;
    removed?;
    for (row, jail) in figures.rows.iter_mut().zip(jails.rows) {
        row.jail_ms = jail.sandboxed_ms;
    }
    Ok(Some(figures))
}

/// Every language's figures from one runner, with templates or without.
async fn in_groups(
    bins: &Binaries,
    token: &str,
    sizes: &Sizes,
    (runner_group, direct_group): (&Acct, &Acct),
    templates: bool,
) -> anyhow::Result<CpuFigures> {
    runner_group.join()?;
    let flags = [
        "--warm-imports",
        "",
        "--templates",
        if templates { "true" } else { "false" },
    ];
    let runner = Service::runner_with(&bins.runner, token, sizes.pool_size, &flags).await;
    direct_group.join()?;
    let runner = runner?;
    let measured = async {
        let api = RunnerApi::new(&runner.url, token)?;
        let mut rows = Vec::with_capacity(CASES.len());
        for case in &CASES {
            eprintln!(
                "bench: CPU per run, {}, {}",
                case.lang.as_str(),
                if templates { "templates" } else { "jails" }
            );
            rows.push(row(&api, case, sizes, runner_group, direct_group).await?);
        }
        anyhow::Ok(rows)
    }
    .await;
    let stopped = runner.stop().await.context("stopping sandbox-runner");
    let rows = measured?;
    stopped?;
    Ok(CpuFigures {
        runs: sizes.runs,
        concurrency: sizes.concurrency,
        pool_size: sizes.pool_size,
        rows,
    })
}

async fn row(
    api: &RunnerApi,
    case: &Case,
    sizes: &Sizes,
    runner_group: &Acct,
    direct_group: &Acct,
) -> anyhow::Result<CpuRow> {
    let interpreter = case.interpreter()?;
    let spawn = {
        let interpreter = interpreter.clone();
        move |case: Case| {
            let interpreter = interpreter.clone();
            async move { direct(&case, &interpreter).await }
        }
    };
    let before = direct_group.usage_ns()?;
    runs(case, sizes, spawn).await?;
    let direct_ns = direct_group.usage_ns()? - before;

    // A warm pool, then the runs, then the replacements of the sandboxes they used.
    api.wait_until_full(REFILL_TIMEOUT).await?;
    tokio::time::sleep(SETTLE).await;
    let before = runner_group.usage_ns()?;
    let post = {
        let api = api.clone();
        move |case: Case| {
            let api = api.clone();
            async move { api.run(&case).await }
        }
    };
    runs(case, sizes, post).await?;
    api.wait_until_full(REFILL_TIMEOUT).await?;
    tokio::time::sleep(SETTLE).await;
    let sandboxed_ns = runner_group.usage_ns()? - before;
    let per_run = |ns: u64| ns as f64 / 1e6 / sizes.runs as f64;
    Ok(CpuRow {
        lang: case.lang.as_str().to_owned(),
        direct_ms: per_run(direct_ns),
        sandboxed_ms: per_run(sandboxed_ns),
        jail_ms: 0.0,
    })
}

/// `sizes.runs` runs of `case` by `run`, `sizes.concurrency` at a time; any failure
/// fails the figure.
async fn runs<F, Fut>(case: &Case, sizes: &Sizes, run: F) -> anyhow::Result<()>
where
    F: Fn(Case) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let done = spread(vec![case.clone(); sizes.concurrency], sizes.runs, run).await?;
    ensure!(
        done.len() == sizes.runs,
        "{} of {} runs made",
        done.len(),
        sizes.runs
    );
    Ok(())
}
