//! Live output of runs (`Accept: application/x-ndjson`) on a real runner with real
//! sandboxes: lines arrive while the program runs, the last line is the plain answer, a
//! character split between writes arrives whole, a large output arrives whole in bounded
//! lines, refusals before the run keep their status, and a client that leaves a one-shot
//! run stops it.

mod common;

use common::{Options, Runner, TOKEN};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const NDJSON: &str = "application/x-ndjson";

/// A streamed answer: its status and content type, and its lines with when each arrived.
struct Streamed {
    status: u16,
    content_type: String,
    lines: Vec<(Instant, Value)>,
}

impl Streamed {
    /// The last line, which must be `{"result": ...}`.
    fn result(&self) -> &Value {
        let (_, last) = self.lines.last().expect("a last line");
        last.get("result")
            .unwrap_or_else(|| panic!("the last line is the result: {last}"))
    }

    /// The output lines (all but the last).
    fn outputs(&self) -> Vec<&Value> {
        let n = self.lines.len().saturating_sub(1);
        self.lines[..n].iter().map(|(_, line)| line).collect()
    }

    /// What the output lines of `stream` carried, together.
    fn text(&self, stream: &str) -> String {
        self.outputs()
            .iter()
            .filter(|line| line["stream"] == stream)
            .map(|line| line["data"].as_str().expect("data is a string"))
            .collect()
    }
}

/// POSTs `body` to `path` asking for a stream, and reads it line by line as it comes (an
/// answer that is not a stream, as one line).
async fn stream(runner: &Runner, path: &str, body: &Value) -> Streamed {
    let mut response = runner.post_streamed(path, body).await;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut lines = Vec::new();
    if content_type != NDJSON {
        let body = response.bytes().await.expect("the body");
        let value = serde_json::from_slice(&body).expect("a JSON body");
        lines.push((Instant::now(), value));
        return Streamed {
            status,
            content_type,
            lines,
        };
    }
    let mut pending = Vec::new();
    while let Some(bytes) = response.chunk().await.expect("the body") {
        let arrived = Instant::now();
        pending.extend_from_slice(&bytes);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let value = serde_json::from_slice(&line[..end])
                .unwrap_or_else(|_| panic!("a JSON line: {:?}", String::from_utf8_lossy(&line)));
            lines.push((arrived, value));
        }
    }
    assert!(pending.is_empty(), "the body ends with a whole line");
    Streamed {
        status,
        content_type,
        lines,
    }
}

/// Starts bash `code` streamed at `path` and reads its first line, which says `started`;
/// the answer, still streaming.
async fn started(runner: &Runner, path: &str, code: &str) -> reqwest::Response {
    let mut response = runner.post_streamed(path, &run_body("bash", code)).await;
    assert_eq!(response.status().as_u16(), 200);
    let first = response.chunk().await.expect("a chunk").expect("a line");
    assert!(String::from_utf8_lossy(&first).contains("started"));
    response
}

fn run_body(lang: &str, code: &str) -> Value {
    json!({"lang": lang, "code": code})
}

/// Prints a line, sleeps 1.5 s, prints another.
const PAUSED: &str = "echo first; sleep 1.5; echo second";

/// The first output line arrived more than a second before the result line.
fn assert_live(streamed: &Streamed) {
    assert_eq!(streamed.status, 200);
    assert_eq!(streamed.content_type, NDJSON);
    let (first_at, first) = &streamed.lines[0];
    assert_eq!(first, &json!({"stream": "stdout", "data": "first\n"}));
    let (result_at, _) = streamed.lines.last().expect("a result");
    let ahead = result_at.duration_since(*first_at);
    assert!(
        ahead > Duration::from_secs(1),
        "the first line came only {ahead:?} before the result"
    );
    assert_eq!(streamed.text("stdout"), "first\nsecond\n");
    assert_eq!(streamed.result()["stdout"], "first\nsecond\n");
}

#[tokio::test]
async fn a_one_shot_run_s_lines_arrive_while_it_runs() {
    let runner = Runner::start();
    let streamed = stream(&runner, "/run", &run_body("bash", PAUSED)).await;
    assert_live(&streamed);
}

#[tokio::test]
async fn a_session_run_s_lines_arrive_while_it_runs() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let path = format!("/sessions/{id}/run");
    let streamed = stream(&runner, &path, &run_body("bash", PAUSED)).await;
    assert_live(&streamed);
    assert_eq!(streamed.result()["stateLost"], false);
    // The session goes on as after a plain run.
    let next = runner.ok_in(&id, "bash", "echo again").await;
    assert_eq!(next["stdout"], "again\n");
}

