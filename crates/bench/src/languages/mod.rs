//! Languages (issues 14 and 34): a hello world in every language the runner offers
//! (built in and Debian's toolchains), run three ways in one run: (a) the direct command
//! on the host (`bash main.sh`, `gcc ... && ./main`, `go run main.go` with a warm build
//! cache, `java Main.java`, TypeScript transpiled by the package set's compiler in a
//! fresh node; a row of Debian's toolchains as the row runs it, see [`hellos`]), (b)
//! `POST /run`, (c) `tools/call` of `run_<name>` through sandbox-mcp, or of `run_code`
//! for a language without a tool of its own.
//!
//! Every sandboxed run meets a pool prepared for its language: the warm-up round's
//! runs make the pool prepare its refills for the language (a request's replacement is
//! prepared for the request's language), and before every run the pool is at rest (full,
//! every sandbox process asleep: see [`pool_watch::at_rest`]), so the refill's loader
//! (a JVM with javac, a node with the TypeScript compiler) has started. A run that met
//! no sandbox prepared for its language is counted. A language's measured rounds stop
//! after the one that passes [`Sizes::budget`] (the slow compilers get a few). The
//! runner and sandbox-mcp are fresh, started for this figure.

mod direct;
mod hellos;

use crate::clients::{call_run_code, call_tool, timed, McpSession, RunnerApi, Via};
use crate::cpu_group::CpuGroup;
use crate::measure::SETTLE;
use crate::pool_watch::{self, Runner};
use crate::services::{Binaries, Service};
use crate::stats::{self, Latency};
use anyhow::{bail, ensure, Context};
use direct::Direct;
pub use hellos::{Hello, EXPECTED};
use rmcp::model::CallToolResult;
use rmcp::service::Peer;
use rmcp::RoleClient;
use sandbox_protocol::language::LanguageInfo;
use sandbox_protocol::Lang;
use serde::Serialize;
use std::future::Future;
use std::time::{Duration, Instant};

/// A sandbox's memory, MiB, when the runner publishes none (its default).
const DEFAULT_MEMORY_MB: u64 = 512;
/// The longest one run may take on any path (a compile included).
const RUN_TIMEOUT: Duration = Duration::from_secs(180);
/// How long the pool may take to come to rest; past it the run goes ahead and is
/// counted in [`LanguageRow::not_at_rest`] (smoke mode must not fail on timing).
const REST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long sandbox-mcp may take to list a run tool for every language measured (it
/// reads the runner's table at start and every 10 s).
const TOOLS_TIMEOUT: Duration = Duration::from_secs(30);

/// How many runs the figure takes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Measured runs per language and path, at most.
    pub rounds: usize,
    /// Unmeasured rounds first (at least one: it prepares the pool for the language
    /// and fills the direct command's caches).
    pub warmup: usize,
    /// Sandboxes of the runner.
    pub pool_size: usize,
    /// A language's measured rounds stop after the one that passes this (counted from
    /// its first measured round): the slow compilers get a few.
    pub budget: Duration,
    /// Smoke mode: a language without a warm loader gets no warm-up round, and of
    /// Debian's rows only [`SMOKE_SAMPLE`] is measured (never a slow compiler: a row
    /// that gives its compiler more than the default time); the others are named in
    /// [`LanguageFigures::skipped`].
    pub quick: bool,
}

/// Everything the figure measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LanguageFigures {
    /// Measured runs per language and path, at most.
    pub rounds: usize,
    /// Unmeasured rounds before them.
    pub warmup: usize,
    /// Smoke mode: warm-up rounds only for the languages with a warm loader.
    pub quick: bool,
    /// Sandboxes of the runner.
    pub pool_size: usize,
    /// A language's time budget for its measured rounds, s.
    pub budget_s: u64,
    /// One row per language measured, in the runner's order.
    pub rows: Vec<LanguageRow>,
    /// Languages the bench has a hello world for that the runner does not offer.
    pub not_offered: Vec<String>,
    /// Languages the runner offers that the bench has no hello world for.
    pub unknown: Vec<String>,
    /// Offered languages left out in smoke mode (Debian's rows but [`SMOKE_SAMPLE`]).
    pub skipped: Vec<String>,
    /// How long the figure took, s (runner and sandbox-mcp start included).
    pub took_s: f64,
}

