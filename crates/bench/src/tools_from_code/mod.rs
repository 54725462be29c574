//! Tools called from code (issue 32): one task done by an MCP client as a tool call per
//! page against the same task as one run whose program calls the tools, and what one
//! call from code costs next to the same call made directly.
//!
//! The section starts the test suites' issue tracker (`upstream`: an MCP server on the
//! official Python SDK, 200 issues, wanting a bearer secret) with a Python that has the
//! `mcp` package (`--upstream-python`; missing: the section is skipped, saying so loudly
//! and how to get one), a runner of its own (pool of [`POOL_SIZE`], no warm imports: the
//! programs import nothing heavy, and a refill's imports would run beside the next
//! round), and a `sandbox-mcp serve` whose `MCP_UPSTREAMS` names the tracker with its
//! header. Two MCP sessions: one directly on the tracker (the client of (a), with the
//! secret), one on sandbox-mcp. Then the task (`task`) and the cost of a call
//! (`per_call`), each round on a quiet runner; at the end, the tracker's own count of the
//! calls it served must be exactly those the bench made, directly and from code.

mod calls;
mod per_call;
mod rounds;
mod task;
mod upstream;

pub use per_call::PerCallFigures;
pub use rounds::{Quiet, Rounds};
pub use task::{TaskFigures, Way};
pub use upstream::TRACKER_SCRIPT;

use crate::clients::{McpSession, RunnerApi};
use crate::services::{Binaries, Service};
use anyhow::{bail, ensure, Context};
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::Peer;
use rmcp::RoleClient;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use upstream::{Tracker, UpstreamsFile};

/// Sandboxes of the section's runner: the run's, and its refill.
pub const POOL_SIZE: usize = 2;
/// How long sandbox-mcp may take to show the tracker's tools (`search_tools`).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often `search_tools` is asked meanwhile.
const READY_POLL: Duration = Duration::from_millis(250);
/// The tracker's tools the section calls: `search_tools` must show both.
const USED: [&str; 2] = ["list_issues", "get_issue"];

/// What the section needs and how many rounds it takes.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// The rounds of the task.
    pub task: Rounds,
    /// The rounds of the cost of a call.
    pub per_call: Rounds,
    /// A Python with the `mcp` package (v2 API) and uvicorn.
    pub python: PathBuf,
    /// The tracker's program.
    pub script: PathBuf,
}

/// The section: measured, or skipped and why.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ToolsSection {
    /// Everything it measured.
    Measured(Box<ToolsFigures>),
    /// It could not run here.
    Skipped {
        /// Why, and how to make it run.
        reason: String,
    },
}

/// Everything the section measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsFigures {
    /// Sandboxes of the runner.
    pub pool_size: usize,
    /// Unmeasured rounds before each figure.
    pub warmup: usize,
    /// The task, both ways.
    pub task: TaskFigures,
    /// The cost of one call from code.
    pub per_call: PerCallFigures,
    /// The tracker's count of the calls it served, by tool.
    pub tracker_calls: BTreeMap<String, u64>,
}

/// Measures the section, or skips it (loudly) when its Python is missing.
pub async fn measure(
    bins: &Binaries,
    runner_token: &str,
    sizes: &Sizes,
) -> anyhow::Result<ToolsSection> {
    let unusable = match upstream::missing(&sizes.python, &sizes.script) {
        Some(why) => Some(why),
        None => upstream::cannot_serve(&sizes.python).await?,
    };
    if let Some(reason) = unusable {
        eprintln!("bench: !!! SKIPPED the tools section (tools called from code): {reason}");
        return Ok(ToolsSection::Skipped { reason });
    }
    let tracker = Tracker::start(&sizes.python, &sizes.script, &crate::token()?).await?;
    let measured = with_tracker(&tracker, bins, runner_token, sizes).await;
    let stopped = tracker.stop().await;
    let figures = measured?;
    stopped?;
    Ok(ToolsSection::Measured(Box::new(figures)))
}

