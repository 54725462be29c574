//! `bench`: the benchmark harness of sandbox-mcp (issue 5).
//!
//! Starts its own `sandbox-runner serve` and `sandbox-mcp serve` on loopback and
//! measures, side by side for bash, python and node: (a) spawning the interpreter
//! directly with the same one-liner, (b) `POST /run`, (c) `tools/call` over
//! Streamable HTTP on one initialized session; then, against the same runner, its
//! sessions (issue 12, see `sessions`); then, on runners of its own, the time to a
//! first pandas + matplotlib plot (issue 13, see `first_plot`); then a hello world in
//! every language the runner offers, built in and Debian's, next to the direct command on
//! the host (issues 14 and 34, see `languages`); then calls/s through one sandbox-mcp in front of 1, 2 and 3
//! runners, and a runner killed under load (issue 15, see `scale_out`); then the CPU
//! one run costs, counted by cgroups, next to a direct spawn (see `cpu_cost`); then how long
//! a program's line takes to reach a client that streams its run (issue 30, see
//! `live_output`); then what a session's pause, its wake and a fork of 8 cost (issue 31,
//! see `pause`), then a task done as one MCP tool call per page against one run whose
//! program calls the tools, and the cost of one call from code (issue 32, see
//! `tools_from_code`), then a small HTTPS request through the runner's proxy next to the
//! same request from the host (issue 33, see `egress`), and with `--only vm-pause` the
//! pause and wake on the vm backend under TCG (see `vm_pause`). `--only` picks sections.
//! It writes `bench.json` and `bench.md` to `--out`. It is not a load generator for
//! remote hosts: all traffic stays on this machine (loopback, and the egress section's
//! HTTPS host in a network namespace of its own) and every phase is bounded in count and
//! time.

mod cases;
mod clients;
mod cpu_cost;
mod cpu_group;
mod egress;
mod first_plot;
mod languages;
mod live_output;
mod measure;
mod memory;
mod pause;
mod plan;
mod pool_watch;
mod processes;
mod procfs;
mod report;
mod scale_out;
mod services;
mod session_api;
mod sessions;
mod stats;
mod tools_from_code;
mod vm_pause;

use anyhow::Context;
use cases::CASES;
use clap::Parser;
use clients::{Clients, McpSession, RunnerApi};
use measure::REFILL_TIMEOUT;
pub use plan::Section;
use plan::{Plan, LEVELS};
use report::{Report, Setup};
use services::{Binaries, Service};
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a full pool is left alone before its sandboxes are measured.
const SETTLE: Duration = Duration::from_millis(500);

