//! Calls through [`Upstreams`] and a run's [`RunCalls`] against a real rmcp server in this
//! process (over an in-memory pipe): what reaches it and what is refused before, answers
//! and errors, timeouts (cancelled at the server), the budget, a cancelled MCP call, and
//! the record of a run's calls.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use sandbox_protocol::tools::{ToolCall, ToolCallLine};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::config::UpstreamsConfig;
use super::link::Live;
use super::listed::{allowed, listed_tool};
use super::run_calls::RunCalls;
use super::{Outcome, Upstreams};
use crate::runner_client::{RunnerClient, ToolCallSink};
use crate::runner_target::RunnerTarget;

/// An upstream written for these tests: it records the calls it receives and the ones
/// cancelled while in flight.
#[derive(Clone, Default)]
struct Tracker {
    received: Arc<Mutex<Vec<String>>>,
    cancelled: Arc<Mutex<usize>>,
}

fn tool(name: &str, schema: Value) -> Tool {
    listed_tool(name, &format!("{name} for tests"), schema)
}

fn listed() -> Vec<Tool> {
    let query = json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]});
    vec![
        tool("search", query),
        tool("fail", json!({"type": "object"})),
        tool("slow", json!({"type": "object"})),
        tool("delete", json!({"type": "object"})),
    ]
}

impl ServerHandler for Tracker {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(listed()))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.received
            .lock()
            .expect("lock")
            .push(params.name.to_string());
        let result = match params.name.as_ref() {
            "search" => {
                let query = params
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("query"))
                    .cloned()
                    .unwrap_or_default();
                let mut result = CallToolResult::success(vec![ContentBlock::text("found")]);
                result.structured_content = Some(json!({"hits": [query]}));
                result
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("the tracker is read-only")]),
            "slow" => {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(30)) => {}
                    () = ctx.ct.cancelled() => *self.cancelled.lock().expect("lock") += 1,
                }
                CallToolResult::success(vec![ContentBlock::text("late")])
            }
            _ => CallToolResult::success(vec![ContentBlock::text("done")]),
        };
        Ok(result.into())
    }
}

