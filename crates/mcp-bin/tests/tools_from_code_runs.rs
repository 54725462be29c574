//! Tools from code (issue 32) end to end: programs in real sandboxes of a real
//! `sandbox-runner` call real upstream MCP servers through the real `sandbox-mcp`: a
//! Python SDK server over Streamable HTTP wanting a bearer token ("tracker", which writes
//! down every call it receives) and the reference "everything" server over stdio.
//!
//! Python, TypeScript and Node programs call several tools and join the results; a tool
//! outside `allow` fails in the program and never reaches the upstream, even written by
//! hand on the agent's socket; the budget; arguments that do not match the schema; an
//! upstream error; an upstream that hangs (timeout) and a result over 1 MiB; an upstream
//! that dies and comes back; runs in a sandbox across calls; a hostile program finds the
//! header's secret nowhere; the run's `toolCalls` and `/metrics`.
//!
//! Needs the runner binary, root, python3 and node with npm (see `common/upstreams.rs`).

mod common;
#[path = "common/upstreams.rs"]
mod upstreams;

use std::time::{Duration, Instant};

use common::{call, call_ok, connect, start_mcp, start_runner, text, tool, Client, Server};
use serde_json::{json, Value};
use upstreams::{everything_entry, tracker_entry, until_both_up, upstreams_file, Tracker, SECRET};

/// How long the upstreams may take to be connected.
const CONNECTED: Duration = Duration::from_secs(30);

/// A runner, the tracker, and sandbox-mcp calling both, with a client.
struct Setup {
    _runner: Server,
    tracker: Tracker,
    server: Server,
    client: Client,
    _dir: tempfile::TempDir,
}

/// Starts a [`Setup`] whose tracker entry has `tracker_extra` lines (budget, timeout).
async fn setup(tracker_extra: &str) -> Setup {
    let runner = start_runner();
    let tracker = Tracker::start();
    let dir = tempfile::tempdir().expect("a folder");
    let file = upstreams_file(
        dir.path(),
        &[
            tracker_entry(
                &tracker.url,
                r#"["search_*", "get_issue", "hang", "big"]"#,
                tracker_extra,
            ),
            everything_entry(r#"["echo", "get-sum"]"#),
        ],
    );
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.base()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
        ("MCP_UPSTREAMS", file.to_str().expect("a path")),
    ]);
    until_both_up(server.base()).await;
    let client = connect(&server, &server.token).await.expect("initialize");
    Setup {
        _runner: runner,
        tracker,
        server,
        client,
        _dir: dir,
    }
}

/// Runs `code` with `tool_name`: its stdout and `toolCalls`; the run must exit 0.
async fn run(client: &Client, tool_name: &'static str, code: &str) -> (String, Vec<Value>) {
    let (result, structured) = call_ok(client, call(tool_name, code, Some(60_000))).await;
    assert_eq!(structured["exitCode"], 0, "{}", text(&result));
    let calls = structured["toolCalls"]
        .as_array()
        .cloned()
        .expect("toolCalls");
    (
        structured["stdout"].as_str().unwrap_or_default().to_owned(),
        calls,
    )
}

/// The (server, tool, isError) of each recorded call.
fn summary(calls: &[Value]) -> Vec<(String, String, bool)> {
    calls
        .iter()
        .map(|c| {
            assert!(c["durationMs"].is_u64(), "{c}");
            (
                c["server"].as_str().unwrap_or_default().to_owned(),
                c["tool"].as_str().unwrap_or_default().to_owned(),
                c["isError"].as_bool().expect("isError"),
            )
        })
        .collect()
}

fn ok(server: &str, tool: &str) -> (String, String, bool) {
    (server.into(), tool.into(), false)
}

fn failed(server: &str, tool: &str) -> (String, String, bool) {
    (server.into(), tool.into(), true)
}

const PYTHON_SUMMARY: &str = r#"
import tools
found = tools.tracker.search_issues(query="crash", limit=3)
numbers = [issue["number"] for issue in found["issues"]]
texts = [tools.tracker.get_issue(number=n) for n in numbers]
total = tools.everything.get_sum(a=len(numbers), b=10)
servers = sorted(s if isinstance(s, str) else s.get("name", str(s)) for s in tools.list())
print(f"{len(texts)} issues; first: {texts[0]}; sum: {total}; servers: {servers}")
"#;

