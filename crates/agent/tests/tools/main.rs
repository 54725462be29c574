//! Tools called from code, the sandbox's side, for real: the jail and the agent this
//! crate builds, real `python3`, `node` and TypeScript programs importing `tools`, and
//! the test playing the runner on the agent's channel (reading its ToolCall frames,
//! writing ToolReply frames). The runner's side is tested through the runner.

mod sandbox;

use sandbox::{job, typescript_available, Answering, Sandbox};
use sandbox_protocol::tools::{OfferedServer, OfferedTool, ToolAnswer, ToolCall, ToolsOffer};
use serde_json::{json, Value};
use std::time::Duration;

fn tool(name: &str, description: &str) -> OfferedTool {
    OfferedTool {
        name: name.into(),
        description: description.into(),
        input_schema: json!({
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"]
        }),
    }
}

fn offer(server: &str, tools: &[&str]) -> ToolsOffer {
    ToolsOffer {
        servers: vec![OfferedServer {
            name: server.into(),
            tools: tools.iter().map(|t| tool(t, "Finds \"things\".")).collect(),
        }],
    }
}

/// The runner's answers: `fail` fails with the upstream's text, any other tool echoes
/// its call.
fn echo(call: &ToolCall) -> Option<ToolAnswer> {
    Some(if call.tool == "fail" {
        ToolAnswer::error("upstream: it broke")
    } else {
        ToolAnswer {
            result: Some(json!({"server": call.server, "tool": call.tool, "args": call.arguments})),
            error: None,
        }
    })
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| Value::String(l.into())))
        .collect()
}

const PYTHON: &str = r#"
import json, tools
a = tools.tracker.search_issues(query="crash")
b = tools.tracker.search_issues({"query": "hang"})
print(json.dumps([a["args"]["query"], b["args"]["query"], a["tool"]]))
try:
    tools.tracker.fail(query="x")
except tools.ToolError as e:
    print(json.dumps(["error", str(e)]))
print(json.dumps([t["name"] for s in tools.list() for t in s["tools"]]))
"#;

const NODE: &str = r#"
const { tracker, list } = require("tools");
(async () => {
  const all = await Promise.all(["a", "b", "c", "d"].map((q) => tracker.search_issues({ query: q })));
  console.log(JSON.stringify(all.map((r) => r.args.query)));
  await tracker.fail({ query: "x" }).catch((e) => console.log(JSON.stringify(["error", e.message])));
  console.log(JSON.stringify(list()[0].tools.map((t) => t.name)));
})();
"#;

const ESM: &str = r#"
import { tracker } from "tools";
const r = await tracker.search_issues({ query: "esm" });
console.log(JSON.stringify([r.args.query]));
"#;

const TYPESCRIPT: &str = r#"
import { tracker, ToolError } from "tools";
async function main(): Promise<void> {
  const r: { args: { query: string } } = await tracker.search_issues({ query: "typed" });
  console.log(JSON.stringify([r.args.query]));
  try {
    await tracker.fail({ query: "x" });
  } catch (e) {
    console.log(JSON.stringify(["error", (e as Error).message, e instanceof ToolError]));
  }
}
main();
"#;

#[test]
fn python_node_and_typescript_programs_call_the_offered_tools() {
    let offered = || Some(offer("tracker", &["search-issues", "fail"]));
    let mut answering = echo;
    for (lang, prepared) in [("python", true), ("python", false), ("node", true)] {
        let mut sandbox = Sandbox::start();
        if prepared {
            sandbox.prepare(lang);
        }
        let code = if lang == "python" { PYTHON } else { NODE };
        let ran = sandbox.run(job(lang, code, offered()), &mut answering);
        assert_eq!(ran.outcome.exit_code, 0, "{lang}: {ran:?}");
        let out = lines(&ran.outcome.stdout);
        let queries = if lang == "python" {
            json!(["crash", "hang", "search-issues"])
        } else {
            json!(["a", "b", "c", "d"])
        };
        assert_eq!(out[0], queries, "{lang}: {ran:?}");
        assert_eq!(out[1], json!(["error", "upstream: it broke"]), "{lang}");
        assert_eq!(out[2], json!(["search-issues", "fail"]), "{lang}");
        assert_eq!(
            ran.live_stdout, ran.outcome.stdout,
            "{lang}: streamed as it came"
        );
        let ids: Vec<&str> = ran.calls.iter().map(|c| c.id.as_str()).collect();
        let count = if lang == "python" { 3 } else { 5 };
        assert_eq!(ids.len(), count, "{lang}: {ids:?}");
    }
    let mut sandbox = Sandbox::start();
    let ran = sandbox.run(job("node", ESM, offered()), &mut answering);
    assert_eq!(lines(&ran.outcome.stdout)[0], json!(["esm"]), "{ran:?}");
    assert!(
        typescript_available(),
        "no package set with TypeScript: run `sandbox-runner packages build` first (the \
         README's test command does)"
    );
    let mut sandbox = Sandbox::start();
    sandbox.prepare("typescript");
    let ran = sandbox.run(job("typescript", TYPESCRIPT, offered()), &mut answering);
    let out = lines(&ran.outcome.stdout);
    assert_eq!(out[0], json!(["typed"]), "{ran:?}");
    assert_eq!(
        out[1],
        json!(["error", "upstream: it broke", true]),
        "{ran:?}"
    );
}

