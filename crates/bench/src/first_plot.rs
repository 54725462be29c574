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
//! Warm imports happen only while the pool is at rest (a sandbox made while requests
//! wait gets none, and a request arriving while a loader imports stops it early), so
//! every measured run waits for the pool to be at rest: full, and every process of
//! every sandbox asleep with its CPU time unchanged for [`pool_watch::QUIET`] (the refill's loader
//! has finished importing). A "back to back" series (no pause) shows what a busy pool
//! gives instead. Both runners are fresh (started for this figure), so that no sandbox
//! made during an earlier burst, without warm imports, waits in the pool.

use crate::clients::{call_tool, timed, McpSession, RunnerApi};
use crate::cpu_group::CpuGroup;
use crate::measure::SETTLE;
use crate::memory::{self, SandboxMemory};
use crate::pool_watch::{self, Runner};
use crate::services::{Binaries, Service};
use crate::stats::{self, Latency};
use anyhow::{ensure, Context};
use rmcp::model::CallToolResult;
use rmcp::service::Peer;
use rmcp::RoleClient;
use sandbox_protocol::api::{Health, RunResponse};
use sandbox_protocol::Lang;
use serde::Serialize;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// The program measured. In a sandbox its working folder is `/home/sandbox`, whose
/// `outputs/` the run hands back; the direct spawn runs it in a folder of its own with
/// an `outputs/` folder. `matplotlib.use("Agg")` makes it the same program on both
/// paths (in a sandbox, pyplot would otherwise pick the set's `sandbox_plots` backend
/// and hand back a `figure-1.png` as well).
pub const SCRIPT: &str = r#"import numpy as np
import pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

df = pd.DataFrame({"x": np.arange(100), "y": np.random.rand(100)})
print(df.describe())
df.plot(x="x", y="y")
plt.savefig("outputs/plot.png")
"#;
/// The program that shows what warm imports cost a run that does not use them.
pub const ONE_LINER: &str = "print(1)";
/// The one file every run must produce, in `outputs/`.
const PLOT: &str = "plot.png";
/// The first bytes of a PNG file, and the same in base64 (as the answers carry it).
const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";
const PNG_BASE64: &str = "iVBORw0KGgo";
/// What `df.describe()` prints among its rows.
const DESCRIBED: [&str; 2] = ["count", "mean"];
/// The interpreter the sandboxes run, spawned directly.
const PYTHON: &str = "/usr/bin/python3";
/// The runner's package store (`RUNNER_PACKAGES_DIR`'s default,
/// `sandbox_packages::DEFAULT_STORE`: the bench starts its runners with a clean
/// environment).
const PACKAGES_DIR: &str = "/var/lib/sandbox-runner/packages";
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

fn check_answer(answer: &RunResponse) -> anyhow::Result<()> {
    ensure!(
        answer.exit_code == 0 && !answer.timed_out && !answer.oom_killed,
        "exit code {}, timed out {}, OOM-killed {}; stderr: {}",
        answer.exit_code,
        answer.timed_out,
        answer.oom_killed,
        tail(&answer.stderr)
    );
    check_described(&answer.stdout)?;
    let files: Vec<(&str, &str)> = answer
        .outputs
        .iter()
        .map(|f| (f.path.as_str(), f.mime_type.as_str()))
        .collect();
    ensure!(
        files == [(PLOT, "image/png")],
        "outputs {files:?}: one {PLOT} (image/png) expected"
    );
    let data = answer.outputs.first().and_then(|f| f.data.as_deref());
    ensure!(
        data.is_some_and(|d| d.starts_with(PNG_BASE64)),
        "{PLOT} came back without PNG data"
    );
    Ok(())
}

/// (c): `tools/call run_python`; the result must say exit 0 and carry one PNG image.
async fn tools_call(mcp: &Peer<RoleClient>) -> anyhow::Result<()> {
    let result = call_tool(mcp, TOOL, SCRIPT).await?;
    check_result(&result)
}

fn check_result(result: &CallToolResult) -> anyhow::Result<()> {
    let structured = result
        .structured_content
        .as_ref()
        .context("the result has no structuredContent")?;
    ensure!(
        result.is_error != Some(true) && structured["exitCode"] == 0,
        "unexpected result {structured}"
    );
    check_described(structured["stdout"].as_str().unwrap_or_default())?;
    let outputs = &structured["outputs"];
    ensure!(
        outputs.as_array().map(Vec::len) == Some(1)
            && outputs[0]["path"] == PLOT
            && outputs[0]["mimeType"] == "image/png",
        "structuredContent.outputs is {outputs}: one {PLOT} (image/png) expected"
    );
    let images: Vec<_> = result.content.iter().filter_map(|c| c.as_image()).collect();
    ensure!(
        images.len() == 1,
        "{} image contents, 1 expected",
        images.len()
    );
    ensure!(
        images
            .iter()
            .all(|i| i.mime_type == "image/png" && i.data.starts_with(PNG_BASE64)),
        "the image content is not a PNG"
    );
    Ok(())
}