#[tokio::test]
async fn a_python_program_calls_several_tools_and_prints_a_summary() {
    let s = setup("").await;
    let (stdout, calls) = run(&s.client, "run_python", PYTHON_SUMMARY).await;
    assert!(
        stdout.contains("3 issues; first: Issue 1: the app crashes on start"),
        "{stdout}"
    );
    assert!(stdout.contains("13"), "the sum: {stdout}");
    assert!(
        stdout.contains("tracker") && stdout.contains("everything"),
        "{stdout}"
    );
    assert_eq!(
        summary(&calls),
        [
            ok("tracker", "search_issues"),
            ok("tracker", "get_issue"),
            ok("tracker", "get_issue"),
            ok("tracker", "get_issue"),
            ok("everything", "get-sum"),
        ]
    );
    assert_eq!(s.tracker.count("search_issues"), 1);
    assert_eq!(s.tracker.count("get_issue"), 3);
    let metrics = get(&format!("{}/metrics", s.server.base())).await;
    assert!(
        metrics.contains(
            "sandbox_mcp_upstream_calls_total{server=\"tracker\",tool=\"get_issue\",outcome=\"ok\"} 3"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn typescript_and_node_programs_await_the_tools() {
    let s = setup("").await;
    let typescript = r#"
import { tracker, everything } from "tools";
async function main() {
  const found = await tracker.search_issues({ query: "crash", limit: 2 });
  const texts = await Promise.all(found.issues.map((i: any) => tracker.get_issue({ number: i.number })));
  const echoed = await everything.echo({ message: "hi from ts" });
  let failure = "none";
  try { await tracker.get_issue({ number: 404 }); } catch (e) { failure = (e as Error).message; }
  console.log(`${texts.length} issues; ${texts[1]}; ${JSON.stringify(echoed)}; failure: ${failure}`);
}
main().catch((e) => { console.error(e); process.exit(1); });
"#;
    let (stdout, calls) = run(&s.client, "run_typescript", typescript).await;
    assert!(
        stdout.contains("2 issues; Issue 2: the app crashes on start"),
        "{stdout}"
    );
    assert!(stdout.contains("hi from ts"), "{stdout}");
    assert!(
        stdout.contains("failure: ") && stdout.contains("issue 404 does not exist"),
        "{stdout}"
    );
    assert_eq!(calls.len(), 5, "{calls:?}");
    assert_eq!(summary(&calls)[4], failed("tracker", "get_issue"));

    let node = r#"
const { tracker } = require("tools");
(async () => {
  const found = await tracker.search_issues({ query: "node" });
  console.log(`node: ${found.issues.length} ${found.issues[0].title}`);
})().catch((e) => { console.error(e); process.exit(1); });
"#;
    let (stdout, calls) = run(&s.client, "run_node", node).await;
    assert!(stdout.contains("node: 3 node crash #1"), "{stdout}");
    assert_eq!(summary(&calls), [ok("tracker", "search_issues")]);
}

#[tokio::test]
async fn refusals_never_reach_the_upstream() {
    let s = setup("max_calls_per_run = 3\ntimeout_ms = 1500").await;
    // A tool outside allow: not in the module, and refused when written on the socket by hand.
    let outside = r#"
import json, socket, tools
print("has delete:", hasattr(tools.tracker, "delete_issue"))
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect("/run/sandbox-tools/socket")
sock.sendall(json.dumps({"server": "tracker", "tool": "delete_issue", "arguments": {"number": 1}}).encode() + b"\n")
print("by hand:", sock.makefile().readline().strip())
try:
    tools.tracker.search_issues(query=5)
except tools.ToolError as e:
    print("schema:", e)
"#;
    let (stdout, calls) = run(&s.client, "run_python", outside).await;
    assert!(stdout.contains("has delete: False"), "{stdout}");
    assert!(stdout.contains("by hand: {\"error\":"), "{stdout}");
    // Refused by the agent (the offer names no such tool) before sandbox-mcp's allowlist.
    assert!(
        stdout.contains("not allowed") || stdout.contains("offered no tool"),
        "{stdout}"
    );
    assert!(stdout.contains("do not match its input schema"), "{stdout}");
    // The agent may refuse a call outside the offer itself, or pass it on to be refused.
    assert!(calls.iter().all(|c| c["isError"] == true), "{calls:?}");
    assert!(
        summary(&calls).contains(&failed("tracker", "search_issues")),
        "{calls:?}"
    );
    assert_eq!(
        s.tracker.count("delete_issue"),
        0,
        "{:?}",
        s.tracker.calls()
    );
    assert_eq!(
        s.tracker.count("search_issues"),
        0,
        "{:?}",
        s.tracker.calls()
    );

    // The budget: three calls a run; the fourth fails in the program.
    let budget = r#"
import tools
for n in range(4):
    try:
        print(n, tools.tracker.get_issue(number=n + 1))
    except tools.ToolError as e:
        print(n, "refused:", e)
"#;
    let (stdout, _) = run(&s.client, "run_python", budget).await;
    assert!(
        stdout.contains("3 refused:") && stdout.contains("max_calls_per_run"),
        "{stdout}"
    );
    assert_eq!(s.tracker.count("get_issue"), 3);

    // An upstream error, a hang past the timeout, a result over 1 MiB.
    let failures = r#"
import time, tools
for name, call in [("error", lambda: tools.tracker.get_issue(number=404)),
                   ("hang", lambda: tools.tracker.hang(seconds=30)),
                   ("big", lambda: tools.tracker.big())]:
    started = time.time()
    try:
        call()
        print(name, "answered")
    except tools.ToolError as e:
        print(name, "failed after", round(time.time() - started), "s:", e)
"#;
    let (stdout, calls) = run(&s.client, "run_python", failures).await;
    assert!(
        stdout.contains("error failed") && stdout.contains("issue 404 does not exist"),
        "{stdout}"
    );
    assert!(
        stdout.contains("hang failed after") && stdout.contains("did not answer within 1500 ms"),
        "{stdout}"
    );
    assert!(
        stdout.contains("big failed") && stdout.contains("over the 1 MiB"),
        "{stdout}"
    );
    assert!(calls.iter().all(|c| c["isError"] == true), "{calls:?}");
    let metrics = get(&format!("{}/metrics", s.server.base())).await;
    for outcome in ["refused", "timeout", "error"] {
        assert!(
            metrics.contains(&format!("outcome=\"{outcome}\"")),
            "{outcome}: {metrics}"
        );
    }
}

#[tokio::test]
async fn runs_in_a_sandbox_call_tools_across_calls_and_bash_gets_none() {
    let s = setup("").await;
    let (_, created) = call_ok(&s.client, tool("create_sandbox", json!({}))).await;
    let id = created["sandboxId"].as_str().expect("sandboxId").to_owned();
    for (n, code) in [
        "import tools\nfirst = tools.tracker.get_issue(number=7)\nprint(first)",
        "import tools\nprint(first, '|', tools.everything.echo(message='again'))",
    ]
    .into_iter()
    .enumerate()
    {
        let arguments = json!({"code": code, "sandboxId": id, "timeoutMs": 60_000});
        let (result, structured) = call_ok(&s.client, tool("run_python", arguments)).await;
        assert_eq!(structured["exitCode"], 0, "{}", text(&result));
        let stdout = structured["stdout"].as_str().unwrap_or_default();
        assert!(stdout.contains("Issue 7"), "run {n}: {stdout}");
        assert_eq!(
            structured["toolCalls"].as_array().map(Vec::len),
            Some(1),
            "run {n}"
        );
    }
    let (_, structured) = call_ok(&s.client, call("run_bash", "echo plain", None)).await;
    assert_eq!(structured["toolCalls"], json!([]));
    let _ = s
        .client
        .call_tool(tool("close_sandbox", json!({"sandboxId": id})))
        .await;
}

#[tokio::test]
async fn a_hostile_program_finds_the_secret_nowhere() {
    let s = setup("").await;
    let reversed: String = SECRET.chars().rev().collect();
    let hunt = format!(
        r#"
import os
# Reversed here, so that the program's own file does not hold it.
secret = {reversed:?}[::-1].encode()
found, searched = [], 0
def look(path, data):
    global searched
    searched += 1
    if secret in data:
        found.append(path)
for key, value in os.environ.items():
    look("env " + key, (key + "=" + value).encode())
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    for part in ("environ", "cmdline"):
        try:
            look(f"/proc/{{pid}}/{{part}}", open(f"/proc/{{pid}}/{{part}}", "rb").read())
        except OSError:
            pass
for top in ("/run", "/tmp", "/home", "/etc", "/opt", "/var", "/root"):
    for folder, _, files in os.walk(top):
        for name in files[:2000]:
            path = os.path.join(folder, name)
            try:
                if os.path.isfile(path) and os.path.getsize(path) < 4 << 20:
                    look(path, open(path, "rb").read())
            except OSError:
                pass
import tools
look("tools.list()", repr(tools.list()).encode())
print("searched", searched, "found", found)
"#
    );
    let (stdout, _) = run(&s.client, "run_python", &hunt).await;
    assert!(stdout.contains("found []"), "{stdout}");
    let searched: usize = stdout
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_default();
    assert!(searched > 10, "{stdout}");
}

#[tokio::test]
async fn an_upstream_that_dies_and_comes_back_is_called_again() {
    let mut s = setup("").await;
    let code = "import tools\nprint(tools.tracker.get_issue(number=5))";
    let (stdout, _) = run(&s.client, "run_python", code).await;
    assert!(stdout.contains("Issue 5"), "{stdout}");
    let port = s.tracker.port;
    s.tracker.stop();
    // Down: the call fails (ToolError), or, once sandbox-mcp has seen it go, the server
    // is offered without tools until it is back (AttributeError).
    let down = "import tools\ntry:\n    tools.tracker.get_issue(number=6)\n    print('answered')\nexcept (tools.ToolError, AttributeError) as e:\n    print('failed:', e)";
    let (stdout, calls) = run(&s.client, "run_python", down).await;
    assert!(stdout.contains("failed:"), "{stdout}");
    assert!(calls.iter().all(|c| c["isError"] == true), "{calls:?}");
    s.tracker = Tracker::start_on(port);
    let deadline = Instant::now() + CONNECTED;
    loop {
        let (stdout, _) = run(&s.client, "run_python", down).await;
        if stdout.contains("answered") {
            break;
        }
        assert!(Instant::now() < deadline, "never called again: {stdout}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn get(url: &str) -> String {
    reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .text()
        .await
        .expect("a body")
}