/// Upstreams with one server, "tracker", connected to a [`Tracker`] through a pipe;
/// `extra` lines complete its entry.
async fn connected(extra: &str) -> (Upstreams, Tracker) {
    let text = format!(
        "[[server]]\nname = \"tracker\"\nurl = \"http://127.0.0.1:9/mcp\"\nallow = [\"search\", \"fail\", \"slow\"]\n{extra}\n"
    );
    let config = UpstreamsConfig::parse(
        std::path::Path::new("u.toml"),
        &text,
        std::path::Path::new("."),
    )
    .expect("a config");
    let upstreams = Upstreams::new(&config);
    let tracker = Tracker::default();
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let server = tracker.clone();
    tokio::spawn(async move {
        if let Ok(running) = server.serve(theirs).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(ours).await.expect("the handshake");
    let upstream = &upstreams.inner.servers[0];
    let tools = allowed(&listed(), &upstream.config.allow, 100);
    upstream.set_live(Some(Live {
        peer: client.peer().clone(),
        tools: tools.into(),
    }));
    // The client's service lives as long as the test's runtime.
    tokio::spawn(async move {
        let _ = client.waiting().await;
    });
    (upstreams, tracker)
}

fn received(tracker: &Tracker) -> Vec<String> {
    tracker.received.lock().expect("lock").clone()
}

const LONG: Duration = Duration::from_secs(10);

#[tokio::test]
async fn allowed_calls_reach_the_upstream_and_refusals_never_do() {
    let (upstreams, tracker) = connected("").await;
    let answered = upstreams
        .call("tracker", "search", json!({"query": "crash"}), LONG)
        .await;
    assert_eq!(answered.outcome, Outcome::Ok);
    assert_eq!(answered.answer.result, Some(json!({"hits": ["crash"]})));

    let refused = upstreams.call("tracker", "delete", json!({}), LONG).await;
    assert_eq!(refused.outcome, Outcome::Refused);
    assert!(refused
        .answer
        .error
        .unwrap_or_default()
        .contains("not allowed"));
    let mismatch = upstreams
        .call("tracker", "search", json!({"query": 5}), LONG)
        .await;
    assert_eq!(mismatch.outcome, Outcome::Refused);
    assert!(mismatch
        .answer
        .error
        .unwrap_or_default()
        .contains("input schema"));
    let elsewhere = upstreams.call("other", "search", json!({}), LONG).await;
    assert_eq!(elsewhere.outcome, Outcome::Refused);
    let not_object = upstreams.call("tracker", "fail", json!([1]), LONG).await;
    assert_eq!(not_object.outcome, Outcome::Refused);
    assert_eq!(
        received(&tracker),
        ["search"],
        "only the allowed, well-formed call"
    );

    let failed = upstreams.call("tracker", "fail", json!({}), LONG).await;
    assert_eq!(failed.outcome, Outcome::Error);
    assert_eq!(
        failed.answer.error.as_deref(),
        Some("tracker.fail: the tracker is read-only")
    );
}

#[tokio::test]
async fn a_call_past_its_time_is_cancelled_at_the_upstream() {
    let (upstreams, tracker) = connected("timeout_ms = 200").await;
    let started = std::time::Instant::now();
    let answered = upstreams.call("tracker", "slow", json!({}), LONG).await;
    assert_eq!(answered.outcome, Outcome::Timeout);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(answered
        .answer
        .error
        .unwrap_or_default()
        .contains("within 200 ms"));
    // The run's own time bounds it too, below the server's timeout.
    let answered = upstreams
        .call("tracker", "slow", json!({}), Duration::from_millis(50))
        .await;
    assert!(answered
        .answer
        .error
        .unwrap_or_default()
        .contains("within 50 ms"));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while *tracker.cancelled.lock().expect("lock") < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the upstream never heard the cancellation"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn line(id: usize, tool: &str, arguments: Value) -> ToolCallLine {
    ToolCallLine {
        run_id: "run_test".into(),
        call: ToolCall {
            id: id.to_string(),
            server: "tracker".into(),
            tool: tool.into(),
            arguments,
        },
    }
}

/// A runner nobody listens at: answers are posted and dropped (logged), as when the run
/// has gone.
fn runner() -> RunnerClient {
    let target = RunnerTarget::new("http://127.0.0.1:9", None).expect("a target");
    RunnerClient::new(target).expect("a client")
}

/// Waits until `n` calls of `calls` are answered; their records.
async fn settled(calls: &RunCalls, n: usize) -> Vec<super::run_calls::ToolCallRecord> {
    let deadline = std::time::Instant::now() + LONG;
    while calls.answered() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            calls.records()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    calls.records()
}

#[tokio::test]
async fn a_run_makes_at_most_its_budget_of_calls_in_order() {
    let (upstreams, tracker) = connected("max_calls_per_run = 2").await;
    let calls = RunCalls::new(upstreams.clone(), CancellationToken::new(), LONG);
    let runner = runner();
    calls.take(&runner, line(1, "search", json!({"query": "a"})));
    calls.take(&runner, line(2, "delete", json!({})));
    calls.take(&runner, line(3, "search", json!({"query": "c"})));
    let records = settled(&calls, 3).await;
    let shown: Vec<(&str, bool)> = records
        .iter()
        .map(|r| (r.tool.as_str(), r.is_error))
        .collect();
    assert_eq!(
        shown,
        [("search", false), ("delete", true), ("search", true)]
    );
    assert_eq!(
        received(&tracker),
        ["search"],
        "the third is over the budget of two"
    );
    let json = serde_json::to_value(&records[0]).expect("JSON");
    assert_eq!(json["server"], "tracker");
    assert!(
        json["durationMs"].is_u64() && json["isError"] == false,
        "{json}"
    );
}

#[tokio::test]
async fn calls_after_the_client_cancelled_are_refused_and_calls_in_flight_end() {
    let (upstreams, tracker) = connected("").await;
    let client = CancellationToken::new();
    let calls = RunCalls::new(upstreams.clone(), client.clone(), LONG);
    let runner = runner();
    calls.take(&runner, line(1, "slow", json!({})));
    let deadline = std::time::Instant::now() + LONG;
    while received(&tracker).is_empty() {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    client.cancel();
    calls.take(&runner, line(2, "search", json!({"query": "late"})));
    let records = settled(&calls, 2).await;
    assert!(records.iter().all(|r| r.is_error), "{records:?}");
    assert_eq!(
        received(&tracker),
        ["slow"],
        "nothing after the cancellation"
    );
    // The run's time: a run with none left refuses at once.
    let spent = RunCalls::new(upstreams, CancellationToken::new(), Duration::ZERO);
    spent.take(&runner, line(1, "search", json!({"query": "x"})));
    let records = settled(&spent, 1).await;
    assert!(records[0].is_error);
    assert_eq!(received(&tracker), ["slow"]);
}