/// Command-line settings.
#[derive(Debug, Parser)]
#[command(
    about = "Latency, throughput, memory and cold start of sandbox-runner and sandbox-mcp next to direct interpreter spawns"
)]
struct Args {
    /// Measured sequential runs per language and path.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    iterations: u32,
    /// Runs counted per throughput figure (per language, path and concurrency), after
    /// as many uncounted ones as the pool has sandboxes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(8..=10_000))]
    throughput_runs: u32,
    /// Sandboxes of the runner under test (it must fit the highest concurrency).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(8..=64))]
    pool_size: u32,
    /// Where bench.json and bench.md are written.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Folder of sandbox-runner and sandbox-mcp (default: beside this executable).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Measured runs per path of the time-to-first-plot figure (and per back-to-back
    /// series).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    plot_rounds: u32,
    /// Measured runs per language and path of the hello-world figure (`languages`), at
    /// most: a language's rounds stop after the one past 60 s.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    lang_rounds: u32,
    /// Counted calls per program and number of runners of the scale-out figure.
    #[arg(long, default_value_t = 240, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    scale_calls: u32,
    /// Counted runs per language and path of the CPU-per-run figure.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(8..=100_000))]
    cpu_runs: u32,
    /// Runs per path of the live-output figure (each prints 50 lines, 100 ms apart).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    live_runs: u32,
    /// Measured pause-and-wake rounds per session size (`pause`).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pause_rounds: u32,
    /// Measured rounds of the fork of 8 (`pause`).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    fork_rounds: u32,
    /// Measured pause-and-wake rounds on the vm backend (`vm-pause`).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    vm_pause_rounds: u32,
    /// Measured rounds of each figure of the tools section (`tools`): the task both
    /// ways, and the runs with and without calls (each figure stops after its round
    /// past 2 minutes, once it has 3).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    tools_rounds: u32,
    /// Measured HTTPS requests per side of the egress section (through the proxy from a
    /// sandbox, and from the host), in batches of 20.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    egress_requests: u32,
    /// A Python with the `mcp` package (v2 API), which serves the tools section's
    /// upstream (`tests/mcp-clients/run.sh` makes the default); missing: the section is
    /// skipped, saying so.
    #[arg(long, default_value = "tests/mcp-clients/.venv/bin/python")]
    upstream_python: PathBuf,
    /// The VM image `vm-pause` boots; absent: `sandbox-runner image build --out
    /// OUT/vm-images` makes one (a cache).
    #[arg(long)]
    vm_image: Option<PathBuf>,
    /// Only these sections (comma-separated; all when absent).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Section>,
    /// A few runs of everything, for CI: fails on any failed run, asserts no timing.
    #[arg(long)]
    smoke: bool,
    /// `--templates` for every runner the bench starts (the CPU-per-run section measures
    /// both anyway); absent: the runner's default (templates).
    #[arg(long)]
    runner_templates: Option<bool>,
    /// `--warm-imports` for every runner the bench starts that does not set its own (the
    /// CPU-per-run runners and the time to first plot's cold one do; its warm one does
    /// not: use with `--only paths` and the like); absent: the runner's default (numpy,
    /// pandas, matplotlib.pyplot); empty: none.
    #[arg(long)]
    runner_warm_imports: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let plan = Plan::from(&args);
    services::set_runner_flags(services::RunnerFlags {
        templates: args.runner_templates,
        warm_imports: args.runner_warm_imports.clone(),
    });
    let bins = Binaries::find(args.bin_dir.as_deref())?;
    let mut report = Report {
        setup: setup(&args, &plan),
        latency: Vec::new(),
        throughput: Vec::new(),
        sandboxes: Vec::new(),
        idle_interpreters: Vec::new(),
        cold_start: Vec::new(),
        sessions: None,
        first_plot: None,
        languages: None,
        scale_out: None,
        cpu_per_run: None,
        live_output: None,
        pause: None,
        tools: None,
        egress: None,
        vm_pause: None,
        targets: Vec::new(),
    };
    let runner_token = token()?;
    if plan.has(Section::ColdStart) {
        for case in &CASES {
            eprintln!("bench: cold start, {}", case.lang.as_str());
            let cold = measure::cold_start(&bins, &runner_token, case, plan.pool_size).await?;
            report.cold_start.push(cold);
        }
    }
    if plan.has(Section::Paths) || plan.has(Section::Sessions) {
        against_services(&bins, &runner_token, &plan, &mut report).await?;
    }
    if plan.has(Section::FirstPlot) {
        let figure = first_plot::measure(&bins, &runner_token, &plan.plot).await?;
        report.first_plot = Some(figure);
    }
    if plan.has(Section::Languages) {
        let figure = languages::measure(&bins, &runner_token, &plan.languages).await?;
        report.languages = Some(figure);
    }
    if plan.has(Section::ScaleOut) {
        let figure = scale_out::measure(&bins, &runner_token, &plan.scale_out).await?;
        report.scale_out = Some(figure);
    }
    if plan.has(Section::CpuPerRun) {
        report.cpu_per_run = cpu_cost::measure(&bins, &runner_token, &plan.cpu).await?;
    }
    if plan.has(Section::LiveOutput) {
        let figure = live_output::measure(&bins, &runner_token, &plan.live).await?;
        report.live_output = Some(figure);
    }
    if plan.has(Section::Pause) {
        report.pause = Some(pause::measure(&bins, &runner_token, &plan.pause).await?);
    }
    if plan.has(Section::Tools) {
        report.tools = Some(tools_from_code::measure(&bins, &runner_token, &plan.tools).await?);
    }
    if plan.has(Section::Egress) {
        report.egress = Some(egress::measure(&bins, &runner_token, &plan.egress).await?);
    }
    if plan.has(Section::VmPause) {
        let figure = vm_pause::measure(&bins, &runner_token, &plan.vm_pause).await?;
        report.vm_pause = Some(figure);
    }
    if plan.has(Section::Paths) {
        report.check_targets();
    }
    write(&args.out, &report)
}

