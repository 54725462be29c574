//! Tools called from code, the runner's side, on a real runner with real sandboxes: the
//! test plays the run's caller (sandbox-mcp's part), reading each `toolCall` line of the
//! streamed answer and answering it at `POST /runs/{runId}/tool-results/{id}`, while real
//! Python, Node and TypeScript programs call their `tools` module.

mod common;

use common::tools::{offer, post_answer, result, run_with_tools};
use common::{Runner, TOKEN};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_python_program_calls_tools_and_gets_their_answers_and_errors() {
    let runner = Runner::start();
    let code = r#"
import tools
print(tools.docs.find(q="alpha")["pages"])
print(tools.docs.find({"q": "beta"})["pages"][0])
try:
    tools.docs.fail_always()
except tools.ToolError as e:
    print("failed:", e)
print([t["name"] for s in tools.list() for t in s["tools"]])
print(tools.docs.find.__doc__.splitlines()[0])
"#;
    let run = run_with_tools(&runner, "/run", "python", code, true).await;
    let result = result(&run);
    assert_eq!(result["exitCode"], 0, "{result}");
    assert_eq!(
        result["stdout"],
        "['alpha-1', 'x-2']\nbeta-1\nfailed: the upstream said no\n['find', 'fail-always']\nFinds pages.\n"
    );
    let names: Vec<_> = run
        .calls
        .iter()
        .map(|c| (c["server"].clone(), c["tool"].clone()))
        .collect();
    assert_eq!(
        names,
        [
            (json!("docs"), json!("find")),
            (json!("docs"), json!("find")),
            (json!("docs"), json!("fail-always"))
        ]
    );
    assert_eq!(run.calls[0]["arguments"], json!({"q": "alpha"}));
    // The run is over: its answers are refused, and each call was answered once.
    let run_id = run.run_id.expect("a run id");
    let (status, body) = post_answer(&runner, &run_id, "1", &json!({"result": 1})).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("run_not_found"), "{body}");
}

#[tokio::test]
async fn node_and_typescript_programs_import_the_module_both_ways() {
    let runner = Runner::start();
    let esm = r#"
import { docs } from "tools";
const [a, b] = await Promise.all([docs.find({ q: "a" }), docs.find({ q: "b" })]);
console.log(a.pages[0], b.pages[0]);
await docs.fail_always({}).catch((e) => console.log(e instanceof Error, e.message));
"#;
    let run = run_with_tools(&runner, "/run", "node", esm, true).await;
    assert_eq!(
        result(&run)["stdout"],
        "a-1 b-1\ntrue the upstream said no\n",
        "{}",
        run.last
    );
    let cjs = r#"const { docs } = require("tools"); docs.find({ q: "c" }).then((r) => console.log(r.pages[0]));"#;
    let run = run_with_tools(&runner, "/run", "node", cjs, true).await;
    assert_eq!(result(&run)["stdout"], "c-1\n", "{}", run.last);
    let ts = r#"
import { docs } from "tools";
const found: { pages: string[] } = await docs.find({ q: "t" });
console.log(found.pages.length);
"#;
    let run = run_with_tools(&runner, "/run", "typescript", ts, true).await;
    assert_eq!(result(&run)["stdout"], "2\n", "{}", run.last);
}

#[tokio::test]
async fn a_session_s_runs_call_tools_run_after_run() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let path = format!("/sessions/{id}/run");
    let first = run_with_tools(
        &runner,
        &path,
        "python",
        "import tools\nx = tools.docs.find(q='one')",
        true,
    )
    .await;
    assert_eq!(result(&first)["exitCode"], 0, "{}", first.last);
    let second = run_with_tools(
        &runner,
        &path,
        "python",
        "print(x['pages'][0], tools.docs.find(q='two')['pages'][0])",
        true,
    )
    .await;
    assert_eq!(
        result(&second)["stdout"],
        "one-1 two-1\n",
        "{}",
        second.last
    );
    assert_ne!(first.run_id, second.run_id, "each run has its own id");
    let node = run_with_tools(
        &runner,
        &path,
        "node",
        "const t = require('tools'); t.docs.find({q: 'n'}).then((r) => console.log(r.pages[0]))",
        true,
    )
    .await;
    assert_eq!(result(&node)["stdout"], "n-1\n", "{}", node.last);
}

#[tokio::test]
async fn a_call_the_offer_does_not_name_never_reaches_the_caller() {
    let runner = Runner::start();
    let code = r#"
import json, socket
def raw(request):
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/sandbox-tools/socket")
    s.sendall(request + b"\n")
    return s.makefile().readline()
print("error" in json.loads(raw(json.dumps({"server": "docs", "tool": "drop", "arguments": {}}).encode())))
print("error" in json.loads(raw(json.dumps({"server": "other", "tool": "find", "arguments": {}}).encode())))
print("error" in json.loads(raw(b"not json")))
import tools
print(hasattr(tools.docs, "drop"))
"#;
    let run = run_with_tools(&runner, "/run", "python", code, true).await;
    assert_eq!(
        result(&run)["stdout"],
        "True\nTrue\nTrue\nFalse\n",
        "{}",
        run.last
    );
    assert!(run.calls.is_empty(), "{:?}", run.calls);
}

#[tokio::test]
async fn a_call_never_answered_ends_with_the_run_and_hostile_connections_hold_nothing_up() {
    let runner = Runner::start();
    // Connections that never write, one huge line, garbage, then a call nobody answers:
    // the run ends at its timeout, on time, and the runner goes on.
    let code = r#"
import socket
held = []
for _ in range(40):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(0.5)
    try:
        s.connect("/run/sandbox-tools/socket")
        held.append(s)
    except OSError:
        break
big = socket.socket(socket.AF_UNIX)
big.settimeout(1)
try:
    big.connect("/run/sandbox-tools/socket")
    big.sendall(b"x" * (4 << 20))
except OSError:
    pass
print("sent", len(held) >= 16, flush=True)
for s in held + [big]:
    s.close()
import tools
tools.docs.find(q="never answered")
"#;
    let started = Instant::now();
    let body = json!({"lang": "python", "code": code, "tools": offer(), "timeoutMs": 3000});
    let response = runner.post_streamed("/run", &body).await;
    let text = response.text().await.expect("the body");
    let last: Value = serde_json::from_str(text.lines().last().expect("a line")).expect("JSON");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(last["result"]["timedOut"], true, "{text}");
    assert_eq!(last["result"]["stdout"], "sent True\n", "{text}");
    assert!(
        text.contains("toolCall"),
        "the call reached the caller: {text}"
    );
    assert_eq!(runner.run("bash", "echo after").await["stdout"], "after\n");
}

#[tokio::test]
async fn without_an_offer_there_is_no_module_and_no_socket() {
    let runner = Runner::start();
    let out = runner
        .run(
            "python",
            "import os\nprint(os.path.exists('/run/sandbox-tools/socket'))\nimport tools",
        )
        .await;
    assert_eq!(out["stdout"], "False\n", "{out}");
    assert!(
        out["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("ModuleNotFoundError"),
        "{out}"
    );
    let (status, body) = runner
        .post_raw(
            json!({"lang": "python", "code": "1", "tools": offer()}).to_string(),
            Some(TOKEN),
        )
        .await;
    assert_eq!(status, 400, "a plain answer cannot carry calls: {body}");
}