#[test]
fn a_tool_not_offered_fails_in_the_program_and_no_call_leaves_the_sandbox() {
    let mut sandbox = Sandbox::start();
    let code = r#"
import json, socket, tools
def ask(line):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect("/run/sandbox-tools/socket")
        s.sendall(line)
        return s.recv(4096).decode()
print(ask(b'{"server": "tracker", "tool": "delete-everything", "arguments": {}}\n'), end="")
print(ask(b'{"server": "other", "tool": "search-issues"}\n'), end="")
print(ask(b'garbage\n'), end="")
print(json.dumps(hasattr(tools.tracker, "delete_everything")))
"#;
    let ran = sandbox.run(
        job("python", code, Some(offer("tracker", &["search-issues"]))),
        &mut echo,
    );
    let out = lines(&ran.outcome.stdout);
    assert_eq!(out.len(), 4, "{ran:?}");
    for refusal in &out[..3] {
        assert!(
            refusal["error"].as_str().unwrap().starts_with("tools: "),
            "{ran:?}"
        );
    }
    assert_eq!(out[3], json!(false));
    assert!(ran.calls.is_empty(), "{:?}", ran.calls);
}

#[test]
fn the_tools_folder_is_the_agent_s_and_no_program_writes_in_it() {
    let mut sandbox = Sandbox::start();
    let code = r#"
import json, os, stat
tried = {}
for path in ["/run/sandbox-tools/x", "/run/sandbox-tools/python/tools.py",
             "/run/sandbox-tools/node_modules/tools/index.js", "/home/node_modules/x"]:
    try:
        with open(path, "w") as f:
            f.write("pwned")
        tried[path] = "written"
    except OSError as e:
        tried[path] = e.errno
for name, op in [("unlink", lambda: os.unlink("/run/sandbox-tools/socket")),
                 ("chmod", lambda: os.chmod("/run/sandbox-tools/python", 0o777)),
                 ("rename", lambda: os.rename("/run/sandbox-tools/python", "/run/sandbox-tools/p"))]:
    try:
        op()
        tried[name] = "done"
    except OSError as e:
        tried[name] = e.errno
st = os.stat("/run/sandbox-tools")
sock = os.stat("/run/sandbox-tools/socket")
print(json.dumps(tried))
print(json.dumps([st.st_uid, oct(st.st_mode & 0o7777), stat.S_ISSOCK(sock.st_mode),
                  oct(sock.st_mode & 0o777), os.readlink("/home/node_modules")]))
"#;
    let ran = sandbox.run(
        job("python", code, Some(offer("tracker", &["search-issues"]))),
        &mut echo,
    );
    let out = lines(&ran.outcome.stdout);
    for (what, result) in out[0].as_object().expect("the attempts") {
        assert!(result.is_i64(), "{what}: {result} ({ran:?})");
    }
    assert_eq!(
        out[1],
        json!([0, "0o755", true, "0o666", "/run/sandbox-tools/node_modules"]),
        "{ran:?}"
    );
}