/// Starts the runner and the MCP server, measures, and stops both whatever happened.
async fn against_services(
    bins: &Binaries,
    runner_token: &str,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let runner = Service::runner(&bins.runner, runner_token, plan.pool_size).await?;
    let mcp_token = token()?;
    let mcp = match Service::mcp(&bins.mcp, &mcp_token, &runner.url, runner_token).await {
        Ok(mcp) => mcp,
        Err(e) => {
            let _ = runner.stop().await;
            return Err(e);
        }
    };
    let measured = match cpu_group::CpuGroup::join() {
        Ok(group) => {
            report.setup.direct_cgroup = Some(group.dir().display().to_string());
            let measured =
                with_session(&runner, &mcp, runner_token, &mcp_token, plan, report).await;
            measured.and(group.leave())
        }
        Err(e) => Err(e),
    };
    let mcp_stopped = mcp.stop().await.context("stopping sandbox-mcp");
    let runner_stopped = runner.stop().await.context("stopping sandbox-runner");
    measured?;
    mcp_stopped?;
    runner_stopped
}

/// The memory of the warm pool, the paths' figures over one MCP session, then the
/// runner's own sessions (each when its section is asked for).
async fn with_session(
    runner: &Service,
    mcp: &Service,
    runner_token: &str,
    mcp_token: &str,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let api = RunnerApi::new(&runner.url, runner_token)?;
    if plan.has(Section::Paths) {
        paths(runner, mcp, &api, mcp_token, plan, report).await?;
    }
    if plan.has(Section::Sessions) {
        let figures = sessions::measure(&api, runner.pid, &plan.sessions()).await?;
        report.sessions = Some(figures);
    }
    Ok(())
}

/// The memory of the warm pool, then the paths' figures over one MCP session.
async fn paths(
    runner: &Service,
    mcp: &Service,
    api: &RunnerApi,
    mcp_token: &str,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    api.wait_until_full(REFILL_TIMEOUT).await?;
    tokio::time::sleep(SETTLE).await;
    eprintln!("bench: memory of warm sandboxes");
    report.sandboxes = memory::warm_sandboxes(runner.pid)?;
    for (case, kind) in CASES.iter().zip(["bash", "python", "node"]) {
        report
            .idle_interpreters
            .push(memory::idle_interpreter(case, kind).await?);
    }
    let session = McpSession::connect(&mcp.url, mcp_token).await?;
    let clients = Clients {
        runner: api.clone(),
        mcp: session.peer(),
    };
    let measured = measure_all(&clients, plan, report).await;
    let closed = session.close().await;
    measured?;
    closed
}

async fn measure_all(clients: &Clients, plan: &Plan, report: &mut Report) -> anyhow::Result<()> {
    for case in &CASES {
        eprintln!("bench: sequential latency, {}", case.lang.as_str());
        let latency = measure::sequential(clients, case, plan.warmup, plan.iterations).await?;
        report.latency.push(latency);
    }
    for case in &CASES {
        for concurrency in LEVELS {
            eprintln!(
                "bench: throughput, {} at concurrency {concurrency}",
                case.lang.as_str()
            );
            let rate = measure::throughput(
                clients,
                case,
                concurrency,
                plan.pool_size,
                plan.throughput_runs,
            )
            .await?;
            report.throughput.push(rate);
        }
    }
    Ok(())
}

fn setup(args: &Args, plan: &Plan) -> Setup {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| "unknown OS".into());
    Setup {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        os,
        started_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        smoke: args.smoke,
        iterations: plan.iterations,
        warmup: plan.warmup,
        throughput_runs: plan.throughput_runs,
        pool_size: plan.pool_size,
        plot_rounds: plan.plot.rounds,
        lang_rounds: plan.languages.rounds,
        sections: plan.sections.clone(),
        runner_templates: args.runner_templates,
        runner_warm_imports: args.runner_warm_imports.clone(),
        direct_cgroup: None,
    }
}

/// A random bearer token (the services are on loopback, but they run code).
pub(crate) fn token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn write(out: &PathBuf, report: &Report) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let json = serde_json::to_string_pretty(report).context("encoding the report")?;
    let json_path = out.join("bench.json");
    std::fs::write(&json_path, json).with_context(|| format!("writing {}", json_path.display()))?;
    let md = report.markdown();
    let md_path = out.join("bench.md");
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    println!("{md}");
    eprintln!(
        "bench: wrote {} and {}",
        json_path.display(),
        md_path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_has_a_tool() {
        for case in CASES {
            assert!(case.tool.starts_with("run_"), "{case:?}");
        }
    }
}
