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

/// A runner whose pool keeps one sandbox.
fn one_sandbox_runner() -> Runner {
    Runner::with(Options {
        pool_size: 1,
        ..Options::default()
    })
}

/// Bash that counts the session's `sleep` processes, once the one a previous run started
/// in the background has executed (it may not have when that run answered).
const SLEEPERS: &str = "for i in $(seq 50); do ps -eo comm | grep -q '^sleep$' && break; \
                        sleep 0.1; done; ps -eo comm | grep -c '^sleep$'";

/// Bash that starts `sleep SECONDS` in the background and returns once it runs as
/// `sleep` (a session is stopped when its run answers: a child stopped before its exec
/// would show on the host as the bash that forked it).
fn background_sleep(seconds: u32) -> String {
    format!("sleep {seconds} & until grep -qs {seconds} /proc/$!/cmdline; do sleep 0.02; done")
}

/// Waits until a background process with `marker` in its command line shows on the host
/// (the host's view of /proc may lag the sandbox's).
async fn wait_for_process(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while host_processes_with(marker).len() != 1 {
        assert!(
            Instant::now() < deadline,
            "no single {marker:?} on the host: {:?}",
            host_processes_with(marker)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

    runner
        .ok_in(id, "bash", "echo kept > ~/note; echo tmp > /tmp/t")
        .await;
    let out = runner
        .ok_in(
            id,
            "python",
            "print(open('/home/sandbox/note').read().strip(), open('/tmp/t').read().strip())",
        )
        .await;
    assert_eq!(stdout(&out), "kept tmp\n", "{out}");

    // A background process that keeps the output pipe open: the run still returns when
    // its foreground ends, and the process lives on for the next run.
    let started = Instant::now();
    let out = runner.ok_in(id, "bash", "sleep 300 & echo started").await;
    assert_eq!(stdout(&out), "started\n", "{out}");
    assert!(started.elapsed() < Duration::from_secs(10), "{out}");
    let out = runner.ok_in(id, "bash", SLEEPERS).await;
    assert_eq!(stdout(&out), "1\n", "{out}");
    let out = runner
        .ok_in(
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
    let a = runner.open_session(json!({})).await;
    let b = runner.open_session(json!({})).await;
    assert_ne!(a, b);
    runner
        .ok_in(&a, "bash", "echo secret > ~/a; sleep 300 &")
        .await;
    assert_eq!(stdout(&runner.ok_in(&a, "bash", SLEEPERS).await), "1\n");
    let out = runner
        .ok_in(
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
    let id = runner.open_session(json!({})).await;
    runner.ok_in(&id, "bash", "echo 1 > ~/f").await;
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
    let (status, busy) = runner.run_in(&id, "bash", "echo 2").await;
    assert_eq!(status, 409, "{busy}");
    assert_eq!(error_code(&busy), "session_busy");
    let (_, info) = runner
        .request("GET", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(info["busy"], true, "{info}");

    let timed_out = slow.await.unwrap();
    assert_eq!(timed_out["timedOut"], true, "{timed_out}");
    let out = runner.ok_in(&id, "bash", "cat ~/f").await;
    assert_eq!(stdout(&out), "1\n", "the files outlive a timeout: {out}");
}

#[tokio::test]
async fn a_session_stays_usable_after_running_out_of_memory() {
    if common::without_resource_limits("a_session_stays_usable_after_running_out_of_memory") {
        return;
    }
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    runner.ok_in(&id, "bash", "echo 1 > ~/f").await;
    runner.ok_in(&id, "python", "before = 1").await;
    let out = runner
        .ok_in(
            &id,
            "python",
            "b = bytearray(400 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1",
        )
        .await;
    assert_eq!(out["oomKilled"], true, "{out}");
    assert_eq!(
        out["stateLost"], true,
        "the interpreter was the one killed: {out}"
    );
    let out = runner
        .ok_in(&id, "python", "print('before' in globals())")
        .await;
    assert_eq!(stdout(&out), "False\n", "{out}");
    let out = runner.ok_in(&id, "bash", "cat ~/f").await;
    assert_eq!(stdout(&out), "1\n", "{out}");
    assert_eq!(
        out["oomKilled"], false,
        "a later run is not counted OOM: {out}"
    );
}

#[tokio::test]
async fn delete_ends_everything_and_unknown_ids_get_404() {
    let runner = one_sandbox_runner();
    let id = runner.open_session(json!({})).await;
    runner.ok_in(&id, "bash", &background_sleep(3217)).await;
    wait_for_process("sleep 3217").await;
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
    let (status, body) = runner.run_in(&id, "bash", "echo 1").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(error_code(&body), "session_not_found");
    assert_eq!(runner.health().await["sessions"], 0);
}

#[tokio::test]
async fn sessions_end_at_their_idle_timeout_and_their_ttl() {
    // Idle sessions end rather than pause (the default; tests/pause covers that).
    let runner = Runner::with(Options {
        env: vec![("RUNNER_SESSION_ON_IDLE".into(), "end".into())],
        ..Options::default()
    });
    let idle = runner.open_session(json!({"idleTimeoutMs": 1000})).await;
    let (_, info) = runner
        .request("GET", &format!("/sessions/{idle}"), None)
        .await;
    assert_eq!(info["idleTimeoutMs"], 1000, "{info}");
    let ttl = runner.open_session(json!({"ttlMs": 2500})).await;
    let started = Instant::now();
    // The TTL ends a session however busy it keeps.
    while started.elapsed() < Duration::from_millis(2000) {
        runner.ok_in(&ttl, "bash", "true").await;
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
        env: Vec::new(),
        ..Options::default()
    });
    runner.open_session(json!({})).await;
    runner.open_session(json!({})).await;
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
    let runner = one_sandbox_runner();
    let id = runner.open_session(json!({})).await;
    runner.ok_in(&id, "bash", &background_sleep(3218)).await;
    wait_for_process("sleep 3218").await;
    runner.kill();
    // The next runner removes what the killed one left (its cgroups, and so the
    // session's processes).
    let next = one_sandbox_runner();
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

/// PUT of raw bytes; the status.
async fn put(runner: &Runner, id: &str, path: &str, bytes: Vec<u8>) -> (u16, String) {
    let resp = runner
        .client
        .put(format!("{}/sessions/{id}/files/{path}", runner.url))
        .bearer_auth(TOKEN)
        .body(bytes)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

/// GET of a file: the status and the raw body.
async fn get(runner: &Runner, id: &str, path: &str) -> (u16, Vec<u8>) {
    let resp = runner
        .client
        .get(format!("{}/sessions/{id}/files/{path}", runner.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn files_go_in_and_out_of_a_session_s_home() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let bytes: Vec<u8> = (0..=255u8).cycle().take(3 * 256 + 7).collect();
    assert_eq!(
        put(&runner, &id, "data/in/all.bin", bytes.clone()).await.0,
        204
    );
    let (status, back) = get(&runner, &id, "data/in/all.bin").await;
    assert_eq!(status, 200);
    assert_eq!(back, bytes);

    // The program sees it, as its own; what it writes comes back.
    let out = runner
        .ok_in(
            &id,
            "bash",
            "stat -c '%U %s' ~/data/in/all.bin; printf 'made by the program' > ~/data/out.txt",
        )
        .await;
    assert_eq!(stdout(&out), "sandbox 775\n", "{out}");
    let (status, made) = get(&runner, &id, "data/out.txt").await;
    assert_eq!(
        (status, made.as_slice()),
        (200, &b"made by the program"[..])
    );

    let (status, listing) = runner
        .request("GET", &format!("/sessions/{id}/files"), None)
        .await;
    assert_eq!(status, 200, "{listing}");
    let entries: Vec<(String, u64, String)> = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["size"].as_u64().unwrap(),
                f["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for want in [
        ("data".to_owned(), 0, "dir".to_owned()),
        ("data/in".to_owned(), 0, "dir".to_owned()),
        ("data/in/all.bin".to_owned(), 775, "file".to_owned()),
        ("data/out.txt".to_owned(), 19, "file".to_owned()),
    ] {
        assert!(entries.contains(&want), "{want:?} in {listing}");
    }
    assert_eq!(listing["truncated"], false);

    // A file larger than the body limit of /run (6 MiB) still goes in: 10 MiB.
    let big = vec![b'x'; 10 << 20];
    assert_eq!(put(&runner, &id, "big", big).await.0, 204);
    let out = runner.ok_in(&id, "bash", "stat -c %s ~/big").await;
    assert_eq!(stdout(&out), "10485760\n", "{out}");
}

#[tokio::test]
async fn paths_out_of_the_home_folder_are_refused_and_touch_nothing() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    // Links the program made, to the root and to a file outside the home folder.
    runner
        .ok_in(
            &id,
            "bash",
            "ln -s / ~/root; ln -s /etc/passwd ~/pw; mkdir ~/d; ln -s .. ~/d/up",
        )
        .await;
    // Slashes percent-encoded around '..', so that the HTTP client (which resolves dot
    // segments, encoded or not) sends them as they are.
    for path in [
        "root/etc/passwd",
        "pw",
        "d/up/pw",
        "d%2F..%2F..%2Fetc%2Fpasswd",
        "..%2Fx",
        "a%2F..%2F..%2Fx",
    ] {
        let (status, body) = get(&runner, &id, path).await;
        assert_eq!(
            status,
            400,
            "GET {path}: {}",
            String::from_utf8_lossy(&body)
        );
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(error_code(&body), "bad_path", "{path}");
    }
    for path in ["root/tmp/escaped", "pw", "d/up/escaped", "%2Ftmp%2Fescaped"] {
        let (status, body) = put(&runner, &id, path, b"x".to_vec()).await;
        assert_eq!(status, 400, "PUT {path}: {body}");
    }
    let out = runner.ok_in(&id, "bash",
        "ls /tmp/escaped /escaped ~/../escaped 2>&1 | grep -c 'No such file'; head -c 4 /etc/passwd",
    )
    .await;
    assert_eq!(stdout(&out), "3\nroot", "nothing was written: {out}");

    let (status, body) = get(&runner, &id, "missing/file").await;
    assert_eq!(status, 404);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error_code(&body), "file_not_found");
    let (status, _) = get(&runner, &id, "d").await;
    assert_eq!(status, 400, "a folder is not a file");
    let (status, _) = get(&runner, "00000000000000000000000000000000", "x").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn files_over_the_cap_get_413() {
    let runner = Runner::with(Options {
        pool_size: 1,
        extra: vec!["--file-cap-bytes".into(), "1000".into()],
        env: Vec::new(),
        ..Options::default()
    });
    let id = runner.open_session(json!({})).await;
    assert_eq!(put(&runner, &id, "ok", vec![1; 1000]).await.0, 204);
    let (status, body) = put(&runner, &id, "too-big", vec![1; 1001]).await;
    assert_eq!(status, 413, "{body}");
    runner
        .ok_in(&id, "bash", "head -c 5000 /dev/zero > ~/made-big")
        .await;
    let (status, body) = get(&runner, &id, "made-big").await;
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&body));
}
