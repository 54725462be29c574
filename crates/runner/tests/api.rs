//! The HTTP contract: answers, errors, health, metrics, overload and shutdown.

mod common;

use common::{exit_code, stdout, Options, Runner, TOKEN};
use serde_json::{json, Value};
use std::process::Command;

fn error_code(v: &Value) -> &str {
    v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("error body, got {v}"))
}

#[tokio::test]
async fn hello_in_each_language() {
    let runner = Runner::start();
    for (lang, code, expected) in [
        ("bash", "echo 1", "1\n"),
        ("python", "print(1)", "1\n"),
        ("node", "console.log(1)", "1\n"),
    ] {
        let out = runner.run(lang, code).await;
        assert_eq!(stdout(&out), expected, "{lang}: {out}");
        assert_eq!(exit_code(&out), 0);
        for field in [
            "timedOut",
            "oomKilled",
            "stdoutTruncated",
            "stderrTruncated",
        ] {
            assert_eq!(out[field], false, "{field}");
        }
        assert!(out["durationMs"].is_u64());
    }
}

#[tokio::test]
async fn a_program_killed_by_any_signal_says_so_at_once() {
    // A real-time signal too (no name in most libraries): 128 + its number, reported when
    // it happens, never as a timeout.
    let runner = Runner::start();
    for (code, expected) in [("kill -TERM $$", 143), ("kill -s RTMIN $$", 128 + 34)] {
        let out = runner.run("bash", code).await;
        assert_eq!(exit_code(&out), expected, "{code}: {out}");
        assert_eq!(out["timedOut"], false, "{code}: {out}");
    }
}

