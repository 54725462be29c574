//! rmcp's child-process client against the real `sandbox-mcp stdio`.

mod common;

use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::ServiceExt;

#[tokio::test]
async fn stdio_serves_the_tools_without_a_token() {
    let command =
        tokio::process::Command::new(env!("CARGO_BIN_EXE_sandbox-mcp")).configure(|cmd| {
            cmd.arg("stdio")
                .env_remove("MCP_AUTH_TOKEN")
                .env_remove("SANDBOX_RUNNER_URL")
                .env("RUST_LOG", "warn");
        });
    let transport = TokioChildProcess::new(command).expect("spawn sandbox-mcp stdio");
    let client = ().serve(transport).await.expect("initialize");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert_eq!(
        tools.len(),
        17,
        "3 run tools and run_code, 5 sandbox tools, 3 to pause, snapshot and fork, 5 process tools"
    );
    let result = client
        .call_tool(common::call("run_node", "console.log(1)", None))
        .await
        .expect("tools/call");
    assert_eq!(result.is_error, Some(true));
    assert!(common::text(&result).contains("SANDBOX_RUNNER_URL"));
    client.cancel().await.expect("close");
}
