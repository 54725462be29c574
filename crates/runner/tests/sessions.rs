//! Sessions: sandboxes that live across runs (`/sessions...`), against the real runner
//! and real sandboxes.

mod common;

use common::{exit_code, host_processes_with, stdout, Options, Runner, TOKEN};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn error_code(v: &Value) -> &str {
    v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("error body, got {v}"))
}

/// Opens a session (201) and returns its id.
async fn open(runner: &Runner, body: Value) -> String {
    let (status, info) = runner.request("POST", "/sessions", Some(&body)).await;
    assert_eq!(status, 201, "{info}");
    info["id"].as_str().expect("an id").to_owned()
}

/// A run in a session: status and body.
async fn run_in(runner: &Runner, id: &str, lang: &str, code: &str) -> (u16, Value) {
    let body = json!({"lang": lang, "code": code});
    runner
        .request("POST", &format!("/sessions/{id}/run"), Some(&body))
        .await
}

/// A run in a session that must answer 200.
async fn ok_in(runner: &Runner, id: &str, lang: &str, code: &str) -> Value {
    let (status, out) = run_in(runner, id, lang, code).await;
    assert_eq!(status, 200, "{out}");
    out
}

#[tokio::test]
async fn a_session_keeps_its_files_and_background_processes_between_runs() {
    let runner = Runner::start();
    let (status, info) = runner.request("POST", "/sessions", None).await;
    assert_eq!(status, 201, "{info}");
    let id = info["id"].as_str().unwrap();
    assert_eq!(id.len(), 32, "128 bits as hex: {id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    assert_eq!(info["idleTimeoutMs"], 600_000);
    let expires = info["expiresAt"].as_str().unwrap();
    assert!(
        expires.ends_with('Z') && expires.contains('T'),
        "RFC 3339 UTC: {expires}"
    );

    ok_in(&runner, id, "bash", "echo kept > ~/note; echo tmp > /tmp/t").await;
    let out = ok_in(
        &runner,
        id,
        "python",
        "print(open('/home/sandbox/note').read().strip(), open('/tmp/t').read().strip())",
    )
    .await;
    assert_eq!(stdout(&out), "kept tmp\n", "{out}");

    // A background process that keeps the output pipe open: the run still returns when
    // its foreground ends, and the process lives on for the next run.
    let started = Instant::now();
    let out = ok_in(&runner, id, "bash", "sleep 300 & echo started").await;
    assert_eq!(stdout(&out), "started\n", "{out}");
    assert!(started.elapsed() < Duration::from_secs(10), "{out}");
    let out = ok_in(&runner, id, "bash", "ps -eo comm | grep -c '^sleep$'").await;
    assert_eq!(stdout(&out), "1\n", "{out}");
    let out = ok_in(
        &runner,
        id,
        "node",
        "console.log(require('fs').readFileSync('/home/sandbox/note', 'utf8').trim())",
    )
    .await;
    assert_eq!(stdout(&out), "kept\n", "{out}");

    let (status, info) = runner
        .request("GET", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(info["runs"], 5, "{info}");
    assert_eq!(info["busy"], false, "{info}");
    assert_eq!(info["id"], id);
}

#[tokio::test]
async fn two_sessions_see_nothing_of_each_other() {
    let runner = Runner::start();
    let a = open(&runner, json!({})).await;
    let b = open(&runner, json!({})).await;
    assert_ne!(a, b);
    ok_in(&runner, &a, "bash", "echo secret > ~/a; sleep 300 &").await;
    let out = ok_in(
        &runner,
        &b,
        "bash",
        "cat ~/a 2>&1; ls /tmp; ps -eo comm | grep -c '^sleep$'",
    )
    .await;
    let text = stdout(&out);
    assert!(!text.contains("secret"), "{out}");
    assert!(
        text.trim_end().ends_with('0'),
        "no sleep of the other session: {out}"
    );
    // One-shot runs neither.
    let out = runner
        .run("bash", "cat /home/sandbox/a 2>&1; echo done")
        .await;
    assert!(!stdout(&out).contains("secret"), "{out}");
}

#[tokio::test]
async fn one_run_at_a_time_and_the_session_stays_after_a_timeout() {
    let runner = Runner::start();
    let id = open(&runner, json!({})).await;
    ok_in(&runner, &id, "bash", "echo 1 > ~/f").await;
    let slow = {
        let body = json!({"lang": "bash", "code": "sleep 20", "timeoutMs": 2000});
        let request = runner
            .client
            .post(format!("{}/sessions/{id}/run", runner.url))
            .bearer_auth(TOKEN)
            .body(body.to_string());
        tokio::spawn(async move { request.send().await.unwrap().json::<Value>().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, busy) = run_in(&runner, &id, "bash", "echo 2").await;
    assert_eq!(status, 409, "{busy}");
    assert_eq!(error_code(&busy), "session_busy");
    let (_, info) = runner
        .request("GET", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(info["busy"], true, "{info}");

    let timed_out = slow.await.unwrap();
    assert_eq!(timed_out["timedOut"], true, "{timed_out}");
    let out = ok_in(&runner, &id, "bash", "cat ~/f").await;
    assert_eq!(stdout(&out), "1\n", "the files outlive a timeout: {out}");
}

#[tokio::test]
async fn a_session_stays_usable_after_running_out_of_memory() {
    if common::without_resource_limits("a_session_stays_usable_after_running_out_of_memory") {
        return;
    }
    let runner = Runner::start();
    let id = open(&runner, json!({})).await;
    ok_in(&runner, &id, "bash", "echo 1 > ~/f").await;
    let out = ok_in(
        &runner,
        &id,
        "python",
        "b = bytearray(400 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1",
    )
    .await;
    assert_eq!(out["oomKilled"], true, "{out}");
    let out = ok_in(&runner, &id, "bash", "cat ~/f").await;
    assert_eq!(stdout(&out), "1\n", "{out}");
    assert_eq!(
        out["oomKilled"], false,
        "a later run is not counted OOM: {out}"
    );
}

#[tokio::test]
async fn delete_ends_everything_and_unknown_ids_get_404() {
    let runner = Runner::with(Options {
        pool_size: 1,
        ..Options::default()
    });
    let id = open(&runner, json!({})).await;
    ok_in(&runner, &id, "bash", "sleep 3217 &").await;
    assert_eq!(host_processes_with("sleep 3217").len(), 1);
    let (status, body) = runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(status, 204, "{body}");
    assert!(
        host_processes_with("sleep 3217").is_empty(),
        "the session's processes are gone when DELETE answers"
    );
    for (method, path) in [
        ("GET", format!("/sessions/{id}")),
        ("DELETE", format!("/sessions/{id}")),
        (
            "GET",
            "/sessions/00000000000000000000000000000000".to_owned(),
        ),
    ] {
        let (status, body) = runner.request(method, &path, None).await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_eq!(error_code(&body), "session_not_found");
    }
    let (status, body) = run_in(&runner, &id, "bash", "echo 1").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(error_code(&body), "session_not_found");
    assert_eq!(runner.health().await["sessions"], 0);
}

#[tokio::test]
async fn sessions_end_at_their_idle_timeout_and_their_ttl() {
    let runner = Runner::start();
    let idle = open(&runner, json!({"idleTimeoutMs": 1000})).await;
    let (_, info) = runner
        .request("GET", &format!("/sessions/{idle}"), None)
        .await;
    assert_eq!(info["idleTimeoutMs"], 1000, "{info}");
    let ttl = open(&runner, json!({"ttlMs": 2500})).await;
    let started = Instant::now();
    // The TTL ends a session however busy it keeps.
    while started.elapsed() < Duration::from_millis(2000) {
        ok_in(&runner, &ttl, "bash", "true").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for id in [&idle, &ttl] {
        let (status, body) = runner
            .request("GET", &format!("/sessions/{id}"), None)
            .await;
        assert_eq!(status, 404, "{id}: {body}");
    }
}

#[tokio::test]
async fn the_number_of_sessions_is_capped_and_bad_requests_are_refused() {
    let runner = Runner::with(Options {
        pool_size: 1,
        extra: vec!["--max-sandbox-sessions".into(), "2".into()],
    });
    open(&runner, json!({})).await;
    open(&runner, json!({})).await;
    let (status, body) = runner.request("POST", "/sessions", Some(&json!({}))).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(error_code(&body), "too_many_sessions");
    let health = runner.health().await;
    assert_eq!(health["sessions"], 2, "{health}");
    assert_eq!(health["maxSessions"], 2, "{health}");

    for body in [
        json!({"idleTimeoutMs": 0}),
        json!({"ttlMs": 86_400_001u64}),
        json!({"idle": 5}),
        json!([1]),
    ] {
        let (status, answer) = runner.request("POST", "/sessions", Some(&body)).await;
        assert_eq!(status, 400, "{body}: {answer}");
    }
    let anonymous = runner
        .client
        .post(format!("{}/sessions", runner.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
}

#[tokio::test]
async fn a_killed_runner_leaves_no_session_behind() {
    let runner = Runner::with(Options {
        pool_size: 1,
        ..Options::default()
    });
    let id = open(&runner, json!({})).await;
    ok_in(&runner, &id, "bash", "sleep 3218 &").await;
    assert_eq!(host_processes_with("sleep 3218").len(), 1);
    runner.kill();
    // The next runner removes what the killed one left (its cgroups, and so the
    // session's processes).
    let next = Runner::with(Options {
        pool_size: 1,
        ..Options::default()
    });
    let out = next.run("bash", "echo 1").await;
    assert_eq!(exit_code(&out), 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !host_processes_with("sleep 3218").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the killed runner's session lives on"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
