//! rmcp's client against the real `sandbox-mcp serve`, without a runner.

mod common;

use common::{call, connect, start_mcp, text};

#[tokio::test]
async fn lists_the_tools_and_explains_the_missing_runner() {
    let server = start_mcp(&[]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let info = client.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("sandbox-mcp")
    );
    let mut names: Vec<_> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "close_sandbox",
            "create_sandbox",
            "download_file",
            "fork_sandbox",
            "kill_process",
            "list_files",
            "list_processes",
            "pause_sandbox",
            "process_output",
            "run_bash",
            "run_code",
            "run_node",
            "run_python",
            "snapshot_sandbox",
            "start_process",
            "upload_file",
            "write_stdin"
        ]
    );
    let result = client
        .call_tool(call("run_python", "print(1)", None))
        .await
        .expect("tools/call");
    assert_eq!(result.is_error, Some(true));
    let message = text(&result);
    assert!(
        message.contains("503") && message.contains("SANDBOX_RUNNER_URL"),
        "{message}"
    );
    let structured = result.structured_content.expect("structuredContent");
    assert_eq!(structured["error"]["code"], "not_configured");
    let create = client
        .call_tool(common::tool("create_sandbox", serde_json::json!({})))
        .await
        .expect("tools/call");
    assert_eq!(create.is_error, Some(true));
    assert!(
        text(&create).contains("SANDBOX_RUNNER_URL"),
        "{}",
        text(&create)
    );
    let structured = create.structured_content.expect("structuredContent");
    assert_eq!(structured["error"]["code"], "not_configured");
    assert!(structured["sandboxId"].is_null());
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn the_flag_off_hides_the_tools() {
    let server = start_mcp(&[("FEATURE_SANDBOX_EXEC", "false")]);
    let client = connect(&server, &server.token).await.expect("initialize");
    assert!(client
        .list_all_tools()
        .await
        .expect("tools/list")
        .is_empty());
    let refused = client.call_tool(call("run_bash", "echo hi", None)).await;
    assert!(refused.is_err(), "{refused:?}");
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn a_wrong_token_cannot_initialize() {
    let server = start_mcp(&[]);
    assert!(connect(&server, "not-the-token-at-all").await.is_err());
    let response = reqwest::Client::new()
        .post(&server.url)
        .header("Accept", "application/json, text/event-stream")
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .expect("POST /mcp");
    assert_eq!(response.status(), 401);
    assert!(
        response.headers().get("www-authenticate").is_none(),
        "no challenge that starts an OAuth flow"
    );
    let body: serde_json::Value = response.json().await.expect("JSON body");
    assert_eq!(body["error"]["code"], "unauthorized");
}

#[tokio::test]
async fn oauth_discovery_finds_no_authorization_server() {
    let server = start_mcp(&[]);
    let http = reqwest::Client::new();
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-authorization-server/mcp",
        "/.well-known/openid-configuration",
        "/register",
        "/authorize",
    ] {
        let response = http
            .get(format!("{}{path}", server.base()))
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), 404, "{path}");
        assert!(
            response.headers().get("www-authenticate").is_none(),
            "{path}"
        );
        let body: serde_json::Value = response.json().await.expect("JSON body");
        assert_eq!(body["error"]["code"], "not_found", "{path}");
    }
    let oauth = http
        .get(format!(
            "{}/.well-known/oauth-protected-resource",
            server.base()
        ))
        .send()
        .await
        .expect("GET");
    let body: serde_json::Value = oauth.json().await.expect("JSON body");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no OAuth"), "{message}");
}

#[tokio::test]
async fn a_foreign_origin_gets_403_even_with_the_token() {
    let server = start_mcp(&[]);
    let response = reqwest::Client::new()
        .post(&server.url)
        .bearer_auth(&server.token)
        .header("Origin", "http://evil.example")
        .header("Accept", "application/json, text/event-stream")
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .expect("POST /mcp");
    assert_eq!(response.status(), 403);
}

#[tokio::test]
async fn health_answers_without_auth() {
    let server = start_mcp(&[]);
    let health: serde_json::Value = reqwest::get(format!("{}/health", server.base()))
        .await
        .expect("GET /health")
        .json()
        .await
        .expect("JSON");
    assert_eq!(health["status"], "ok");
    assert_eq!(health["runnerConfigured"], false);
    assert_eq!(health["runnerReachable"], false);
}

#[test]
fn refuses_to_start_without_a_token() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox-mcp"))
        .arg("serve")
        .env_remove("MCP_AUTH_TOKEN")
        .env("PORT", "0")
        .output()
        .expect("run sandbox-mcp");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    assert!(String::from_utf8_lossy(&output.stderr).contains("MCP_AUTH_TOKEN"));
}

#[tokio::test]
async fn empty_variables_take_their_defaults() {
    let server = start_mcp(&[
        ("FEATURE_SANDBOX_EXEC", ""),
        ("SANDBOX_TIMEOUT_MS", ""),
        ("SANDBOX_RUNNER_URL", ""),
        ("MCP_ALLOWED_ORIGINS", ""),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert_eq!(
        tools.len(),
        17,
        "3 run tools and run_code, 5 sandbox tools, 3 to pause, snapshot and fork, 5 process tools"
    );
    let description = tools[0].description.as_deref().unwrap_or_default();
    assert!(description.contains("default 15000 ms"), "{description}");
    client.cancel().await.expect("close");
}
