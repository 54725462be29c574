//! Tools from code (issue 32), sandbox-mcp's side without a run: `MCP_UPSTREAMS` read at
//! start (a bad file stops it), real upstreams connected (a Streamable HTTP server written
//! with the Python SDK, wanting a bearer token; the reference "everything" server over
//! stdio), `search_tools` and the run tools' descriptions, an upstream down at start that
//! joins later, a child that dies and is started again with an environment of PATH and
//! HOME alone, and none of it where no upstream is configured. The secret header's value
//! shows nowhere.
//!
//! Needs python3 (a venv with PyPI's `mcp` is made once) and node with npm.

mod common;
#[path = "common/upstreams.rs"]
mod upstreams;

use std::time::Duration;

use common::{connect, start_mcp, text, tool, Client, Server};
use serde_json::{json, Value};
use upstreams::{
    everything_entry, is_up, tracker_entry, until_both_up, until_upstreams, upstreams_file,
    Tracker, SECRET,
};

/// How long an upstream may take to be connected (the reference server starts node).
const CONNECTED: Duration = Duration::from_secs(30);

/// The tools the server lists, as JSON.
async fn listed(client: &Client) -> Vec<Value> {
    let tools = client.list_all_tools().await.expect("tools/list");
    tools
        .iter()
        .map(|t| serde_json::to_value(t).expect("a tool as JSON"))
        .collect()
}

fn description<'a>(tools: &'a [Value], name: &str) -> &'a str {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .and_then(|t| t["description"].as_str())
        .unwrap_or_else(|| panic!("no tool {name}"))
}

/// `search_tools` with `arguments`: its text and structured content.
async fn search(client: &Client, arguments: Value) -> (String, Value) {
    let result = client
        .call_tool(tool("search_tools", arguments))
        .await
        .expect("search_tools");
    assert_eq!(result.is_error, Some(false), "{}", text(&result));
    let structured = result
        .structured_content
        .clone()
        .expect("structuredContent");
    (text(&result), structured)
}

