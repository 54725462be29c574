//! Packages: time to first plot (issue 13). A short pandas + matplotlib program (make a
//! DataFrame, describe it, plot it, save a PNG) run three ways in one run: (a) spawned
//! directly on the host with the same package set on `PYTHONPATH` and a warm font
//! cache, (b) `POST /run` on a runner with its default warm imports (numpy, pandas,
//! matplotlib.pyplot), (c) `tools/call` of `run_python` through sandbox-mcp in front of
//! that runner; and, for what the warm imports save, `POST /run` on a second runner
//! started without them (`--warm-imports ""`). For what they cost, a `print(1)` on each
//! runner (the interpreter's exit then finalizes every module the loader imported) and
//! the memory of an idle python sandbox on each.
//!
//! The program imports the warm imports, so it gets a sandbox that holds them (issue
//! 35: forked from the template that imported them, or, made by a jail, with a loader
//! that imports them while it waits and stops when a request arrives), and `print(1)` a
//! lean one. Every measured run waits for the pool to be at rest: full, and every
//! process of every sandbox asleep with its CPU time unchanged for [`pool_watch::QUIET`]
//! (a jail's refill has finished importing). A "back to back" series (no pause) shows
//! what a busy pool gives instead. Both runners are fresh (started for this figure).
//!
//! `program.rs` holds the program and what each run must hand back, `direct.rs` the
//! direct spawn (a).

mod direct;
mod program;

pub use program::ONE_LINER;

use crate::clients::{call_tool, timed, McpSession, RunnerApi};
use crate::cpu_group::CpuGroup;
use crate::measure::SETTLE;
use crate::memory::{self, SandboxMemory};
use crate::pool_watch::{self, Runner};
use crate::services::{Binaries, Service};
use crate::stats::{self, Latency};
use anyhow::{ensure, Context};
use direct::{Direct, PACKAGES_DIR};
use program::{check_answer, check_result, SCRIPT};
use rmcp::service::Peer;
use rmcp::RoleClient;
use sandbox_protocol::api::Health;
use sandbox_protocol::Lang;
use serde::Serialize;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

/// The MCP tool of (c).
const TOOL: &str = "run_python";
/// Sandboxes of the runner without warm imports (a python one, a node one, a bare one).
const COLD_POOL: usize = 3;
/// How long the pool may take to come to rest; past it the run goes ahead and is
/// counted in [`FirstPlot::not_at_rest`] (smoke mode must not fail on timing).
const REST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a pool at rest is left alone before its sandboxes' memory is read.
const MEMORY_SETTLE: Duration = Duration::from_millis(500);
/// The longest one run may take on any path.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// How many runs the figure takes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Measured runs per path (and per back-to-back series).
    pub rounds: usize,
    /// Unmeasured rounds first (the direct spawn always gets one more run first, for
    /// its font cache).
    pub warmup: usize,
    /// Sandboxes of the runner with warm imports.
    pub pool_size: usize,
}

/// A way the program is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PlotPath {
    /// (a) `/usr/bin/python3 script.py` on the host, the set on `PYTHONPATH`.
    Direct,
    /// (b) `POST /run` on the runner with warm imports.
    Run,
    /// (c) `tools/call` of `run_python` through sandbox-mcp, the same runner.
    ToolsCall,
    /// `POST /run` on the runner started without warm imports.
    RunNoWarmImports,
    /// `POST /run` of [`ONE_LINER`] on the runner with warm imports.
    OneLinerWarm,
    /// `POST /run` of [`ONE_LINER`] on the runner without warm imports.
    OneLinerNoWarm,
}

impl PlotPath {
    /// The paths of the rounds at rest, in the order each round runs them.
    pub const RESTED: [PlotPath; 6] = [
        PlotPath::Direct,
        PlotPath::Run,
        PlotPath::ToolsCall,
        PlotPath::RunNoWarmImports,
        PlotPath::OneLinerWarm,
        PlotPath::OneLinerNoWarm,
    ];
    /// The paths of the back-to-back series.
    pub const BACK_TO_BACK: [PlotPath; 2] = [PlotPath::Run, PlotPath::ToolsCall];

