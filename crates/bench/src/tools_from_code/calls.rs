//! The calls of the section: `run_python` through sandbox-mcp and a tool called
//! directly on the tracker, each bounded in time, and the checks of a run's result (its
//! exit, and the tool calls its `structuredContent` says it made).

use super::upstream::SERVER;
use crate::clients::call_tool;
use anyhow::{ensure, Context};
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::Peer;
use rmcp::RoleClient;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The longest a `run_python` may take (its own timeout is shorter).
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a direct call of the tracker may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One `run_python` of `code`: how long it took and its result.
pub async fn run_python(
    mcp: &Peer<RoleClient>,
    code: &str,
) -> anyhow::Result<(Duration, CallToolResult)> {
    let begun = Instant::now();
    let result = tokio::time::timeout(RUN_TIMEOUT, call_tool(mcp, "run_python", code))
        .await
        .with_context(|| format!("run_python took over {RUN_TIMEOUT:?}"))??;
    Ok((begun.elapsed(), result))
}

/// One call of `tool` with `arguments` on the tracker, directly: how long it took and
/// its result, which must not be an error.
pub async fn call_directly(
    tracker: &Peer<RoleClient>,
    tool: &'static str,
    arguments: JsonObject,
) -> anyhow::Result<(Duration, CallToolResult)> {
    let params = CallToolRequestParams::new(tool).with_arguments(arguments);
    let begun = Instant::now();
    let result = tokio::time::timeout(CALL_TIMEOUT, tracker.call_tool(params))
        .await
        .with_context(|| format!("{tool} took over {CALL_TIMEOUT:?}"))?
        .with_context(|| format!("calling {tool} on the tracker"))?;
    let took = begun.elapsed();
    ensure!(result.is_error != Some(true), "{tool}: {result:?}");
    Ok((took, result))
}

/// What a run that calls tools must show in its result.
pub struct ToolCallCheck {
    /// The calls it made.
    pub calls: usize,
    /// The tool of each (on the tracker).
    pub tool: &'static str,
}

impl ToolCallCheck {
    /// Checks that the run exited 0 after exactly the expected calls, none failed
    /// (`structuredContent.toolCalls`); its standard output.
    pub fn check(&self, result: &CallToolResult) -> anyhow::Result<String> {
        let report = result
            .structured_content
            .as_ref()
            .context("a run_python result without structuredContent")?;
        ensure!(
            result.is_error != Some(true) && report["exitCode"] == 0,
            "the program failed: {report}"
        );
        ensure!(
            report["stdoutTruncated"] != true && report["stdoutOmittedBytes"] == 0,
            "the program's output was cut: {report}"
        );
        let calls = report["toolCalls"]
            .as_array()
            .with_context(|| format!("a run_python result without toolCalls: {report}"))?;
        ensure!(
            calls.len() == self.calls,
            "{} tool calls, not {}: {report}",
            calls.len(),
            self.calls
        );
        for call in calls {
            let expected = call["server"] == SERVER
                && call["tool"] == self.tool
                && call["isError"] == false
                && call["durationMs"].is_u64();
            ensure!(
                expected,
                "a call that is not a {SERVER} {} that worked: {call}",
                self.tool
            );
        }
        Ok(report["stdout"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_default())
    }
}

/// The JSON a result's text holds (the tracker's tools answer a JSON object as text).
pub fn json_of(text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).with_context(|| format!("a result whose text is not JSON: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(report: Value) -> CallToolResult {
        let mut result = CallToolResult::success(Vec::new());
        result.structured_content = Some(report);
        result
    }

    fn call(tool: &str, is_error: bool) -> Value {
        json!({"server": "tracker", "tool": tool, "durationMs": 3, "isError": is_error})
    }

    #[test]
    fn a_run_shows_exactly_its_calls_each_one_that_worked() {
        let check = ToolCallCheck {
            calls: 2,
            tool: "get_issue",
        };
        let report = |calls: Vec<Value>, exit: i64| {
            run(
                json!({"stdout": "2 3\n", "exitCode": exit, "stdoutTruncated": false,
                       "stdoutOmittedBytes": 0, "toolCalls": calls}),
            )
        };
        let good = vec![call("get_issue", false), call("get_issue", false)];
        assert_eq!(check.check(&report(good.clone(), 0)).unwrap(), "2 3\n");
        assert!(check.check(&report(good, 1)).is_err(), "exit 1");
        assert!(check
            .check(&report(vec![call("get_issue", false)], 0))
            .is_err());
        let failed = vec![call("get_issue", false), call("get_issue", true)];
        assert!(check.check(&report(failed, 0)).is_err());
        let other = vec![call("get_issue", false), call("status", false)];
        assert!(check.check(&report(other, 0)).is_err());
        let none = ToolCallCheck {
            calls: 0,
            tool: "get_issue",
        };
        assert!(none.check(&report(Vec::new(), 0)).is_ok());
        assert!(
            none.check(&run(json!({"exitCode": 0}))).is_err(),
            "no toolCalls"
        );
        assert!(none.check(&CallToolResult::success(Vec::new())).is_err());
    }

    #[test]
    fn results_hold_json_text() {
        assert_eq!(json_of("{\"id\": 3}").unwrap()["id"], 3);
        assert!(json_of("3 issues").is_err());
    }
}
