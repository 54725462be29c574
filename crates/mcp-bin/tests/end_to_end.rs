//! rmcp's client against `sandbox-mcp serve` wired to a real `sandbox-runner serve`.
//!
//! Needs the runner binary (built beside these tests, or SANDBOX_RUNNER_BIN) and root.

mod common;

use std::time::Instant;

use common::{call, connect, start_mcp, start_runner, start_runner_with, text};

#[tokio::test]
async fn runs_each_language_and_reports_failures_and_timeouts() {
    let runner = start_runner();
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    for (tool, code) in [
        ("run_bash", "echo $((6 * 7))"),
        ("run_python", "print(6 * 7)"),
        ("run_node", "console.log(6 * 7)"),
    ] {
        let result = client
            .call_tool(call(tool, code, None))
            .await
            .expect("tools/call");
        assert_eq!(result.is_error, Some(false), "{tool}: {}", text(&result));
        let structured = result.structured_content.expect("structuredContent");
        assert_eq!(structured["stdout"], "42\n", "{tool}");
        assert_eq!(structured["exitCode"], 0);
    }

    let failed = client
        .call_tool(call("run_python", "import sys; sys.exit(5)", None))
        .await
        .expect("tools/call");
    assert_eq!(
        failed.is_error,
        Some(false),
        "a program that ran is a result"
    );
    assert!(text(&failed).contains("exit code: 5"));

    let started = Instant::now();
    let slow = client
        .call_tool(call("run_bash", "sleep 30", Some(1000)))
        .await
        .expect("tools/call");
    assert!(started.elapsed().as_secs() < 8);
    assert_eq!(slow.is_error, Some(false));
    assert_eq!(
        slow.structured_content.expect("structured")["timedOut"],
        true
    );

    drop(runner);
    let down = client
        .call_tool(call("run_bash", "echo hi", None))
        .await
        .expect("tools/call");
    assert_eq!(down.is_error, Some(true));
    assert!(text(&down).contains("unreachable"), "{}", text(&down));
    client.cancel().await.expect("close");
}

/// The runner owns every limit: a runner started with other limits makes the tools
/// describe those, and a call without a timeout gets the runner's default.
#[tokio::test]
async fn the_tools_describe_the_runners_own_limits() {
    let runner = start_runner_with(&["--memory-mb", "384", "--default-timeout-ms", "9000"]);
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let tools = client.list_all_tools().await.expect("tools/list");
    // A run tool per built-in language, run_code, the five sandbox tools, the three that
    // pause, snapshot and fork sandboxes, and the five process tools.
    assert_eq!(
        tools.len(),
        8 + 1 + 5 + 3 + 5,
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    let create = tools
        .iter()
        .find(|t| t.name == "create_sandbox")
        .expect("create_sandbox");
    assert!(create
        .description
        .as_deref()
        .unwrap_or_default()
        .contains("384 MB"));
    for tool in tools.iter().filter(|t| t.name.starts_with("run_")) {
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(description.contains("384 MB"), "{description}");
        assert!(description.contains("default 9000 ms"), "{description}");
        assert!(!description.contains("256 MB"), "{description}");
        let schema = serde_json::Value::Object((*tool.input_schema).clone());
        let timeout = &schema["properties"]["timeoutMs"];
        assert!(
            timeout["description"]
                .as_str()
                .unwrap_or_default()
                .contains("9000"),
            "{schema}"
        );
        assert_eq!(timeout["maximum"], 300_000, "{schema}");
    }
    let started = Instant::now();
    let result = client
        .call_tool(call("run_bash", "echo started; sleep 12", None))
        .await
        .expect("tools/call");
    let structured = result
        .structured_content
        .clone()
        .expect("structuredContent");
    assert_eq!(structured["timedOut"], true, "{}", text(&result));
    assert!(
        text(&result).contains("9000 ms timeout"),
        "{}",
        text(&result)
    );
    assert!(
        started.elapsed().as_secs_f64() < 11.5,
        "{:?}",
        started.elapsed()
    );
    client.cancel().await.expect("close");
}

/// An operator who wants failed runs flagged sets `MCP_FAILED_RUN_IS_ERROR`.
#[tokio::test]
async fn failed_runs_set_is_error_when_the_operator_asks() {
    let runner = start_runner();
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
        ("MCP_FAILED_RUN_IS_ERROR", "true"),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let failed = client
        .call_tool(call("run_bash", "echo no >&2; exit 1", None))
        .await
        .expect("tools/call");
    assert_eq!(failed.is_error, Some(true), "{}", text(&failed));
    assert!(text(&failed).contains("exit code: 1"), "{}", text(&failed));
    let ok = client
        .call_tool(call("run_bash", "echo yes", None))
        .await
        .expect("tools/call");
    assert_eq!(ok.is_error, Some(false), "{}", text(&ok));
    client.cancel().await.expect("close");
}