fn check_described(stdout: &str) -> anyhow::Result<()> {
    ensure!(
        DESCRIBED.iter().all(|word| stdout.contains(word)),
        "stdout lacks df.describe()'s rows: {}",
        tail(stdout)
    );
    Ok(())
}

/// The end of a program's output, for an error message.
fn tail(text: &str) -> &str {
    let start = text.len().saturating_sub(2000);
    let start = (start..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    &text[start..]
}

/// The direct spawn's folders: a home (where matplotlib keeps its font cache) and a
/// working folder holding `script.py` and `outputs/`.
struct Direct {
    root: PathBuf,
    home: PathBuf,
    work: PathBuf,
}

impl Direct {
    fn new() -> anyhow::Result<Direct> {
        let root = std::env::temp_dir().join(format!("bench-first-plot-{}", std::process::id()));
        let home = root.join("home");
        let work = root.join("work");
        for dir in [&home, &work.join("outputs")] {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let script = work.join("script.py");
        std::fs::write(&script, SCRIPT).with_context(|| format!("writing {}", script.display()))?;
        Ok(Direct { root, home, work })
    }

    /// (a): `/usr/bin/python3 script.py` in the working folder, with the agent's clean
    /// environment plus the set on `PYTHONPATH`, `MPLBACKEND=Agg` and the bench's home.
    async fn run(&self) -> anyhow::Result<()> {
        let plot = self.work.join("outputs").join(PLOT);
        match std::fs::remove_file(&plot) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", plot.display())),
        }
        let python = Path::new(PACKAGES_DIR).join("current").join("python");
        let output = Command::new(PYTHON)
            .arg("script.py")
            .current_dir(&self.work)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .env("TMPDIR", "/tmp")
            .env("PYTHONPATH", python)
            .env("MPLBACKEND", "Agg")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| format!("spawning {PYTHON}"))?;
        ensure!(
            output.status.success(),
            "exited with {}; stderr: {}",
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr))
        );
        check_described(&String::from_utf8_lossy(&output.stdout))?;
        let png = std::fs::read(&plot).with_context(|| format!("reading {}", plot.display()))?;
        ensure!(
            png.starts_with(PNG_MAGIC),
            "{} is not a PNG",
            plot.display()
        );
        Ok(())
    }

    fn remove(&self) -> anyhow::Result<()> {
        std::fs::remove_dir_all(&self.root)
            .with_context(|| format!("removing {}", self.root.display()))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_protocol::api::OutputFile;

    fn answer(outputs: Vec<OutputFile>) -> RunResponse {
        serde_json::from_value(serde_json::json!({
            "stdout": "       x\ncount 100\nmean 49.5\n",
            "stderr": "",
            "exitCode": 0,
            "durationMs": 1,
            "timedOut": false,
            "oomKilled": false,
            "stdoutTruncated": false,
            "stderrTruncated": false,
            "outputs": outputs,
        }))
        .unwrap()
    }

    fn png(path: &str) -> OutputFile {
        OutputFile {
            path: path.into(),
            size: 8,
            mime_type: "image/png".into(),
            data: Some("iVBORw0KGgo=".into()),
        }
    }

    #[test]
    fn an_answer_needs_exactly_the_plot() {
        assert!(check_answer(&answer(vec![png(PLOT)])).is_ok());
        assert!(check_answer(&answer(vec![])).is_err());
        assert!(check_answer(&answer(vec![png(PLOT), png("figure-1.png")])).is_err());
        let mut no_data = png(PLOT);
        no_data.data = None;
        assert!(check_answer(&answer(vec![no_data])).is_err());
        let mut failed = answer(vec![png(PLOT)]);
        failed.exit_code = 1;
        assert!(check_answer(&failed).is_err());
    }

    #[test]
    fn the_script_saves_where_the_checks_look() {
        assert!(SCRIPT.contains(&format!("outputs/{PLOT}")));
        assert!(SCRIPT.contains("describe()"));
        assert!(PNG_BASE64.len() <= 12);
    }

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        let text = "é".repeat(1500);
        assert!(tail(&text).len() <= 2001);
        assert_eq!(tail("short"), "short");
    }
}