/// Starts the runner and sandbox-mcp in front of the tracker, measures, stops both.
async fn with_tracker(
    tracker: &Tracker,
    bins: &Binaries,
    runner_token: &str,
    sizes: &Sizes,
) -> anyhow::Result<ToolsFigures> {
    let file = UpstreamsFile::write(&upstream::upstreams_toml(&tracker.url, &tracker.secret)?)?;
    let no_warm_imports = ["--warm-imports", ""];
    let runner =
        Service::runner_with(&bins.runner, runner_token, POOL_SIZE, &no_warm_imports).await?;
    let mcp_token = crate::token()?;
    let upstreams = file.path();
    let env = [("MCP_UPSTREAMS", upstreams.as_os_str())];
    let mcp = match Service::mcp_with(&bins.mcp, &mcp_token, &runner.url, runner_token, &env).await
    {
        Ok(mcp) => mcp,
        Err(e) => {
            let _ = runner.stop().await;
            return Err(e);
        }
    };
    let api = RunnerApi::new(&runner.url, runner_token);
    let measured = match api {
        Ok(api) => with_services(tracker, &api, &mcp.url, &mcp_token, sizes).await,
        Err(e) => Err(e),
    };
    let mcp_stopped = mcp.stop().await.context("stopping sandbox-mcp");
    let runner_stopped = runner.stop().await.context("stopping sandbox-runner");
    let figures = measured?;
    mcp_stopped?;
    runner_stopped?;
    Ok(figures)
}

/// Opens both MCP sessions, measures, closes them.
async fn with_services(
    tracker: &Tracker,
    api: &RunnerApi,
    mcp_url: &str,
    mcp_token: &str,
    sizes: &Sizes,
) -> anyhow::Result<ToolsFigures> {
    let direct = McpSession::connect(&tracker.url, &tracker.secret)
        .await
        .context("connecting to the tracker directly")?;
    let through = match McpSession::connect(mcp_url, mcp_token).await {
        Ok(session) => session,
        Err(e) => {
            let _ = direct.close().await;
            return Err(e);
        }
    };
    let measured = figures(tracker, api, &direct.peer(), &through.peer(), sizes).await;
    let closed = through.close().await.and(direct.close().await);
    let figures = measured?;
    closed?;
    Ok(figures)
}

async fn figures(
    tracker: &Tracker,
    api: &RunnerApi,
    direct: &Peer<RoleClient>,
    mcp: &Peer<RoleClient>,
    sizes: &Sizes,
) -> anyhow::Result<ToolsFigures> {
    wait_for_tools(mcp).await?;
    let quiet = Quiet { api };
    eprintln!("bench: tools from code, the task both ways");
    let task = task::measure(direct, mcp, &quiet, &sizes.task).await?;
    eprintln!("bench: tools from code, the cost of a call");
    let per_call = per_call::measure(direct, mcp, &quiet, &sizes.per_call).await?;
    let tracker_calls = tracker.calls().await?;
    let expected = expected_calls(
        sizes.task.made(task.rounds),
        sizes.per_call.made(per_call.rounds),
    );
    ensure!(
        tracker_calls == expected,
        "the tracker served {tracker_calls:?}, the bench made {expected:?}"
    );
    Ok(ToolsFigures {
        pool_size: POOL_SIZE,
        warmup: sizes.task.warmup,
        task,
        per_call,
        tracker_calls,
    })
}

/// The calls the tracker must have served after `task_rounds` rounds of the task and
/// `call_rounds` of the cost of a call (warm-up included): every page twice a round
/// (directly and from code), and every issue of the cost of a call twice a round.
fn expected_calls(task_rounds: usize, call_rounds: usize) -> BTreeMap<String, u64> {
    let pages = 2 * task::PAGES * task_rounds as u64;
    let issues = 2 * (per_call::CALLS * call_rounds) as u64;
    BTreeMap::from([
        ("list_issues".to_owned(), pages),
        ("get_issue".to_owned(), issues),
    ])
    .into_iter()
    .filter(|(_, count)| *count > 0)
    .collect()
}

