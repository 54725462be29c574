//! `run_code` and `MCP_LANGUAGE_TOOLS` with rmcp's client, a real `sandbox-mcp serve` and a
//! real `sandbox-runner serve`: the tool list with and without the operator's list,
//! programs of bash and python through `run_code`, one-shot and in a sandbox, and an
//! unknown language.
//!
//! Needs the runner binary (built beside these tests, or SANDBOX_RUNNER_BIN) and root.

mod common;

use common::{
    call_err, call_ok, connect, run_tools, start_mcp, start_mcp_logging_to, start_runner, tool,
};
use serde_json::json;

#[tokio::test]
async fn by_default_the_eight_keep_their_tools_and_run_code_runs_every_language() {
    let runner = start_runner();
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    let run: Vec<_> = names.iter().filter(|n| n.starts_with("run_")).collect();
    assert_eq!(
        run,
        [
            "run_bash",
            "run_python",
            "run_node",
            "run_typescript",
            "run_c",
            "run_cpp",
            "run_go",
            "run_java",
            "run_code"
        ],
        "{names:?}"
    );
    let run_code = tools
        .iter()
        .find(|t| t.name == "run_code")
        .expect("run_code");
    let description = run_code.description.as_deref().unwrap_or_default();
    for needle in [
        "Languages (name version): bash 5.",
        ", python 3.",
        ", java 17.",
    ] {
        assert!(description.contains(needle), "{needle:?}: {description}");
    }

    for (language, code) in [
        ("bash", "echo \"hello $((6 * 7))\"; exit 3"),
        ("python", "import sys\nprint('hello', 6 * 7)\nsys.exit(3)"),
    ] {
        let call = tool("run_code", json!({"language": language, "code": code}));
        let (_, report) = call_ok(&client, call).await;
        assert_eq!(report["stdout"], "hello 42\n", "{language}: {report}");
        assert_eq!(report["exitCode"], 3, "{language}: {report}");
    }

    // In a sandbox, as the run tools: python keeps its variables between calls.
    let (_, created) = call_ok(&client, tool("create_sandbox", json!({}))).await;
    let id = created["sandboxId"].as_str().expect("sandboxId").to_owned();
    let kept = json!({"language": "python", "code": "kept = 41", "sandboxId": id});
    call_ok(&client, tool("run_code", kept)).await;
    let read = json!({"language": "python", "code": "print(kept + 1)", "sandboxId": id});
    let (_, report) = call_ok(&client, tool("run_code", read)).await;
    assert_eq!(report["stdout"], "42\n", "{report}");
    call_ok(&client, tool("close_sandbox", json!({"sandboxId": id}))).await;

    let unknown = json!({"language": "klingon", "code": "x"});
    let names = "bash, python, node, typescript, c, cpp, go, java";
    call_err(
        &client,
        tool("run_code", unknown),
        "invalid_arguments",
        names,
    )
    .await;
    let unknown = json!({"language": "klingon", "code": "x"});
    call_err(
        &client,
        tool("run_code", unknown),
        "invalid_arguments",
        "\"klingon\"",
    )
    .await;
    let missing = json!({"code": "echo hi"});
    call_err(
        &client,
        tool("run_code", missing),
        "invalid_arguments",
        "`language`",
    )
    .await;
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn the_operators_list_says_which_languages_have_a_tool_of_their_own() {
    let runner = start_runner();
    let log = tempfile::NamedTempFile::new().expect("a log file");
    let server = start_mcp_logging_to(
        &[
            ("SANDBOX_RUNNER_URL", runner.url.as_str()),
            ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
            ("MCP_LANGUAGE_TOOLS", "go, bash,klingon"),
        ],
        log.reopen().expect("the log file"),
    );
    assert_eq!(
        run_tools(&server).await,
        ["run_bash", "run_go", "run_code"],
        "in the runner's order, and nothing for a language it does not offer"
    );
    let logged = std::fs::read_to_string(log.path()).expect("the log");
    assert!(
        logged.contains("MCP_LANGUAGE_TOOLS") && logged.contains("klingon"),
        "{logged}"
    );
    // A language without a tool of its own still runs through run_code; its own tool
    // is an unknown one.
    let client = connect(&server, &server.token).await.expect("initialize");
    let call = tool(
        "run_code",
        json!({"language": "node", "code": "console.log(7)"}),
    );
    let (_, report) = call_ok(&client, call).await;
    assert_eq!(report["stdout"], "7\n", "{report}");
    let refused = client
        .call_tool(tool("run_node", json!({"code": "console.log(7)"})))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    client.cancel().await.expect("close");

    let none = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
        ("MCP_LANGUAGE_TOOLS", ","),
    ]);
    assert_eq!(run_tools(&none).await, ["run_code"]);
}