    /// The row heading in the tables.
    pub fn label(self) -> &'static str {
        match self {
            PlotPath::Direct => "direct spawn (`/usr/bin/python3 script.py`)",
            PlotPath::Run => "POST /run, warm imports",
            PlotPath::ToolsCall => "tools/call `run_python`, warm imports",
            PlotPath::RunNoWarmImports => "POST /run, runner without warm imports",
            PlotPath::OneLinerWarm => "`print(1)`, POST /run, warm imports",
            PlotPath::OneLinerNoWarm => "`print(1)`, POST /run, runner without warm imports",
        }
    }

    /// Whether it runs the plotting program (else [`ONE_LINER`]).
    pub fn plots(self) -> bool {
        !matches!(self, PlotPath::OneLinerWarm | PlotPath::OneLinerNoWarm)
    }

    /// Whether its run is followed by a refill with warm imports.
    fn refills_warm(self) -> bool {
        matches!(
            self,
            PlotPath::Run | PlotPath::ToolsCall | PlotPath::OneLinerWarm
        )
    }
}

/// Everything the figure measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FirstPlot {
    /// The program.
    pub script: &'static str,
    /// The package set's key (the runners' and the direct spawn's).
    pub package_set: String,
    /// The modules the warm runner's loaders import ahead.
    pub warm_imports: Vec<String>,
    /// Sandboxes of the runner with warm imports.
    pub pool_size: usize,
    /// Measured runs per path.
    pub rounds: usize,
    /// Unmeasured rounds before them.
    pub warmup: usize,
    /// Each run on a pool at rest, in [`PlotPath::RESTED`] order.
    pub rested: Vec<(PlotPath, Latency)>,
    /// Runs one after the other with no pause, in [`PlotPath::BACK_TO_BACK`] order.
    pub back_to_back: Vec<(PlotPath, Latency)>,
    /// From the answer of a run with warm imports to the pool at rest again (the
    /// refill made, its loader done importing, and [`pool_watch::QUIET`] of quiet observed).
    pub to_rest: Option<Latency>,
    /// Runs that went ahead because the pool was not at rest within [`REST_TIMEOUT`].
    pub not_at_rest: usize,
    /// Idle python sandboxes of both runners at rest.
    pub memory: PlotMemory,
}

/// The memory of idle python sandboxes, with warm imports and without.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlotMemory {
    /// The warm runner's python sandboxes (their loaders done importing).
    pub warm_imports: Vec<SandboxMemory>,
    /// The other runner's python sandboxes (an idle loader, nothing imported).
    pub no_warm_imports: Vec<SandboxMemory>,
}

/// What the runs need.
struct Paths<'a> {
    warm: Runner<'a>,
    cold: Runner<'a>,
    mcp: Peer<RoleClient>,
    direct: &'a Direct,
}

/// Starts a runner with warm imports, sandbox-mcp in front of it and a runner without
/// warm imports, measures, and stops all three whatever happened.
pub async fn measure(bins: &Binaries, token: &str, sizes: &Sizes) -> anyhow::Result<FirstPlot> {
    let direct = Direct::new()?;
    let measured = with_runners(bins, token, &direct, sizes).await;
    let removed = direct.remove();
    let measured = measured?;
    removed?;
    Ok(measured)
}

async fn with_runners(
    bins: &Binaries,
    token: &str,
    direct: &Direct,
    sizes: &Sizes,
) -> anyhow::Result<FirstPlot> {
    let warm = Service::runner(&bins.runner, token, sizes.pool_size).await?;
    let cold = Service::runner_with(&bins.runner, token, COLD_POOL, &["--warm-imports", ""]).await;
    let measured = match cold {
        Ok(cold) => {
            let measured = with_mcp(bins, token, &warm, &cold, direct, sizes).await;
            let stopped = cold
                .stop()
                .await
                .context("stopping the runner without warm imports");
            measured.and_then(|m| stopped.map(|()| m))
        }
        Err(e) => Err(e),
    };
    let stopped = warm
        .stop()
        .await
        .context("stopping the runner with warm imports");
    let measured = measured?;
    stopped?;
    Ok(measured)
}