/// Waits until sandbox-mcp's `search_tools` shows the tracker's tools the section calls
/// (an upstream it could not reach at start is retried, its tools absent meanwhile).
async fn wait_for_tools(mcp: &Peer<RoleClient>) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let shown = search_tools(mcp).await;
        match &shown {
            Ok(Some(text)) if USED.iter().all(|tool| text.contains(tool)) => return Ok(()),
            _ if Instant::now() < deadline => tokio::time::sleep(READY_POLL).await,
            Ok(Some(text)) => bail!(
                "sandbox-mcp's search_tools did not show {USED:?} within {READY_TIMEOUT:?}: \
                 {text}"
            ),
            Ok(None) => bail!(
                "sandbox-mcp offers no search_tools after {READY_TIMEOUT:?}: it was built \
                 without tools called from code, or did not read MCP_UPSTREAMS"
            ),
            Err(e) => bail!("sandbox-mcp's search_tools failed: {e:#}"),
        }
    }
}

/// `search_tools` with no query: every allowed tool's stubs, as text; `None` while
/// `tools/list` does not offer it.
async fn search_tools(mcp: &Peer<RoleClient>) -> anyhow::Result<Option<String>> {
    let asked = async {
        let offered = mcp.list_all_tools().await.context("tools/list")?;
        if !offered.iter().any(|tool| tool.name == "search_tools") {
            return Ok(None);
        }
        let params = CallToolRequestParams::new("search_tools").with_arguments(JsonObject::new());
        let result = mcp.call_tool(params).await.context("search_tools")?;
        ensure!(result.is_error != Some(true), "search_tools: {result:?}");
        task::text_of(&result).map(Some)
    };
    tokio::time::timeout(READY_TIMEOUT, asked)
        .await
        .context("tools/list and search_tools took too long")?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tracker_serves_every_call_twice_a_round() {
        let expected = expected_calls(3, 2);
        assert_eq!(expected.get("list_issues"), Some(&60));
        assert_eq!(expected.get("get_issue"), Some(&80));
        assert_eq!(expected.len(), 2);
        assert!(
            expected_calls(0, 0).is_empty(),
            "a tool never called is absent"
        );
    }

    /// The client's side of both figures against the real tracker (a Python with the
    /// `mcp` package needed: `tests/mcp-clients/run.sh` makes it; skipped, saying so,
    /// without it): the task's answer read from the pages' text, the direct calls, and
    /// the tracker's own count of them.
    #[tokio::test]
    async fn the_client_reads_the_answer_from_the_real_tracker_s_pages() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let python = root.join("tests/mcp-clients/.venv/bin/python");
        let script = root.join(TRACKER_SCRIPT);
        if let Some(why) = upstream::missing(&python, &script) {
            eprintln!("SKIPPED the_client_reads_the_answer_from_the_real_tracker_s_pages: {why}");
            return;
        }
        let tracker = Tracker::start(&python, &script, "s3cret").await.unwrap();
        let session = McpSession::connect(&tracker.url, &tracker.secret)
            .await
            .unwrap();
        let client = session.peer();
        let done = task::by_hand(&client).await.unwrap();
        let ids: Vec<u64> = done.answer.iter().map(|found| found.id).collect();
        let closed_crashes: Vec<u64> = (1..=200).filter(|n| n % 5 == 0 && n % 3 == 0).collect();
        assert_eq!(ids, closed_crashes);
        assert_eq!(done.answer[0].title, "Issue 15: crash in the storage");
        assert!(done.model_bytes > 50_000, "{} bytes", done.model_bytes);
        let took = per_call::one_by_one(&client).await.unwrap();
        assert_eq!(took.len(), per_call::CALLS);
        let served = BTreeMap::from([
            ("list_issues".to_owned(), task::PAGES),
            ("get_issue".to_owned(), per_call::CALLS as u64),
        ]);
        assert_eq!(tracker.calls().await.unwrap(), served);
        session.close().await.unwrap();
        tracker.stop().await.unwrap();
    }
}