/// A session: a new offer is what the next run's `tools` says, in the resident Python
/// and Node alike; a run without tools finds no module.
#[test]
fn a_session_sees_each_run_s_offer_and_none_without_one() {
    let mut sandbox = Sandbox::start();
    let session = |lang: &str, code: &str, tools: Option<ToolsOffer>| {
        let mut job = job(lang, code, tools);
        job.session = true;
        job
    };
    let python = "import tools\nprint([s['server'] for s in tools.list()])";
    let node = "console.log(require('tools').list().map((s) => s.server).join())";
    for (lang, code) in [("python", python), ("node", node)] {
        for server in ["first", "second"] {
            let ran = sandbox.run(
                session(lang, code, Some(offer(server, &["search"]))),
                &mut echo,
            );
            let text = ran
                .outcome
                .stdout
                .trim()
                .trim_matches(|c| "[]'".contains(c));
            assert_eq!(text, server, "{lang}: {ran:?}");
        }
        let ran = sandbox.run(session(lang, code, None), &mut echo);
        assert_ne!(ran.outcome.exit_code, 0, "{lang}: {ran:?}");
        assert!(
            ran.outcome.stderr.contains("No module named 'tools'")
                || ran.outcome.stderr.contains("Cannot find module"),
            "{lang}: {ran:?}"
        );
    }
}

/// The job ends (its program exits, or its time is up) with a call still waiting: the
/// call fails in the program, the answer comes on time, and a late reply is dropped.
#[test]
fn a_run_ends_on_time_with_calls_waiting_and_a_late_reply_is_dropped() {
    let mut sandbox = Sandbox::start();
    let session = |code: &str, timeout_ms| {
        let mut job = job("python", code, Some(offer("tracker", &["search"])));
        job.session = true;
        job.timeout_ms = timeout_ms;
        job
    };
    let mut hold = |_: &ToolCall| None;
    let exits = r#"
import threading, tools
threading.Thread(target=lambda: tools.tracker.search(query="never"), daemon=True).start()
import time; time.sleep(0.5)
print("leaving")
"#;
    let ran = sandbox.run(session(exits, 10_000), &mut hold);
    assert_eq!(ran.outcome.stdout, "leaving\n", "{ran:?}");
    assert_eq!(ran.calls.len(), 1);
    assert!(ran.took < Duration::from_secs(5), "{ran:?}");
    sandbox.reply(&ran.calls[0].id, ToolAnswer::error("too late"));
    let waits = r#"
import tools
print("asking", flush=True)
tools.tracker.search(query="forever")
"#;
    let ran = sandbox.run(session(waits, 2_000), &mut hold);
    assert!(ran.outcome.timed_out, "{ran:?}");
    assert!(ran.took < Duration::from_secs(6), "{ran:?}");
    let answering: Answering<'_> = &mut echo;
    let ran = sandbox.run(
        session(
            "import tools\nprint(tools.tracker.search(query='after')['args'])",
            5_000,
        ),
        answering,
    );
    assert_eq!(ran.outcome.stdout, "{'query': 'after'}\n", "{ran:?}");
}

/// A program that connects many times without writing, writes a line of megabytes and
/// garbage: the agent stays responsive (the output streams, the job ends on time), and
/// the next run's calls work.
#[test]
fn a_hostile_program_holds_up_only_itself() {
    let mut sandbox = Sandbox::start();
    let hostile = r#"
import socket, time
held = []
for n in range(200):
    s = socket.socket(socket.AF_UNIX)
    s.setblocking(False)
    try:
        s.connect("/run/sandbox-tools/socket")
    except OSError:
        pass
    held.append(s)
big = socket.socket(socket.AF_UNIX)
big.connect("/run/sandbox-tools/socket")
big.setblocking(False)
try:
    big.send(b'{"server": "tracker", "tool": "search", "arguments": {"q": "' + b"x" * (3 << 20))
except OSError:
    pass
for n in range(5):
    print("still here", n, flush=True)
    time.sleep(0.2)
time.sleep(60)
"#;
    let mut hostile_job = job("python", hostile, Some(offer("tracker", &["search"])));
    hostile_job.session = true;
    hostile_job.timeout_ms = 3_000;
    let ran = sandbox.run(hostile_job, &mut echo);
    assert!(ran.outcome.timed_out, "{ran:?}");
    assert!(ran.took < Duration::from_secs(8), "{ran:?}");
    assert!(ran.live_stdout.contains("still here 4"), "{ran:?}");
    assert!(ran.calls.is_empty());
    let mut next = job(
        "python",
        "import tools\nprint(tools.tracker.search(query='ok')['args']['query'])",
        Some(offer("tracker", &["search"])),
    );
    next.session = true;
    let ran = sandbox.run(next, &mut echo);
    assert_eq!(ran.outcome.stdout, "ok\n", "{ran:?}");
}
