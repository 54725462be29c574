//! Hosts a program may reach (issue 33), through rmcp's client against the real
//! `sandbox-mcp serve` wired to a real `sandbox-runner serve` that opens a host: the run
//! tools and `create_sandbox` name it and take `egress`, which reaches the runner (a
//! program granted the host has the proxy's variables; a host outside the operator's list
//! is refused by the runner, and the result's code is `egress_not_allowed`, its text
//! naming that host and the open ones); behind a runner that opens none, the tools are as
//! before (and an `egress` given anyway is refused, saying no host is open). The proxy
//! itself is tested in sandbox-runner's tests/egress/.
//!
//! Needs the runner binary (built beside these tests, or SANDBOX_RUNNER_BIN) and root.

mod common;

use common::{
    call_err, call_ok, connect, start_mcp, start_runner, start_runner_with, text, tool, Client,
};
use serde_json::{json, Value};

const HOST: &str = "allowed.test";

/// A server in front of `runner`, and its client.
async fn client_of(runner: &common::Server) -> (common::Server, Client) {
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    (server, client)
}

/// Calls `name` with `arguments`, whose `egress` asks for a host the runner does not open:
/// the result is `egress_not_allowed`, and its text names that host and `open` (what the
/// runner opens, as the result puts it).
async fn refused_outside(client: &Client, name: &'static str, arguments: Value, open: &str) {
    let result = client
        .call_tool(tool(name, arguments))
        .await
        .expect("tools/call");
    let said = text(&result);
    assert_eq!(result.is_error, Some(true), "{name}: {said}");
    let structured = result.structured_content.expect("structuredContent");
    assert_eq!(
        structured["error"]["code"], "egress_not_allowed",
        "{name}: {said}"
    );
    assert_eq!(structured["error"]["retryable"], false, "{name}: {said}");
    assert!(said.contains("elsewhere.test"), "{name}: {said}");
    assert!(said.contains(open), "{name}: {said}");
}

/// `name`'s definition as `tools/list` shows it.
async fn definition(client: &Client, name: &str) -> Value {
    let tools = client.list_all_tools().await.expect("tools/list");
    let tool = tools
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no {name}"));
    serde_json::to_value(tool).expect("a tool as JSON")
}

#[tokio::test]
async fn the_tools_name_the_open_hosts_and_pass_egress_on() {
    let runner = start_runner_with(&["--egress-allow", HOST]);
    let (_server, client) = client_of(&runner).await;
    for name in ["run_bash", "run_python", "create_sandbox"] {
        let tool = definition(&client, name).await;
        let description = tool["description"].as_str().unwrap_or_default();
        assert!(description.contains(HOST), "{name}: {description}");
        assert!(description.contains("pip install"), "{name}: {description}");
        assert!(
            !description.contains("there is no network"),
            "{name}: {description}"
        );
        let egress = &tool["inputSchema"]["properties"]["egress"];
        assert_eq!(egress["type"], "array", "{name}: {tool}");
    }
    let code = "env | grep -c '^HTTPS_PROXY=http://127.0.0.1:3128$'";
    let args = json!({"code": code, "egress": [HOST]});
    let (_, granted) = call_ok(&client, tool("run_bash", args)).await;
    assert_eq!(
        granted["stdout"].as_str().map(str::trim),
        Some("1"),
        "{granted}"
    );
    let open = format!("the hosts it opens are: {HOST};");
    let outside = json!({"code": "true", "egress": ["elsewhere.test"]});
    refused_outside(&client, "run_bash", outside, &open).await;
    let bad = json!({"code": "true", "egress": "allowed.test"});
    call_err(
        &client,
        tool("run_bash", bad),
        "invalid_arguments",
        "egress",
    )
    .await;
    let (_, sandbox) = call_ok(&client, tool("create_sandbox", json!({"egress": [HOST]}))).await;
    assert!(sandbox["sandboxId"].as_str().is_some(), "{sandbox}");
    let refused = json!({"egress": ["elsewhere.test"]});
    refused_outside(&client, "create_sandbox", refused, &open).await;
}

#[tokio::test]
async fn behind_a_runner_without_egress_the_tools_are_as_before() {
    let runner = start_runner();
    let (_server, client) = client_of(&runner).await;
    for name in ["run_bash", "create_sandbox"] {
        let tool = definition(&client, name).await;
        assert!(
            tool["inputSchema"]["properties"].get("egress").is_none(),
            "{tool}"
        );
        let description = tool["description"].as_str().unwrap_or_default();
        assert!(!description.contains("proxy"), "{name}: {description}");
    }
    let anyway = json!({"code": "true", "egress": ["elsewhere.test"]});
    refused_outside(&client, "run_bash", anyway, "opens no host").await;
}