/// One language's figures.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LanguageRow {
    /// The language.
    pub name: String,
    /// The toolchain's version, as the runner reports it.
    pub version: String,
    /// (a), as a command line.
    pub direct: String,
    /// How the runner compiles and runs it (its `/health`).
    pub sandboxed: String,
    /// The MCP tool of (c).
    pub tool: String,
    /// Whether the runner starts its runtime ahead (a loader).
    pub warm: bool,
    /// Measured rounds (fewer than [`LanguageFigures::rounds`] when the budget ran out).
    pub rounds: usize,
    /// (a), (b) and (c), in [`Via::ALL`] order.
    pub paths: Vec<(Via, Latency)>,
    /// Measured runs that went ahead on a pool not at rest within [`REST_TIMEOUT`].
    pub not_at_rest: usize,
    /// Measured sandboxed runs before which the pool held no sandbox prepared for the
    /// language (its loader running, or none for a language without one).
    pub unprepared: usize,
}

/// What the runs need.
struct Paths<'a> {
    runner: Runner<'a>,
    mcp: Peer<RoleClient>,
    direct: &'a Direct,
}

/// Starts a runner and sandbox-mcp in front of it, measures every language both the
/// runner and the bench know, and stops both whatever happened.
pub async fn measure(
    bins: &Binaries,
    token: &str,
    sizes: &Sizes,
) -> anyhow::Result<LanguageFigures> {
    let started = Instant::now();
    let runner = Service::runner(&bins.runner, token, sizes.pool_size).await?;
    let measured = with_runner(bins, token, &runner, sizes).await;
    let stopped = runner.stop().await.context("stopping sandbox-runner");
    let mut figures = measured?;
    stopped?;
    figures.took_s = started.elapsed().as_secs_f64();
    Ok(figures)
}

/// The runner's languages and limits, the direct commands' folders, then sandbox-mcp.
async fn with_runner(
    bins: &Binaries,
    token: &str,
    runner: &Service,
    sizes: &Sizes,
) -> anyhow::Result<LanguageFigures> {
    let api = RunnerApi::new(&runner.url, token)?;
    let health = api.health().await?;
    let offered = health
        .languages
        .context("the runner's /health lists no languages")?;
    let memory_mb = health.limits.map_or(DEFAULT_MEMORY_MB, |l| l.memory_mb);
    let hellos = hellos::hellos(memory_mb)?;
    let direct = Direct::new(&hellos)?;
    let offer = Offer {
        api: &api,
        offered: &offered,
        hellos: &hellos,
    };
    let measured = with_mcp(bins, token, runner, &offer, &direct, sizes).await;
    let removed = direct.remove();
    let measured = measured?;
    removed?;
    Ok(measured)
}

/// What the runner offers and what the bench knows.
struct Offer<'a> {
    api: &'a RunnerApi,
    offered: &'a [LanguageInfo],
    hellos: &'a [Hello],
}

async fn with_mcp(
    bins: &Binaries,
    token: &str,
    runner: &Service,
    offer: &Offer<'_>,
    direct: &Direct,
    sizes: &Sizes,
) -> anyhow::Result<LanguageFigures> {
    let mcp_token = crate::token()?;
    let mcp = Service::mcp(&bins.mcp, &mcp_token, &runner.url, token).await?;
    let measured = async {
        let mut figures = pair_up(offer, sizes);
        let session = McpSession::connect(&mcp.url, &mcp_token).await?;
        let paths = Paths {
            runner: Runner {
                api: offer.api,
                pid: runner.pid,
            },
            mcp: session.peer(),
            direct,
        };
        let measured = measure_offered(&paths, offer, sizes, &mut figures).await;
        let closed = session.close().await;
        measured?;
        closed?;
        anyhow::Ok(figures)
    }
    .await;
    let stopped = mcp.stop().await.context("stopping sandbox-mcp");
    let measured = measured?;
    stopped?;
    Ok(measured)
}

