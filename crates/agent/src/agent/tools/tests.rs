//! The modules and the relay with real interpreters, without a sandbox: the modules
//! written in a temporary folder, the relay listening there, real `python3` and `node`
//! programs calling through it, and the test standing in for the runner (it records
//! each call the relay sends on, and answers it, or holds it).

use super::schema::doc;
use super::{Folder, Modules, Relay};
use crate::agent::live::LiveOutput;
use nix::poll::{poll, PollFd, PollTimeout};
use sandbox_protocol::process::Stream;
use sandbox_protocol::tools::{
    OfferedServer, OfferedTool, ToolAnswer, ToolCall, ToolReply, ToolsOffer, MAX_CALLS_PER_RUN,
};
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A description no literal or comment of a module may let out.
const HOSTILE: &str =
    "Finds \"issues\" ('all'), a \\ backslash, */ /* and </script>\nsecond line\r\n`${x}` \u{2028}é";

fn offer() -> ToolsOffer {
    ToolsOffer {
        servers: vec![
            OfferedServer {
                name: "tracker".into(),
                tools: vec![
                    OfferedTool {
                        name: "search-issues".into(),
                        description: HOSTILE.into(),
                        input_schema: json!({
                            "type": "object",
                            "properties": {
                                "query": {"type": "string", "description": "What to look for."},
                                "limit": {"type": "integer"},
                                "max-age": {"type": "number"}
                            },
                            "required": ["query"]
                        }),
                    },
                    OfferedTool {
                        name: "fail".into(),
                        description: String::new(),
                        input_schema: Value::Null,
                    },
                ],
            },
            OfferedServer {
                name: "docs".into(),
                tools: vec![OfferedTool {
                    name: "import".into(),
                    description: "A keyword's tool.".into(),
                    input_schema: json!({}),
                }],
            },
        ],
    }
}

/// The runner's stand-in: every call the relay sent on, and how it answers them.
struct Runner {
    calls: Vec<ToolCall>,
    /// Calls not answered yet.
    pending: Vec<ToolCall>,
    /// Hold every call (answer none).
    hold: bool,
}

impl Runner {
    fn new() -> Runner {
        Runner {
            calls: Vec::new(),
            pending: Vec::new(),
            hold: false,
        }
    }

    /// The answer to `call`: an error for `fail`, else what it was asked.
    fn answer(call: &ToolCall) -> ToolAnswer {
        if call.tool == "fail" {
            return ToolAnswer::error("upstream says: no \"luck\"");
        }
        ToolAnswer {
            result: Some(json!({"tool": call.tool, "arguments": call.arguments})),
            error: None,
        }
    }
}

impl LiveOutput for Runner {
    fn output(&mut self, _stream: Stream, _bytes: &[u8]) {}

    fn call(&mut self, call: &ToolCall) -> bool {
        self.calls.push(call.clone());
        self.pending.push(call.clone());
        true
    }
}

/// A folder with the modules of `offer` written, and a relay listening in it.
struct Place {
    dir: tempfile::TempDir,
    modules: Modules,
}

impl Place {
    fn new(offer: &ToolsOffer) -> Place {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("node_modules")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("node_modules"),
            dir.path().join("home/node_modules"),
        )
        .unwrap();
        let mut modules = Modules::in_folder(Folder {
            root: dir.path().to_owned(),
        });
        modules.write(Some(offer)).unwrap();
        Place { dir, modules }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn relay(&mut self) -> Relay {
        self.modules.relay(&offer()).unwrap()
    }