#[tokio::test]
async fn bad_input_gets_400() {
    let runner = Runner::start();
    let cases = [
        "not json".to_owned(),
        "".to_owned(),
        json!({"lang": "klingon", "code": "puts 1"}).to_string(),
        json!({"code": "print(1)"}).to_string(),
        json!({"lang": "python"}).to_string(),
        json!({"lang": "python", "code": 5}).to_string(),
        json!({"lang": "python", "code": "1", "timeoutMs": 0}).to_string(),
        json!({"lang": "python", "code": "1", "timeoutMs": -5}).to_string(),
        json!({"lang": "python", "code": "1", "timeoutMs": 1.5}).to_string(),
        json!({"lang": "python", "code": "1", "timeoutMs": "10"}).to_string(),
        json!({"lang": "python", "code": "1", "timeoutMs": 300_001}).to_string(),
        json!({"lang": "python", "code": "1", "stdin": "x"}).to_string(),
        json!(["python", "print(1)"]).to_string(),
    ];
    for body in cases {
        let (status, value) = runner.post_raw(body.clone(), Some(TOKEN)).await;
        assert_eq!(status, 400, "{body}: {value}");
        assert_eq!(error_code(&value), "bad_request");
        assert!(value["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    let max = json!({"lang": "bash", "code": "echo ok", "timeoutMs": 300_000});
    assert_eq!(
        runner.post(&max).await.0,
        200,
        "the maximum itself is accepted"
    );
}

#[tokio::test]
async fn missing_or_wrong_token_gets_401() {
    let runner = Runner::start();
    let body = json!({"lang": "bash", "code": "echo 1"}).to_string();
    for token in [None, Some("wrong"), Some(""), Some("test-token-4f9c2e1")] {
        let (status, value) = runner.post_raw(body.clone(), token).await;
        assert_eq!(status, 401, "{token:?}");
        assert_eq!(error_code(&value), "unauthorized");
    }
    let resp = runner
        .client
        .post(format!("{}/run", runner.url))
        .header("Authorization", format!("Basic {TOKEN}"))
        .body(body)
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
}

#[tokio::test]
async fn oversized_code_gets_413() {
    let runner = Runner::start();
    let big = "#".repeat((1 << 20) + 1);
    let (status, value) = runner.post(&json!({"lang": "python", "code": big})).await;
    assert_eq!(status, 413, "{value}");
    assert_eq!(error_code(&value), "too_large");
    let escaped = "\u{1}".repeat((1 << 20) + 1); // 6x longer once JSON-escaped
    let (status, value) = runner
        .post(&json!({"lang": "python", "code": escaped}))
        .await;
    assert_eq!(status, 413, "{value}");
    let at_cap = format!("print(1)\n{}", "#".repeat((1 << 20) - 9));
    let (status, value) = runner
        .post(&json!({"lang": "python", "code": at_cap}))
        .await;
    assert_eq!(status, 200, "{value}");
    assert_eq!(stdout(&value), "1\n");
}

#[tokio::test]
async fn unknown_paths_and_methods_get_json_errors() {
    let runner = Runner::start();
    let (status, body) = runner.get("/nope").await;
    assert_eq!(status, 404);
    assert_eq!(
        error_code(&serde_json::from_str(&body).expect("json")),
        "not_found"
    );
    let (status, body) = runner.get("/run").await;
    assert_eq!(status, 405);
    assert_eq!(
        error_code(&serde_json::from_str(&body).expect("json")),
        "method_not_allowed"
    );
}

#[tokio::test]
async fn health_tells_the_pool_state() {
    let runner = Runner::with(Options {
        pool_size: 3,
        ..Default::default()
    });
    let mut health = runner.health().await;
    // A VM takes seconds to boot (minutes for three under TCG on two cores).
    for _ in 0..2400 {
        if health["available"] == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        health = runner.health().await;
    }
    assert_eq!(health["status"], "ok");
    assert_eq!(health["poolSize"], 3);
    assert_eq!(health["available"], 3);
    assert_eq!(health["backend"], common::backend().as_str());
    assert_eq!(health["version"], env!("CARGO_PKG_VERSION"));
    let limits = &health["limits"];
    assert_eq!(limits["memoryMb"], 256, "{health}");
    assert_eq!(limits["cpus"], 0.5, "{health}");
    assert_eq!(limits["pidsMax"], 64, "{health}");
    assert_eq!(limits["defaultTimeoutMs"], 15_000, "{health}");
    assert_eq!(limits["maxTimeoutMs"], 300_000, "{health}");
    assert_eq!(limits["outputCapBytes"], 1 << 20, "{health}");
    assert_eq!(limits["codeCapBytes"], 1 << 20, "{health}");
    assert_eq!(limits["network"], false, "{health}");
    // While a run holds a sandbox, at most two are warm.
    let run = runner.run_with_timeout("bash", "sleep 1.5", None);
    let probe = async {
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        runner.health().await
    };
    let (_, during) = tokio::join!(run, probe);
    assert!(
        during["available"].as_u64().expect("available") <= 2,
        "{during}"
    );
}

#[tokio::test]
async fn metrics_count_runs() {
    let runner = Runner::start();
    runner.run("python", "print(1)").await;
    runner.run("bash", "exit 2").await;
    let (status, text) = runner.get("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        text.contains(r#"sandbox_runner_runs_total{lang="python",outcome="ok"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"sandbox_runner_runs_total{lang="bash",outcome="nonzero_exit"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("sandbox_runner_run_duration_seconds_bucket"),
        "{text}"
    );
    assert!(text.contains("sandbox_runner_pool_size 2"), "{text}");
    assert!(text.contains("sandbox_runner_queue_length 0"), "{text}");
}

#[tokio::test]
async fn a_full_pool_and_queue_answer_429_and_503_with_retry_after() {
    let runner = Runner::with(Options {
        pool_size: 1,
        extra: vec![
            "--queue-size".into(),
            "1".into(),
            "--queue-timeout-ms".into(),
            "300".into(),
        ],
        env: Vec::new(),
        ..Options::default()
    });
    let slow = json!({"lang": "bash", "code": "sleep 2"}).to_string();
    let send = || {
        runner
            .client
            .post(format!("{}/run", runner.url))
            .bearer_auth(TOKEN)
            .body(slow.clone())
            .send()
    };
    let (a, b, c) = tokio::join!(send(), send(), send());
    let mut statuses: Vec<(u16, Option<String>)> = [a, b, c]
        .into_iter()
        .map(|r| {
            let r = r.expect("answered");
            let retry = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap_or("").to_owned());
            (r.status().as_u16(), retry)
        })
        .collect();
    statuses.sort();
    assert_eq!(statuses[0], (200, None), "{statuses:?}");
    assert_eq!(statuses[1], (429, Some("1".into())), "{statuses:?}");
    assert_eq!(statuses[2], (503, Some("1".into())), "{statuses:?}");
}

#[tokio::test]
async fn fifty_concurrent_requests_against_a_pool_of_four_all_end() {
    let runner = Runner::with(Options {
        pool_size: 4,
        extra: vec!["--queue-size".into(), "16".into()],
        env: Vec::new(),
        ..Options::default()
    });
    let requests = (0..50).map(|i| {
        let runner = &runner;
        async move {
            let body = json!({"lang": "python", "code": format!("print({i})")}).to_string();
            (i, runner.post_raw(body, Some(TOKEN)).await)
        }
    });
    let mut ok = 0;
    for (i, (status, value)) in futures::future::join_all(requests).await {
        match status {
            200 => {
                assert_eq!(stdout(&value), format!("{i}\n"), "answers must never mix");
                ok += 1;
            }
            429 | 503 => assert!(value["error"]["code"].is_string()),
            other => panic!("unexpected status {other}: {value}"),
        }
    }
    assert!(ok >= 4, "only {ok} of 50 ran");
    assert_eq!(runner.health().await["status"], "ok");
}

#[tokio::test]
async fn refuses_to_start_without_a_token_or_with_no_auth_off_loopback() {
    common::require_root();
    let bin = env!("CARGO_BIN_EXE_sandbox-runner");
    let no_token = Command::new(bin)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("SANDBOX_RUNNER_TOKEN")
        .output()
        .expect("ran");
    assert!(!no_token.status.success());
    assert!(String::from_utf8_lossy(&no_token.stderr).contains("SANDBOX_RUNNER_TOKEN"));
    let open = Command::new(bin)
        .args(["serve", "--listen", "0.0.0.0:0", "--no-auth"])
        .output()
        .expect("ran");
    assert!(!open.status.success());
    assert!(String::from_utf8_lossy(&open.stderr).contains("loopback"));
}

#[tokio::test]
async fn run_subcommand_exits_with_the_program_code() {
    common::require_root();
    let out = Command::new(env!("CARGO_BIN_EXE_sandbox-runner"))
        .args([
            "run",
            "--lang",
            "python",
            "-c",
            "import sys; print('hi'); sys.exit(7)",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("ran");
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
}

#[tokio::test]
async fn shutdown_destroys_every_sandbox_and_cgroup() {
    let runner = Runner::with(Options {
        pool_size: 3,
        ..Default::default()
    });
    runner.run("bash", "echo warm").await;
    let dirs = common::instance_cgroups(runner.pid());
    assert!(!dirs.is_empty(), "the runner's cgroups exist while it runs");
    let status = runner.stop();
    assert!(
        status.success(),
        "SIGTERM ends the runner cleanly: {status}"
    );
    for dir in dirs {
        let left: Vec<_> = std::fs::read_dir(&dir)
            .map(|entries| entries.flatten().filter(|e| e.path().is_dir()).collect())
            .unwrap_or_default();
        assert!(
            !dir.exists(),
            "{} left behind, holding {:?}",
            dir.display(),
            left.iter().map(|e| e.file_name()).collect::<Vec<_>>()
        );
    }
}
