//! A session's processes (`/sessions/{id}/processes`), against the real runner and
//! real sandboxes: the contract (`contract.rs`), and what a hostile process must not do
//! (`hostile.rs`: other sessions, limits, cleanup, freezing).

#[path = "../common/mod.rs"]
mod common;

mod contract;
mod hostile;

use common::{Runner, TOKEN};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Starts `command` in session `id`; the status and the answer.
async fn start(runner: &Runner, id: &str, body: Value) -> (u16, Value) {
    runner
        .request("POST", &format!("/sessions/{id}/processes"), Some(&body))
        .await
}

/// Starts `command` in session `id` (201) and returns its pid.
async fn started(runner: &Runner, id: &str, command: &str) -> i64 {
    let (status, answer) = start(runner, id, json!({ "command": command })).await;
    assert_eq!(status, 201, "{answer}");
    answer["pid"].as_i64().expect("an integer pid")
}

/// `GET .../output` with `query`; status and answer.
async fn output(runner: &Runner, id: &str, pid: i64, query: &str) -> (u16, Value) {
    runner
        .request(
            "GET",
            &format!("/sessions/{id}/processes/{pid}/output?{query}"),
            None,
        )
        .await
}

/// Reads a process's output to its end (following offsets with `waitMs`), within
/// `within`; the last answer and both streams whole.
async fn read_to_end(
    runner: &Runner,
    id: &str,
    pid: i64,
    within: Duration,
) -> (Value, String, String) {
    let deadline = Instant::now() + within;
    let (mut out, mut err) = (String::new(), String::new());
    let (mut from_out, mut from_err) = (0, 0);
    loop {
        let query = format!("stdoutFrom={from_out}&stderrFrom={from_err}&waitMs=2000");
        let (status, answer) = output(runner, id, pid, &query).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["stdoutFrom"], from_out, "nothing skipped: {answer}");
        out.push_str(answer["stdout"].as_str().expect("stdout"));
        err.push_str(answer["stderr"].as_str().expect("stderr"));
        from_out = answer["stdoutTo"].as_u64().expect("stdoutTo");
        from_err = answer["stderrTo"].as_u64().expect("stderrTo");
        let quiet = answer["stdout"] == "" && answer["stderr"] == "";
        if answer["running"] == false && quiet {
            return (answer, out, err);
        }
        assert!(Instant::now() < deadline, "still running: {answer}");
    }
}

/// Posts raw bytes to a process's standard input (`query` after `?`); the status and
/// the answer (null when empty).
async fn write_stdin(
    runner: &Runner,
    id: &str,
    pid: i64,
    query: &str,
    bytes: &[u8],
) -> (u16, Value) {
    let resp = runner
        .client
        .post(format!(
            "{}/sessions/{id}/processes/{pid}/stdin?{query}",
            runner.url
        ))
        .bearer_auth(TOKEN)
        .body(bytes.to_vec())
        .send()
        .await
        .expect("the runner answered");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("a body");
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON, got {text:?}"))
    };
    (status, value)
}

/// Sends `signal` to a process; the status and the answer.
async fn signal(runner: &Runner, id: &str, pid: i64, signal: &str) -> (u16, Value) {
    let body = json!({ "signal": signal });
    runner
        .request(
            "POST",
            &format!("/sessions/{id}/processes/{pid}/signal"),
            Some(&body),
        )
        .await
}

/// The session's processes.
async fn list(runner: &Runner, id: &str) -> Vec<Value> {
    let (status, answer) = runner
        .request("GET", &format!("/sessions/{id}/processes"), None)
        .await;
    assert_eq!(status, 200, "{answer}");
    answer["processes"].as_array().expect("a list").clone()
}

/// Waits until the process has ended; its entry in the list.
async fn ended(runner: &Runner, id: &str, pid: i64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let entry = list(runner, id)
            .await
            .into_iter()
            .find(|p| p["pid"] == pid)
            .expect("the process is listed");
        if entry["running"] == false {
            return entry;
        }
        assert!(Instant::now() < deadline, "it did not end: {entry}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The error code of an error answer.
fn code(answer: &Value) -> &str {
    answer["error"]["code"].as_str().unwrap_or("(no code)")
}