/// The rows of Debian's toolchains smoke mode measures, one of each way a row runs (a
/// resident interpreter's loader, a JVM's loader, a compiler, a `sh -c` compile, an
/// interpreter that starts in milliseconds): the bench's paths are what smoke mode
/// checks, and every language is run by the runner's and the MCP clients' tests.
pub const SMOKE_SAMPLE: [&str; 5] = ["ruby", "clojure", "fortran", "ocaml", "sql"];

/// Whether smoke mode leaves `hello` out.
fn left_out_in_smoke(hello: &Hello) -> bool {
    hello.slow_compiler || (!hello.own_tool && !SMOKE_SAMPLE.contains(&hello.name.as_str()))
}

/// The figures' frame: which languages are measured, which are left out and why.
fn pair_up(offer: &Offer<'_>, sizes: &Sizes) -> LanguageFigures {
    let (not_offered, unknown) = hellos::unmatched(offer.hellos, offer.offered);
    LanguageFigures {
        rounds: sizes.rounds,
        warmup: sizes.warmup,
        quick: sizes.quick,
        pool_size: sizes.pool_size,
        budget_s: sizes.budget.as_secs(),
        rows: Vec::new(),
        not_offered,
        unknown,
        skipped: both_know(offer)
            .into_iter()
            .filter(|(hello, _)| sizes.quick && left_out_in_smoke(hello))
            .map(|(hello, _)| hello.name.clone())
            .collect(),
        took_s: 0.0,
    }
}

/// The languages both know, in the runner's order (the slow compilers among them too).
fn both_know<'a>(offer: &Offer<'a>) -> Vec<(&'a Hello, &'a LanguageInfo)> {
    offer
        .offered
        .iter()
        .filter_map(|info| {
            let hello = offer.hellos.iter().find(|h| h.name == info.name.as_str())?;
            Some((hello, info))
        })
        .collect()
}

/// Each language both know (but those skipped), in the runner's order, in the bench's
/// CPU group.
async fn measure_offered(
    paths: &Paths<'_>,
    offer: &Offer<'_>,
    sizes: &Sizes,
    figures: &mut LanguageFigures,
) -> anyhow::Result<()> {
    let measured: Vec<(&Hello, &LanguageInfo)> = both_know(offer)
        .into_iter()
        .filter(|(hello, _)| !figures.skipped.contains(&hello.name))
        .collect();
    let mut tools: Vec<String> = measured.iter().map(|(hello, _)| hello.tool()).collect();
    tools.dedup();
    wait_for_tools(&paths.mcp, &tools).await?;
    let group = CpuGroup::join()?;
    let mut rows = Vec::new();
    for (hello, info) in measured {
        match measure_language(paths, hello, info, sizes).await {
            Ok(row) => rows.push(row),
            Err(e) => {
                let _ = group.leave();
                return Err(e);
            }
        }
    }
    figures.rows = rows;
    group.leave()
}