/// The tool names `search_tools` lists for `server`.
fn names(structured: &Value, server: &str) -> Vec<String> {
    structured["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["name"] == server)
        .flat_map(|s| s["tools"].as_array().cloned().unwrap_or_default())
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// sandbox-mcp (no runner) with the tracker and the reference server as upstreams.
fn serve_both(tracker: &Tracker, dir: &std::path::Path) -> Server {
    let file = upstreams_file(
        dir,
        &[
            tracker_entry(&tracker.url, r#"["search_*", "get_issue"]"#, ""),
            everything_entry(r#"["echo", "get-sum"]"#),
        ],
    );
    start_mcp(&[("MCP_UPSTREAMS", file.to_str().expect("a path"))])
}

#[tokio::test]
async fn search_tools_shows_the_allowed_tools_as_stubs_and_no_secret() {
    let tracker = Tracker::start();
    let dir = tempfile::tempdir().expect("a folder");
    let server = serve_both(&tracker, dir.path());
    until_both_up(server.base()).await;
    let client = connect(&server, &server.token).await.expect("initialize");

    let tools = listed(&client).await;
    assert!(tools.iter().any(|t| t["name"] == "search_tools"));
    for run in ["run_python", "run_node"] {
        let text = description(&tools, run);
        assert!(text.contains("`tools` module"), "{run}: {text}");
        assert!(text.contains("`tracker`, `everything`"), "{run}: {text}");
    }
    assert!(description(&tools, "run_python").contains("import tools"));
    assert!(description(&tools, "run_node").contains("require(\"tools\")"));
    assert!(!description(&tools, "run_bash").contains("`tools` module"));

    let (all, structured) = search(&client, json!({})).await;
    assert_eq!(
        names(&structured, "tracker"),
        ["search_issues", "get_issue"]
    );
    assert_eq!(names(&structured, "everything"), ["echo", "get-sum"]);
    for needle in [
        "def search_issues(*, query: str, limit: int = ...) -> Any:",
        "def get_sum(*, a: float, b: float) -> Any:",
        "search_issues(args: {query: string; limit?: number}): Promise<any>;",
        "echo(args: {message: string}): Promise<any>;",
    ] {
        assert!(all.contains(needle), "{needle:?} missing from {all}");
    }
    assert!(
        !all.contains("delete_issue"),
        "a tool outside allow is listed: {all}"
    );

    let (_, only_sum) = search(&client, json!({"query": "sum"})).await;
    assert_eq!(names(&only_sum, "everything"), ["get-sum"]);
    assert!(names(&only_sum, "tracker").is_empty());

    // Listing is not calling; and the secret is nowhere a client can read.
    assert!(tracker.calls().is_empty(), "{:?}", tracker.calls());
    let shown = serde_json::to_string(&tools).expect("JSON") + &all;
    assert!(!shown.contains(SECRET));
    let metrics = reqwest::get(format!("{}/metrics", server.base()))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics");
    assert!(
        metrics.contains("sandbox_mcp_upstream_up{server=\"tracker\"} 1"),
        "{metrics}"
    );
    assert!(!metrics.contains(SECRET));
    let _ = client.cancel().await;
}

#[tokio::test]
async fn without_upstreams_nothing_of_it_is_visible() {
    let server = start_mcp(&[]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let tools = listed(&client).await;
    assert!(!tools.iter().any(|t| t["name"] == "search_tools"));
    let python = description(&tools, "run_python");
    assert!(!python.contains("`tools` module"), "{python}");
    let schema = tools
        .iter()
        .find(|t| t["name"] == "run_python")
        .map(|t| t["outputSchema"]["properties"].clone())
        .expect("run_python");
    assert!(schema.get("toolCalls").is_none());
    let refused = client.call_tool(tool("search_tools", json!({}))).await;
    assert!(refused.is_err(), "search_tools answered: {refused:?}");
    let health: Value = reqwest::get(format!("{}/health", server.base()))
        .await
        .expect("GET /health")
        .json()
        .await
        .expect("health");
    assert!(health.get("upstreams").is_none(), "{health}");
    let _ = client.cancel().await;
}

/// Starts sandbox-mcp with `file` as MCP_UPSTREAMS; it must refuse to start. Its stderr.
fn refused_start(file: &std::path::Path) -> String {
    let mut command = common::mcp_command(
        &[("MCP_UPSTREAMS", file.to_str().expect("a path"))],
        "t0123456789abcdef",
    );
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sandbox-mcp ran");
    assert!(!output.status.success(), "it started");
    assert!(output.stdout.is_empty(), "it listened");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_bad_file_stops_the_start_naming_the_file_and_the_entry() {
    let dir = tempfile::tempdir().expect("a folder");
    let good = tracker_entry("http://127.0.0.1:9/mcp", r#"["*"]"#, "");
    let cases = [
        (
            good.clone() + "env = { A = \"1\" }\n",
            "unknown field `env`",
        ),
        (
            good.clone() + &good,
            "server #2 (\"tracker\"): the name is given twice",
        ),
        (
            tracker_entry("http://127.0.0.1:9/mcp", "[]", ""),
            "allow lists no tool",
        ),
        (
            good.replace("url =", "command = [\"node\"]\nurl ="),
            "give url or command, not both",
        ),
        (
            good.replace("\"tracker\"", "\"my-tracker\""),
            "name is not an identifier",
        ),
        (
            good.replace("allow = [\"*\"]", "allow = [\"*\"]\nmax_calls_per_run = 0"),
            "max_calls_per_run = 0",
        ),
    ];
    for (text, needle) in cases {
        let file = dir.path().join("upstreams.toml");
        std::fs::write(&file, &text).expect("write");
        let stderr = refused_start(&file);
        assert!(stderr.contains(needle), "{needle:?} missing from {stderr}");
        assert!(stderr.contains(&file.display().to_string()), "{stderr}");
        assert!(!stderr.contains(SECRET), "the secret in {stderr}");
    }
    let stderr = refused_start(&dir.path().join("missing.toml"));
    assert!(stderr.contains("missing.toml"), "{stderr}");
}

#[tokio::test]
async fn an_upstream_down_at_start_joins_when_it_answers_and_rejoins_after_it_dies() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let dir = tempfile::tempdir().expect("a folder");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let file = upstreams_file(dir.path(), &[tracker_entry(&url, r#"["search_*"]"#, "")]);
    let server = start_mcp(&[("MCP_UPSTREAMS", file.to_str().expect("a path"))]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let tools = listed(&client).await;
    assert!(
        description(&tools, "run_python").contains("`tracker`"),
        "named while down"
    );
    let (text, structured) = search(&client, json!({})).await;
    assert!(text.contains("Server tracker is unreachable now"), "{text}");
    assert_eq!(structured["servers"][0]["up"], false);

    let mut tracker = Tracker::start_on(port);
    let upstreams = until_upstreams(server.base(), CONNECTED, |u| is_up(u, "tracker")).await;
    assert!(is_up(&upstreams, "tracker"), "{upstreams}");
    let (_, structured) = search(&client, json!({})).await;
    assert_eq!(names(&structured, "tracker"), ["search_issues"]);

    // It goes away: seen down (its ping fails), its tools absent; back, it is connected again.
    tracker.stop();
    let upstreams = until_upstreams(server.base(), CONNECTED, |u| !is_up(u, "tracker")).await;
    assert!(!is_up(&upstreams, "tracker"), "{upstreams}");
    let (_, structured) = search(&client, json!({})).await;
    assert!(names(&structured, "tracker").is_empty());
    let _tracker = Tracker::start_on(port);
    let upstreams = until_upstreams(server.base(), CONNECTED, |u| is_up(u, "tracker")).await;
    assert!(is_up(&upstreams, "tracker"), "{upstreams}");
    let _ = client.cancel().await;
}

/// The process ids of the reference server's node processes whose parent is `parent`.
fn children_running_everything(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) && String::from_utf8_lossy(&cmdline).contains("server-everything") {
            found.push(pid);
        }
    }
    found
}

#[tokio::test]
async fn a_stdio_upstream_is_started_clean_restarted_when_it_dies_and_stopped_with_the_server() {
    let dir = tempfile::tempdir().expect("a folder");
    let file = upstreams_file(dir.path(), &[everything_entry(r#"["echo"]"#)]);
    let mut server = start_mcp(&[
        ("MCP_UPSTREAMS", file.to_str().expect("a path")),
        (
            "SANDBOX_HANDLE_KEY",
            "a-handle-key-that-is-long-enough-0123456789",
        ),
    ]);
    let upstreams = until_upstreams(server.base(), CONNECTED, |u| is_up(u, "everything")).await;
    assert!(is_up(&upstreams, "everything"), "{upstreams}");
    let parent = server.pid().as_raw() as u32;
    let first = children_running_everything(parent);
    assert_eq!(first.len(), 1, "{first:?}");

    // Its environment: PATH and HOME, nothing of sandbox-mcp's own.
    let environ = std::fs::read(format!("/proc/{}/environ", first[0])).expect("its environment");
    let mut names: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| {
            String::from_utf8_lossy(v)
                .split('=')
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    names.sort();
    assert_eq!(names, ["HOME", "PATH"], "{names:?}");

    // Killed, it is started again.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the child");
    let deadline = std::time::Instant::now() + CONNECTED;
    let again = loop {
        let now = children_running_everything(parent);
        let upstreams = until_upstreams(server.base(), Duration::ZERO, |_| true).await;
        if !now.is_empty() && now != first && is_up(&upstreams, "everything") {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not restarted: {now:?} {upstreams}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    // Stopped with the server.
    nix::sys::signal::kill(server.pid(), nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    assert!(
        server.wait_for_exit(Duration::from_secs(40)).is_some(),
        "sandbox-mcp did not stop"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{}", again[0])).exists() {
        let state = std::fs::read_to_string(format!("/proc/{}/stat", again[0])).unwrap_or_default();
        if state.contains(") Z ") {
            break; // a zombie: dead, waiting for its reaper
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the child outlived sandbox-mcp"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