async fn with_mcp(
    bins: &Binaries,
    token: &str,
    warm: &Service,
    cold: &Service,
    direct: &Direct,
    sizes: &Sizes,
) -> anyhow::Result<FirstPlot> {
    let mcp_token = crate::token()?;
    let mcp = Service::mcp(&bins.mcp, &mcp_token, &warm.url, token).await?;
    let measured = async {
        let warm_api = RunnerApi::new(&warm.url, token)?;
        let cold_api = RunnerApi::new(&cold.url, token)?;
        let (package_set, warm_imports) = check_runners(&warm_api, &cold_api).await?;
        let session = McpSession::connect(&mcp.url, &mcp_token).await?;
        let paths = Paths {
            warm: Runner {
                api: &warm_api,
                pid: warm.pid,
            },
            cold: Runner {
                api: &cold_api,
                pid: cold.pid,
            },
            mcp: session.peer(),
            direct,
        };
        let group = CpuGroup::join()?;
        let measured = measure_paths(&paths, sizes).await;
        let left = group.leave();
        let closed = session.close().await;
        let (rested, back_to_back, to_rest, not_at_rest, memory) = measured?;
        left?;
        closed?;
        anyhow::Ok(FirstPlot {
            script: SCRIPT,
            package_set,
            warm_imports,
            pool_size: sizes.pool_size,
            rounds: sizes.rounds,
            warmup: sizes.warmup,
            rested,
            back_to_back,
            to_rest,
            not_at_rest,
            memory,
        })
    }
    .await;
    let stopped = mcp.stop().await.context("stopping sandbox-mcp");
    let measured = measured?;
    stopped?;
    Ok(measured)
}

/// Both runners show the set the direct spawn uses; one has warm imports, the other
/// none. The set's key and the warm runner's warm imports.
async fn check_runners(
    warm: &RunnerApi,
    cold: &RunnerApi,
) -> anyhow::Result<(String, Vec<String>)> {
    let current = Path::new(PACKAGES_DIR).join("current");
    let link = std::fs::read_link(&current).with_context(|| {
        format!(
            "no package set at {}: build it first (sandbox-runner packages build)",
            current.display()
        )
    })?;
    let key = link
        .file_name()
        .and_then(|name| name.to_str())
        .with_context(|| format!("{} points at {}", current.display(), link.display()))?
        .to_owned();
    let packages = |health: Health| -> anyhow::Result<_> {
        let packages = health.packages.unwrap_or_default();
        ensure!(
            packages.key.as_deref() == Some(key.as_str()),
            "the runner shows the package set {:?}, not {key} ({})",
            packages.key,
            current.display()
        );
        Ok(packages.warm_imports)
    };
    let warm_imports = packages(warm.health().await?)?;
    ensure!(
        warm_imports.iter().any(|m| m.starts_with("pandas"))
            && warm_imports.iter().any(|m| m.starts_with("matplotlib")),
        "the runner's warm imports are {warm_imports:?}: pandas and matplotlib expected"
    );
    let none = packages(cold.health().await?)?;
    ensure!(
        none.is_empty(),
        "the runner started with --warm-imports \"\" has warm imports {none:?}"
    );
    Ok((key, warm_imports))
}

type Measured = (
    Vec<(PlotPath, Latency)>,
    Vec<(PlotPath, Latency)>,
    Option<Latency>,
    usize,
    PlotMemory,
);

/// The memory at rest, the rounds at rest, then the back-to-back series.
async fn measure_paths(paths: &Paths<'_>, sizes: &Sizes) -> anyhow::Result<Measured> {
    let mut not_at_rest = 0;
    eprintln!("bench: first plot, memory of idle python sandboxes");
    not_at_rest += usize::from(!at_rest(paths).await?.1);
    tokio::time::sleep(MEMORY_SETTLE).await;
    let memory = PlotMemory {
        warm_imports: python_sandboxes(paths.warm.pid)?,
        no_warm_imports: python_sandboxes(paths.cold.pid)?,
    };
    eprintln!("bench: first plot, direct spawn once for its font cache (not counted)");
    paths
        .direct
        .run()
        .await
        .context("the direct spawn's first run")?;

    eprintln!(
        "bench: first plot, {} rounds on a pool at rest (after {} warm-up)",
        sizes.rounds, sizes.warmup
    );
    let mut samples = vec![Vec::with_capacity(sizes.rounds); PlotPath::RESTED.len()];
    let mut to_rest = Vec::new();
    let mut previous: Option<PlotPath> = None;
    for round in 0..sizes.warmup + sizes.rounds {
        for (path, series) in PlotPath::RESTED.iter().zip(samples.iter_mut()) {
            let (waited, rested) = at_rest(paths).await?;
            not_at_rest += usize::from(!rested);
            if previous.is_some_and(PlotPath::refills_warm) && rested {
                to_rest.push(waited);
            }
            tokio::time::sleep(SETTLE).await;
            let took = run(paths, *path).await?;
            if round >= sizes.warmup {
                series.push(took);
            }
            previous = Some(*path);
        }
    }
    let rested = summarize(&PlotPath::RESTED, &samples)?;

    let mut samples = Vec::with_capacity(PlotPath::BACK_TO_BACK.len());
    for path in PlotPath::BACK_TO_BACK {
        eprintln!(
            "bench: first plot, {} back to back: {} runs",
            path.label(),
            sizes.rounds
        );
        not_at_rest += usize::from(!at_rest(paths).await?.1);
        tokio::time::sleep(SETTLE).await;
        let mut series = Vec::with_capacity(sizes.rounds);
        for _ in 0..sizes.rounds {
            series.push(run(paths, path).await?);
        }
        samples.push(series);
    }
    let back_to_back = summarize(&PlotPath::BACK_TO_BACK, &samples)?;
    if not_at_rest > 0 {
        eprintln!(
            "bench: first plot: the pool was not at rest within {REST_TIMEOUT:?} before \
             {not_at_rest} runs (they went ahead)"
        );
    }
    Ok((
        rested,
        back_to_back,
        stats::latency(&to_rest),
        not_at_rest,
        memory,
    ))
}