/// The result with its duration taken out.
fn without_duration(mut answer: Value) -> Value {
    answer
        .as_object_mut()
        .expect("an object")
        .remove("durationMs")
        .expect("a duration");
    answer
}

#[tokio::test]
async fn the_result_line_is_the_plain_answer() {
    let runner = Runner::start();
    let program = "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)";
    let body = run_body("python", program);
    let streamed = stream(&runner, "/run", &body).await;
    let (status, plain) = runner.post(&body).await;
    assert_eq!(status, 200, "{plain}");
    assert_eq!(
        without_duration(streamed.result().clone()),
        without_duration(plain.clone())
    );
    assert_eq!(streamed.text("stdout"), "out\n");
    assert_eq!(streamed.text("stderr"), "err\n");
    assert_eq!(plain["exitCode"], 3);

    let id = runner.open_session(json!({})).await;
    let path = format!("/sessions/{id}/run");
    let streamed = stream(&runner, &path, &body).await;
    let (status, plain) = runner.run_in(&id, "python", program).await;
    assert_eq!(status, 200, "{plain}");
    assert_eq!(
        without_duration(streamed.result().clone()),
        without_duration(plain)
    );
}

#[tokio::test]
async fn a_character_split_between_writes_arrives_whole() {
    let runner = Runner::start();
    let code = r"printf '\xc3'; sleep 0.3; printf '\xa9'";
    let streamed = stream(&runner, "/run", &run_body("bash", code)).await;
    assert_eq!(streamed.status, 200);
    for line in streamed.outputs() {
        let data = line["data"].as_str().expect("data");
        assert!(!data.contains('\u{fffd}'), "a split character: {line}");
    }
    assert_eq!(streamed.text("stdout"), "é");
    assert_eq!(streamed.result()["stdout"], "é");
}

#[tokio::test]
async fn two_hundred_kib_arrive_whole_in_lines_of_at_most_64_kib() {
    let runner = Runner::start();
    let code = "import sys\nsys.stdout.write('x' * (200 * 1024))\nsys.stdout.flush()";
    let streamed = stream(&runner, "/run", &run_body("python", code)).await;
    assert_eq!(streamed.status, 200);
    let sizes: Vec<usize> = streamed
        .outputs()
        .iter()
        .map(|line| line["data"].as_str().expect("data").len())
        .collect();
    assert!(sizes.len() >= 4, "{sizes:?}");
    assert!(sizes.iter().all(|n| *n <= 64 * 1024), "{sizes:?}");
    assert_eq!(streamed.text("stdout").len(), 200 * 1024);
    assert_eq!(streamed.result()["stdout"], streamed.text("stdout"));
}

#[tokio::test]
async fn refusals_before_the_run_keep_their_status_and_body() {
    let cap = 1000;
    let runner = Runner::with(Options {
        extra: vec!["--code-cap-bytes".into(), cap.to_string()],
        ..Options::default()
    });
    let unknown = run_body("klingon", "DISPLAY 1");
    let (plain_status, plain) = runner.post(&unknown).await;
    let streamed = stream(&runner, "/run", &unknown).await;
    assert_eq!(streamed.status, plain_status);
    assert!(matches!(plain_status, 400 | 404), "{plain}");
    assert_eq!(streamed.content_type, "application/json");
    assert_eq!(streamed.lines.len(), 1);
    assert_eq!(streamed.lines[0].1["error"]["code"], plain["error"]["code"]);

    let big = run_body("bash", &"#".repeat(cap + 1));
    let streamed = stream(&runner, "/run", &big).await;
    assert_eq!(streamed.status, 413);
    assert_eq!(streamed.lines[0].1["error"]["code"], "too_large");

    let streamed = stream(&runner, "/sessions/nosuch/run", &run_body("bash", "true")).await;
    assert_eq!(streamed.status, 404);
    assert_eq!(streamed.lines[0].1["error"]["code"], "session_not_found");
}

#[tokio::test]
async fn without_the_header_the_answer_is_plain_json() {
    let runner = Runner::start();
    let response = runner
        .client
        .post(format!("{}/run", runner.url))
        .bearer_auth(TOKEN)
        .body(run_body("bash", "echo plain").to_string())
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let text = response.text().await.expect("a body");
    assert!(!text.contains('\n'), "one JSON object, no lines: {text}");
    let answer: Value = serde_json::from_str(&text).expect("one JSON object");
    assert_eq!(answer["stdout"], "plain\n");
    assert!(answer.get("result").is_none());
}

