//! A session's grant: narrowed with PATCH, kept by a paused session woken in a new sandbox
//! and by a fork, and its bytes capped over the session's whole life.

use crate::common::{stdout, Runner};
use crate::{in_test_net, runner_env, runner_in, ALLOWED, BIG, OTHER, PAGE};
use serde_json::json;

#[test]
fn a_session_narrowed_with_patch_loses_its_host() {
    in_test_net(
        "s",
        |net| runner_in(net, &format!("{ALLOWED},*.example.test")),
        |runner, _site| async move {
            let (status, info) = runner
                .request("POST", "/sessions", Some(&json!({"egress": [ALLOWED]})))
                .await;
            assert_eq!(status, 201, "{info}");
            assert_eq!(info["egress"], json!([ALLOWED]), "{info}");
            let id = info["id"].as_str().unwrap().to_owned();
            let fetch = format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{ALLOWED}/");
            let before = runner.ok_in(&id, "bash", &fetch).await;
            assert_eq!(stdout(&before), format!("{PAGE}\n200"), "{before}");
            assert_eq!(before["egress"]["connections"], 1, "{before}");
            let python = format!(
                "import urllib.request\nprint(urllib.request.urlopen('http://{ALLOWED}/', timeout=10).read().decode(), end='')"
            );
            let resident = runner.ok_in(&id, "python", &python).await;
            assert_eq!(
                stdout(&resident),
                PAGE,
                "a session's interpreter: {resident}"
            );
            paused_and_forked_keep_their_host(&runner, &id, &fetch).await;
            let (status, started) = runner
                .request(
                    "POST",
                    &format!("/sessions/{id}/processes"),
                    Some(&json!({"command": format!("{fetch} > /tmp/by-process")})),
                )
                .await;
            assert_eq!(status, 201, "{started}");
            let by_process = runner
                .ok_in(&id, "bash", "for i in $(seq 100); do grep -q 200 /tmp/by-process 2>/dev/null && break; sleep 0.1; done; cat /tmp/by-process")
                .await;
            assert_eq!(
                stdout(&by_process),
                format!("{PAGE}\n200"),
                "a process: {by_process}"
            );
            let path = format!("/sessions/{id}");
            let (status, refused) = runner
                .request("PATCH", &path, Some(&json!({"egress": [OTHER]})))
                .await;
            assert_eq!(status, 400, "{refused}");
            assert_eq!(refused["error"]["code"], "egress_not_allowed", "{refused}");
            let (status, narrowed) = runner
                .request("PATCH", &path, Some(&json!({"egress": []})))
                .await;
            assert_eq!(status, 200, "{narrowed}");
            assert_eq!(narrowed["egress"], json!([]), "{narrowed}");
            let (_, shown) = runner.request("GET", &path, None).await;
            assert_eq!(shown["egress"], json!([]), "{shown}");
            let after = runner.ok_in(&id, "bash", &fetch).await;
            assert!(stdout(&after).ends_with("\n403"), "{after}");
            assert_eq!(after["egress"]["refused"], 1, "{after}");
            let (status, run_egress) = runner
                .request(
                    "POST",
                    &format!("/sessions/{id}/run"),
                    Some(&json!({"lang": "bash", "code": "true", "egress": [ALLOWED]})),
                )
                .await;
            assert_eq!(status, 400, "a session's run takes no egress: {run_egress}");
            let (status, _) = runner.request("DELETE", &path, None).await;
            assert_eq!(status, 204);
        },
    );
}

/// A session woken from its pause, in a new sandbox, and a fork of it keep its grant.
async fn paused_and_forked_keep_their_host(runner: &Runner, id: &str, fetch: &str) {
    let (status, paused) = runner
        .request("POST", &format!("/sessions/{id}/pause"), None)
        .await;
    assert_eq!(status, 200, "{paused}");
    let woken = runner.ok_in(id, "bash", fetch).await;
    assert_eq!(woken["resumed"], true, "{woken}");
    assert_eq!(stdout(&woken), format!("{PAGE}\n200"), "{woken}");
    let (status, forked) = runner
        .request(
            "POST",
            &format!("/sessions/{id}/fork"),
            Some(&json!({"count": 1})),
        )
        .await;
    assert_eq!(status, 201, "{forked}");
    let fork = forked["sessions"][0]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let (_, info) = runner
        .request("GET", &format!("/sessions/{fork}"), None)
        .await;
    assert_eq!(info["egress"], json!([ALLOWED]), "{info}");
    let in_fork = runner.ok_in(&fork, "bash", fetch).await;
    assert_eq!(stdout(&in_fork), format!("{PAGE}\n200"), "{in_fork}");
    let (status, _) = runner
        .request("DELETE", &format!("/sessions/{fork}"), None)
        .await;
    assert_eq!(status, 204);
}

#[test]
fn a_sessions_bytes_are_capped_over_its_whole_life() {
    let cap = 100_000;
    in_test_net(
        "b",
        |net| {
            runner_env(
                net,
                ALLOWED,
                &[("RUNNER_EGRESS_MAX_BYTES", &cap.to_string())],
            )
        },
        |runner, _site| async move {
            let id = runner.open_session(json!({"egress": [ALLOWED]})).await;
            let big = format!("curl -s -m 10 http://{ALLOWED}/big.bin | wc -c");
            let first = runner.ok_in(&id, "bash", &big).await;
            let got: usize = stdout(&first).trim().parse().expect("a count");
            assert!(
                got < BIG,
                "{got} bytes of {BIG} through a cap of {cap}: {first}"
            );
            let moved = &first["egress"];
            let total = moved["bytesIn"].as_u64().unwrap() + moved["bytesOut"].as_u64().unwrap();
            assert!(total <= cap, "{first}");
            let fetch = format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{ALLOWED}/");
            let next = runner.ok_in(&id, "bash", &fetch).await;
            assert!(
                stdout(&next).ends_with("\n403"),
                "the cap holds across runs: {next}"
            );
            assert!(!stdout(&next).contains(PAGE), "{next}");
        },
    );
}
