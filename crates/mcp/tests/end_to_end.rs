//! rmcp's client against `sandbox-mcp serve` wired to a real `sandbox-runner serve`.
//!
//! Needs the runner binary (built beside these tests, or SANDBOX_RUNNER_BIN) and root.

mod common;

use std::time::Instant;

use common::{call, connect, start_mcp, start_runner, text};

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
    assert_eq!(failed.is_error, Some(true));
    assert!(text(&failed).contains("exit code: 5"));

    let started = Instant::now();
    let slow = client
        .call_tool(call("run_bash", "sleep 30", Some(1000)))
        .await
        .expect("tools/call");
    assert!(started.elapsed().as_secs() < 8);
    assert_eq!(slow.is_error, Some(true));
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