#[tokio::test]
async fn a_client_that_leaves_a_streamed_one_shot_run_stops_it() {
    let runner = Runner::with(Options {
        pool_size: 1,
        ..Options::default()
    });
    runner.wait_until_full().await;
    let marker = format!("live-leave-{}", std::process::id());
    let code = format!("echo started; exec -a {marker} sleep 60");
    let response = started(&runner, "/run", &code).await;
    // "started" comes before the shell's exec: wait for the marked process itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    while common::host_processes_with(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the program runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(response);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !common::host_processes_with(&marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the run went on after its client left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its sandbox was destroyed and the pool refilled: the runner takes the next run.
    let next = runner.run("bash", "echo next").await;
    assert_eq!(next["stdout"], "next\n");
}

#[tokio::test]
async fn a_compile_step_s_output_streams_too() {
    let runner = Runner::start();
    let broken = "int main(void) { return nope; }";
    let streamed = stream(&runner, "/run", &run_body("c", broken)).await;
    assert_eq!(streamed.status, 200);
    let result = streamed.result();
    assert_eq!(result["compileError"], true, "{result}");
    assert!(streamed.text("stderr").contains("nope"), "{result}");
    assert_eq!(result["stderr"], streamed.text("stderr"));

    let fine = "#include <stdio.h>\nint main(void) { puts(\"compiled\"); return 0; }";
    let streamed = stream(&runner, "/run", &run_body("c", fine)).await;
    assert_eq!(streamed.text("stdout"), "compiled\n");
    assert_eq!(streamed.result()["stdout"], "compiled\n");
}

#[tokio::test]
async fn a_client_that_leaves_a_streamed_session_run_leaves_it_to_its_end() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let code = "echo started; sleep 2; echo finished > left.txt";
    let response = started(&runner, &format!("/sessions/{id}/run"), code).await;
    drop(response);
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let (status, answer) = runner.run_in(&id, "bash", "cat left.txt").await;
        if status == 200 {
            break answer;
        }
        assert_eq!(status, 409, "busy while the run goes on: {answer}");
        assert!(Instant::now() < deadline, "the run never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(after["stdout"], "finished\n", "the run went on to its end");
}

/// Python's `print` without a flush: a streamed run writes its lines as they come.
const PYTHON_PAUSED: &str = "import time\nprint('first')\ntime.sleep(1.5)\nprint('second')";

#[tokio::test]
async fn python_s_print_streams_line_by_line_in_a_fresh_sandbox_and_a_session() {
    let runner = Runner::start();
    let streamed = stream(&runner, "/run", &run_body("python", PYTHON_PAUSED)).await;
    assert_live(&streamed);
    let id = runner.open_session(json!({})).await;
    let path = format!("/sessions/{id}/run");
    // Twice: the second run goes to the session's resident interpreter.
    for _ in 0..2 {
        let streamed = stream(&runner, &path, &run_body("python", PYTHON_PAUSED)).await;
        assert_live(&streamed);
    }
    // A plain run after a streamed one is block-buffered again, as into any pipe.
    let plain = runner
        .ok_in(
            &id,
            "python",
            "import sys\nprint(sys.stdout.line_buffering)",
        )
        .await;
    assert_eq!(plain["stdout"], "False\n");
}

/// Ruby's `puts`, Lua's and Perl's `print` without a flush (block-buffered into a pipe).
const INTERPRETERS_PAUSED: [(&str, &str); 3] = [
    ("ruby", "puts 'first'\nsleep 1.5\nputs 'second'"),
    (
        "lua",
        "print('first')\nlocal t = os.time() + 2\nrepeat until os.time() >= t\nprint('second')",
    ),
    (
        "perl",
        "print \"first\\n\";\nselect(undef, undef, undef, 1.5);\nprint \"second\\n\";",
    ),
];

#[tokio::test]
async fn ruby_lua_and_perl_stream_line_by_line_from_their_loaders_and_sessions() {
    let runner = Runner::start();
    for (lang, code) in INTERPRETERS_PAUSED {
        // A one-shot run from a sandbox prepared for the language (its loader).
        runner.run(lang, "").await;
        runner.wait_until_full().await;
        assert_live(&stream(&runner, "/run", &run_body(lang, code)).await);
        let id = runner.open_session(json!({})).await;
        let path = format!("/sessions/{id}/run");
        for _ in 0..2 {
            assert_live(&stream(&runner, &path, &run_body(lang, code)).await);
        }
        if lang == "ruby" {
            // A plain run after a streamed one is block-buffered again.
            let plain = runner.ok_in(&id, lang, "p STDOUT.sync").await;
            assert_eq!(plain["stdout"], "false\n");
        }
    }
}