fn summarize(
    paths: &[PlotPath],
    samples: &[Vec<Duration>],
) -> anyhow::Result<Vec<(PlotPath, Latency)>> {
    paths
        .iter()
        .zip(samples)
        .map(|(path, series)| {
            stats::latency(series)
                .map(|l| (*path, l))
                .with_context(|| format!("no run of {} was measured", path.label()))
        })
        .collect()
}

/// Runs the program once on `path`, checks what came back, and returns how long it took.
async fn run(paths: &Paths<'_>, path: PlotPath) -> anyhow::Result<Duration> {
    let took = match path {
        PlotPath::Direct => within(paths.direct.run()).await,
        PlotPath::Run => within(run_on(paths.warm.api)).await,
        PlotPath::ToolsCall => within(tools_call(&paths.mcp)).await,
        PlotPath::RunNoWarmImports => within(run_on(paths.cold.api)).await,
        PlotPath::OneLinerWarm => within(one_liner(paths.warm.api)).await,
        PlotPath::OneLinerNoWarm => within(one_liner(paths.cold.api)).await,
    };
    took.with_context(|| format!("first plot, {}", path.label()))
}

/// How long `run` takes to succeed, within [`RUN_TIMEOUT`].
async fn within(run: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<Duration> {
    tokio::time::timeout(RUN_TIMEOUT, timed(run))
        .await
        .with_context(|| format!("the run took over {RUN_TIMEOUT:?}"))?
}

/// (b): `POST /run`; the answer must say exit 0, hold the description and one PNG.
async fn run_on(api: &RunnerApi) -> anyhow::Result<()> {
    let answer = api.run_code(&Lang::PYTHON, SCRIPT).await?;
    check_answer(&answer)
}

/// `POST /run` of [`ONE_LINER`]: it must print `1` and exit 0.
async fn one_liner(api: &RunnerApi) -> anyhow::Result<()> {
    let answer = api.run_code(&Lang::PYTHON, ONE_LINER).await?;
    ensure!(
        answer.exit_code == 0 && answer.stdout == "1\n" && answer.outputs.is_empty(),
        "unexpected answer {answer:?}"
    );
    Ok(())
}

/// (c): `tools/call run_python`; the result must say exit 0 and carry one PNG image.
async fn tools_call(mcp: &Peer<RoleClient>) -> anyhow::Result<()> {
    let result = call_tool(mcp, TOOL, SCRIPT).await?;
    check_result(&result)
}

/// The idle python sandboxes of the runner `runner_pid`.
fn python_sandboxes(runner_pid: u32) -> anyhow::Result<Vec<SandboxMemory>> {
    let mut sandboxes = memory::warm_sandboxes(runner_pid)?;
    sandboxes.retain(|s| s.kind == "python");
    ensure!(
        !sandboxes.is_empty(),
        "runner {runner_pid} holds no python sandbox"
    );
    Ok(sandboxes)
}

/// Waits until both runners' pools are at rest (see [`pool_watch::at_rest`]).
async fn at_rest(paths: &Paths<'_>) -> anyhow::Result<(Duration, bool)> {
    pool_watch::at_rest(&[&paths.warm, &paths.cold], REST_TIMEOUT).await
}