/// Waits until sandbox-mcp lists every tool of `tools`.
async fn wait_for_tools(mcp: &Peer<RoleClient>, tools: &[String]) -> anyhow::Result<()> {
    let deadline = Instant::now() + TOOLS_TIMEOUT;
    loop {
        let listed = mcp.list_all_tools().await.context("tools/list")?;
        let missing: Vec<&String> = tools
            .iter()
            .filter(|tool| !listed.iter().any(|t| t.name == tool.as_str()))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("sandbox-mcp does not list {missing:?} after {TOOLS_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The warm-up rounds a language gets: none in smoke mode for a language without a
/// loader (nothing to prepare).
fn warmup_of(info: &LanguageInfo, sizes: &Sizes) -> usize {
    if sizes.quick && !info.warm {
        0
    } else {
        sizes.warmup
    }
}

/// Warm-up rounds, then up to `rounds` measured rounds of (a), (b), (c), each run on a
/// pool at rest, stopping after the round that passes the budget.
async fn measure_language(
    paths: &Paths<'_>,
    hello: &Hello,
    info: &LanguageInfo,
    sizes: &Sizes,
) -> anyhow::Result<LanguageRow> {
    let warmup = warmup_of(info, sizes);
    eprintln!(
        "bench: languages, {}: up to {} rounds in {:?} (after {warmup} warm-up)",
        hello.name, sizes.rounds, sizes.budget
    );
    let lang = Lang::new(&hello.name).with_context(|| format!("language {}", hello.name))?;
    let prepared = info.warm.then_some(hello.name.as_str());
    let mut samples = vec![Vec::with_capacity(sizes.rounds); Via::ALL.len()];
    let (mut not_at_rest, mut unprepared, mut rounds) = (0, 0, 0);
    let mut measured_since = None;
    for round in 0..warmup + sizes.rounds {
        let counted = round >= warmup;
        if counted {
            let since = *measured_since.get_or_insert_with(Instant::now);
            if rounds > 0 && since.elapsed() > sizes.budget {
                break;
            }
        }
        for (via, series) in Via::ALL.iter().zip(samples.iter_mut()) {
            let (_, rested) = pool_watch::at_rest(&[&paths.runner], REST_TIMEOUT).await?;
            if counted && *via != Via::Direct {
                let found = pool_watch::preparations(paths.runner.pid)?;
                unprepared += usize::from(!found.contains(&prepared));
            }
            not_at_rest += usize::from(counted && !rested);
            tokio::time::sleep(SETTLE).await;
            let took = run(paths, *via, hello, &lang)
                .await
                .with_context(|| format!("{} of the {} hello world", via.label(), hello.name))?;
            if counted {
                series.push(took);
            }
        }
        rounds += usize::from(counted);
    }
    Ok(LanguageRow {
        name: hello.name.clone(),
        version: info.version.clone(),
        direct: hello.direct_line(),
        sandboxed: sandboxed_line(info),
        tool: hello.tool(),
        warm: info.warm,
        rounds,
        paths: summarize(&samples)?,
        not_at_rest,
        unprepared,
    })
}

fn summarize(samples: &[Vec<Duration>]) -> anyhow::Result<Vec<(Via, Latency)>> {
    Via::ALL
        .iter()
        .zip(samples)
        .map(|(via, series)| {
            stats::latency(series)
                .map(|l| (*via, l))
                .context("no run was measured")
        })
        .collect()
}

/// How the runner compiles and runs a language, as its `/health` says.
fn sandboxed_line(info: &LanguageInfo) -> String {
    match &info.compile {
        Some(compile) => format!("{compile} && {}", info.run),
        None => info.run.clone(),
    }
}

/// Runs the hello world once on `via`, checks its output, and returns how long it took.
async fn run(paths: &Paths<'_>, via: Via, hello: &Hello, lang: &Lang) -> anyhow::Result<Duration> {
    match via {
        Via::Direct => within(paths.direct.run(hello, EXPECTED)).await,
        Via::Run => within(post_run(paths.runner.api, lang, &hello.code)).await,
        Via::ToolsCall => within(tools_call(&paths.mcp, hello)).await,
    }
}

/// How long `run` takes to succeed, within [`RUN_TIMEOUT`].
async fn within(run: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<Duration> {
    tokio::time::timeout(RUN_TIMEOUT, timed(run))
        .await
        .with_context(|| format!("the run took over {RUN_TIMEOUT:?}"))?
}

/// (b): `POST /run`; it must have compiled, printed [`EXPECTED`] and exited 0.
async fn post_run(api: &RunnerApi, lang: &Lang, code: &str) -> anyhow::Result<()> {
    let answer = api.run_code(lang, code).await?;
    ensure!(
        answer.stdout == EXPECTED && answer.exit_code == 0 && !answer.compile_error,
        "unexpected answer {answer:?}"
    );
    Ok(())
}

/// (c): `tools/call` of the language's tool; the same checks on `structuredContent`.
async fn tools_call(mcp: &Peer<RoleClient>, hello: &Hello) -> anyhow::Result<()> {
    let result = if hello.own_tool {
        call_tool(mcp, &hello.tool(), &hello.code).await?
    } else {
        call_run_code(mcp, &hello.name, &hello.code).await?
    };
    check_result(&result)
}

fn check_result(result: &CallToolResult) -> anyhow::Result<()> {
    let structured = result
        .structured_content
        .as_ref()
        .context("the result has no structuredContent")?;
    ensure!(
        result.is_error != Some(true)
            && structured["stdout"] == EXPECTED
            && structured["exitCode"] == 0
            && structured["compileError"] != true,
        "unexpected result {structured}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &'static str, compile: Option<&str>, run: &str) -> LanguageInfo {
        LanguageInfo {
            name: Lang::new(name).unwrap(),
            version: "1".into(),
            file: "main".into(),
            compile: compile.map(str::to_owned),
            run: run.into(),
            compile_timeout_ms: 0,
            warm: false,
            keeps_state: false,
            memory_mb: None,
        }
    }

    fn sizes(quick: bool) -> Sizes {
        Sizes {
            rounds: 2,
            warmup: 1,
            pool_size: 8,
            budget: Duration::from_secs(60),
            quick,
        }
    }

    #[test]
    fn languages_are_paired_with_what_the_runner_offers() {
        let offered = [
            info("bash", None, "bash main.sh"),
            info("klingon", None, "klingon main.kl"),
            info("c", Some("gcc main.c"), "/tmp/.build/main"),
            info("kotlin", Some("kotlinc main.kt"), "java -jar main.jar"),
        ];
        let hellos = hellos::hellos(512).unwrap();
        let api = RunnerApi::new("http://127.0.0.1:1", "t").unwrap();
        let offer = Offer {
            api: &api,
            offered: &offered,
            hellos: &hellos,
        };
        let figures = pair_up(&offer, &sizes(false));
        assert_eq!(figures.unknown, ["klingon"]);
        assert!(figures.not_offered.contains(&"python".to_owned()));
        assert!(figures.not_offered.contains(&"ruby".to_owned()));
        assert!(!figures.not_offered.contains(&"kotlin".to_owned()));
        assert!(figures.skipped.is_empty());
        let measured: Vec<&str> = both_know(&offer)
            .iter()
            .map(|(h, _)| h.name.as_str())
            .collect();
        assert_eq!(measured, ["bash", "c", "kotlin"], "the runner's order");
        assert_eq!(pair_up(&offer, &sizes(true)).skipped, ["kotlin"]);
        assert_eq!(
            sandboxed_line(&offered[2]),
            "gcc main.c && /tmp/.build/main"
        );
    }

    #[test]
    fn smoke_mode_measures_the_built_in_languages_and_a_sample_of_debian_s() {
        let hellos = hellos::hellos(512).unwrap();
        let left_out =
            |name: &str| left_out_in_smoke(hellos.iter().find(|h| h.name == name).unwrap());
        assert!(!left_out("python") && !left_out("go"));
        for sampled in SMOKE_SAMPLE {
            assert!(!left_out(sampled), "{sampled}");
        }
        assert!(left_out("lua") && left_out("kotlin") && left_out("crystal"));
    }

    #[test]
    fn smoke_mode_warms_up_only_the_loaders() {
        let mut java = info("java", None, "java");
        assert_eq!(warmup_of(&java, &sizes(true)), 0);
        java.warm = true;
        assert_eq!(warmup_of(&java, &sizes(true)), 1);
        assert_eq!(warmup_of(&info("ruby", None, "r"), &sizes(false)), 1);
    }
}