    fn python(&self, code: &str) -> Child {
        Command::new("python3")
            .args(["-c", code])
            .env_clear()
            .env("PYTHONPATH", self.path().join("python"))
            .current_dir(self.path().join("home"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 starts")
    }

    /// Node running `code` from `home/<file>` (`.js`: CommonJS, `.mjs`: an ES module).
    fn node(&self, file: &str, code: &str) -> Child {
        let path: PathBuf = self.path().join("home").join(file);
        std::fs::write(&path, code).unwrap();
        Command::new("node")
            .arg(&path)
            .env_clear()
            .current_dir(self.path().join("home"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node starts")
    }
}

/// The modules of [`offer`] in a folder of their own, the relay listening there, and
/// the runner's stand-in.
fn set_up() -> (Place, Relay, Runner) {
    let mut place = Place::new(&offer());
    let relay = place.relay();
    (place, relay, Runner::new())
}

/// Serves `relay` for `child` until it exits (at most 30 s), answering each call as
/// [`Runner::answer`] does unless the runner holds them; the child's output.
fn serve(relay: &mut Relay, runner: &mut Runner, mut child: Child) -> Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the program did not end");
        serve_once(relay, runner, Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(
        output.status.success(),
        "{}\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    output
}

/// One round of the watch loop: poll what the relay wants for at most `wait`, serve
/// it, answer what came.
fn serve_once(relay: &mut Relay, runner: &mut Runner, wait: Duration) {
    let interest = relay.interest();
    let mut fds: Vec<PollFd> = interest
        .iter()
        .map(|(_, fd, events)| PollFd::new(*fd, *events))
        .collect();
    let wait = PollTimeout::try_from(wait.as_millis() as i32).unwrap();
    let _ = poll(&mut fds, wait);
    let ready: Vec<_> = interest
        .iter()
        .zip(&fds)
        .filter(|(_, fd)| fd.revents().is_some_and(|r| !r.is_empty()))
        .map(|((slot, ..), _)| *slot)
        .collect();
    drop(fds);
    relay.serve(&ready, runner);
    if !runner.hold {
        for call in std::mem::take(&mut runner.pending) {
            let answer = Runner::answer(&call);
            relay.answer(ToolReply {
                tool_result: call.id,
                answer,
            });
        }
    }
}

fn stdout(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| Value::String(line.into())))
        .collect()
}

/// What `tools.list()` says in either language.
fn listed() -> Value {
    json!([
        {"server": "tracker", "tools": [
            {"name": "search-issues", "function": "search_issues", "description": HOSTILE},
            {"name": "fail", "function": "fail", "description": ""}
        ]},
        {"server": "docs", "tools": [
            {"name": "import", "function": "_import", "description": "A keyword's tool."}
        ]}
    ])
}

#[test]
fn a_python_program_calls_with_keywords_or_a_dict_and_reads_its_tools() {
    let (place, mut relay, mut runner) = set_up();
    let code = r#"
import inspect, json, tools
f = tools.tracker.search_issues
print(json.dumps(f(query="crash", limit=2)))
print(json.dumps(f({"query": "x", "max-age": 1.5})))
print(json.dumps(tools.docs._import()))
print(json.dumps(f.__doc__))
print(json.dumps(str(inspect.signature(f))))
print(json.dumps(f.__name__))
print(json.dumps(tools.list()))
try:
    tools.tracker.fail()
except tools.ToolError as e:
    print(json.dumps(["ToolError", str(e), isinstance(e, Exception)]))
try:
    f(1, 2)
except TypeError as e:
    print(json.dumps(["TypeError", str(e)]))
"#;
    let out = serve(&mut relay, &mut runner, place.python(code));
    let lines = stdout(&out);
    let tool = &offer().servers[0].tools[0];
    assert_eq!(
        lines[0],
        json!({"tool": "search-issues", "arguments": {"query": "crash", "limit": 2}})
    );
    assert_eq!(
        lines[1],
        json!({"tool": "search-issues", "arguments": {"query": "x", "max-age": 1.5}})
    );
    assert_eq!(lines[2], json!({"tool": "import", "arguments": {}}));
    assert_eq!(lines[3], json!(doc(tool)), "the docstring, whole");
    assert_eq!(
        lines[4],
        json!("(*, query: str, limit: int = None)"),
        "keyword-only parameters, those named as identifiers"
    );
    assert_eq!(lines[5], json!("search_issues"));
    assert_eq!(lines[6], listed());
    assert_eq!(
        lines[7],
        json!(["ToolError", "upstream says: no \"luck\"", true])
    );
    assert_eq!(lines[8][0], "TypeError");
    let ids: Vec<&str> = runner.calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        ["1-1", "1-2", "1-3", "1-4"],
        "the TypeError never called"
    );
}

#[test]
fn node_requires_and_imports_the_tools_and_calls_them_at_once() {
    let (place, mut relay, mut runner) = set_up();
    let common = r#"
const out = (v) => console.log(JSON.stringify(v));
const main = async () => {
  const all = await Promise.all([1, 2, 3, 4, 5].map((n) => tracker.search_issues({ query: `q${n}` })));
  out(all.map((r) => r.arguments.query));
  out(tools.list());
  out([tracker.search_issues.name, typeof tools.ToolError]);
  try {
    await tracker.fail();
  } catch (e) {
    out([e instanceof Error, e.name, e.message]);
  }
};
"#;
    let cjs =
        format!("const tools = require('tools');\nconst {{ tracker }} = tools;\n{common}main();\n");
    let esm = format!(
        "import tools, {{ tracker, list }} from 'tools';\n{common}await main();\n\
         console.log(JSON.stringify(list === tools.list));\n"
    );
    for (file, code) in [("main.js", cjs), ("main.mjs", esm)] {
        let out = serve(&mut relay, &mut runner, place.node(file, &code));
        let lines = stdout(&out);
        assert_eq!(lines[0], json!(["q1", "q2", "q3", "q4", "q5"]), "{file}");
        assert_eq!(lines[1], listed(), "{file}");
        assert_eq!(lines[2], json!(["search_issues", "function"]), "{file}");
        assert_eq!(
            lines[3],
            json!([true, "ToolError", "upstream says: no \"luck\""]),
            "{file}"
        );
        if file == "main.mjs" {
            assert_eq!(
                lines[4],
                json!(true),
                "the ES module's names are the package's"
            );
        }
    }
    assert_eq!(runner.calls.len(), 12);
}

/// Sends `line` on a connection of its own and reads the answer, while the relay is
/// served.
fn exchange(relay: &mut Relay, runner: &mut Runner, socket: &Path, line: &[u8]) -> Value {
    let mut conn = UnixStream::connect(socket).unwrap();
    let line = line.to_vec();
    let writer = {
        let mut conn = conn.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = conn.write_all(&line);
        })
    };
    conn.set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut answer = Vec::new();
    while !answer.ends_with(b"\n") {
        assert!(Instant::now() < deadline, "no answer");
        serve_once(relay, runner, Duration::from_millis(5));
        let mut buf = [0u8; 4096];
        match std::io::Read::read(&mut conn, &mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    let _ = writer.join();
    serde_json::from_slice(&answer).unwrap_or(Value::Null)
}

#[test]
fn calls_that_are_not_offered_or_not_calls_are_refused_without_reaching_the_runner() {
    let (place, mut relay, mut runner) = set_up();
    let socket = place.modules.folder().socket();
    let refusals: [&[u8]; 5] = [
        b"{\"server\": \"tracker\", \"tool\": \"delete-all\", \"arguments\": {}}\n",
        b"{\"server\": \"nope\", \"tool\": \"fail\"}\n",
        b"{\"server\": \"tracker\", \"tool\": \"fail\", \"arguments\": [1]}\n",
        b"not json at all\n",
        b"{\"server\": \"tracker\", \"tool\": \"fail\", \"extra\": 1}\n",
    ];
    for line in refusals {
        let answer = exchange(&mut relay, &mut runner, &socket, line);
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.starts_with("tools: "), "{answer}");
    }
    let huge = [
        b"{\"server\": \"tracker\", \"tool\": \"fail\", \"arguments\": {\"x\": \"".as_slice(),
        &vec![b'a'; super::connection::MAX_LINE],
        b"\"}}\n",
    ]
    .concat();
    let answer = exchange(&mut relay, &mut runner, &socket, &huge);
    assert!(
        answer["error"].as_str().unwrap().contains("at most"),
        "{answer}"
    );
    assert!(runner.calls.is_empty(), "{:?}", runner.calls);
    let answer = exchange(
        &mut relay,
        &mut runner,
        &socket,
        b"{\"server\": \"docs\", \"tool\": \"import\"}\n",
    );
    assert_eq!(
        answer["result"]["tool"], "import",
        "a call still goes through"
    );
    // A reply to no waiting call is dropped.
    relay.answer(ToolReply {
        tool_result: "1-1".into(),
        answer: ToolAnswer::error("late"),
    });
    assert_eq!(runner.calls.len(), 1);
}

#[test]
fn idle_connections_block_nobody_but_their_own_program() {
    let (place, mut relay, mut runner) = set_up();
    let socket = place.modules.folder().socket();
    // Fewer than the cap stay open and silent, or write half a line and stop.
    let mut idle: Vec<UnixStream> = (0..8)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    idle[0].write_all(b"{\"server\": \"trac").unwrap();
    serve_once(&mut relay, &mut runner, Duration::from_millis(10));
    let answer = exchange(
        &mut relay,
        &mut runner,
        &socket,
        b"{\"server\": \"tracker\", \"tool\": \"fail\"}\n",
    );
    assert_eq!(answer["error"], "upstream says: no \"luck\"");
    drop(idle);
    // Connections that close at once, as many as the cap and more.
    for _ in 0..3 * sandbox_protocol::tools::MAX_CALLS_WAITING {
        drop(UnixStream::connect(&socket).unwrap());
        serve_once(&mut relay, &mut runner, Duration::ZERO);
    }
    let answer = exchange(
        &mut relay,
        &mut runner,
        &socket,
        b"{\"server\": \"docs\", \"tool\": \"import\"}\n",
    );
    assert_eq!(answer["result"]["tool"], "import");
}

#[test]
fn a_run_makes_at_most_its_budget_of_calls() {
    let (place, mut relay, mut runner) = set_up();
    let code = format!(
        r#"
import json, tools
for n in range({MAX_CALLS_PER_RUN}):
    tools.docs._import(n=n)
try:
    tools.docs._import()
except tools.ToolError as e:
    print(json.dumps(str(e)))
"#
    );
    let out = serve(&mut relay, &mut runner, place.python(&code));
    assert_eq!(runner.calls.len(), MAX_CALLS_PER_RUN);
    let refusal = stdout(&out)[0].as_str().unwrap().to_owned();
    assert!(
        refusal.contains(&MAX_CALLS_PER_RUN.to_string()),
        "{refusal}"
    );
}

#[test]
fn a_call_waiting_when_the_run_ends_fails_and_the_socket_goes() {
    let (place, mut relay, mut runner) = set_up();
    let socket = place.modules.folder().socket();
    runner.hold = true;
    let code = r#"
import json, tools
try:
    tools.tracker.search_issues(query="slow")
except tools.ToolError as e:
    print(json.dumps(str(e)))
"#;
    let child = place.python(code);
    let deadline = Instant::now() + Duration::from_secs(10);
    while runner.calls.is_empty() {
        assert!(Instant::now() < deadline, "no call came");
        serve_once(&mut relay, &mut runner, Duration::from_millis(20));
    }
    drop(relay);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        stdout(&out)[0],
        json!("tools: the run ended before the call was answered")
    );
    assert!(!socket.exists());
    assert!(UnixStream::connect(&socket).is_err());
}

#[test]
fn modules_follow_the_offer_and_go_without_one() {
    let mut place = Place::new(&offer());
    let first = place.modules.generation();
    place.modules.write(Some(&offer())).unwrap();
    assert_eq!(
        place.modules.generation(),
        first,
        "the same offer: unchanged"
    );
    let mut smaller = offer();
    smaller.servers.truncate(1);
    place.modules.write(Some(&smaller)).unwrap();
    assert_eq!(place.modules.generation(), first + 1);
    let js = std::fs::read_to_string(place.path().join("node_modules/tools/index.js")).unwrap();
    assert!(!js.contains("exports.docs"));
    place.modules.write(None).unwrap();
    assert!(!place.path().join("python/tools.py").exists());
    assert!(!place.path().join("node_modules/tools").exists());
    assert_eq!(place.modules.generation(), first + 2);
}
