//! What a session's processes must not do: reach another session or a one-shot run, go
//! past the session's limits, outlive it, or keep it from freezing once they end.

use super::common::{
    held_between_calls, host_processes_with, without_resource_limits, Options, Runner,
};
use super::{code, ended, output, signal, start, started};
use serde_json::json;
use std::time::{Duration, Instant};

/// Waits until `check` holds, at most `within`.
async fn eventually(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A marker unique to this test run, for finding its processes on the host.
fn marker(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

#[tokio::test]
async fn another_session_and_a_one_shot_run_can_neither_see_nor_signal_a_process() {
    let runner = Runner::start();
    let mine = runner.open_session(json!({})).await;
    let theirs = runner.open_session(json!({})).await;
    let pid = started(&runner, &mine, "exec -a proc-victim sleep 300").await;
    let (status, answer) = output(&runner, &theirs, pid, "").await;
    assert_eq!(
        (status, code(&answer)),
        (404, "process_not_found"),
        "{answer}"
    );
    let (status, answer) = signal(&runner, &theirs, pid, "KILL").await;
    assert_eq!(
        (status, code(&answer)),
        (404, "process_not_found"),
        "{answer}"
    );
    let probe = format!(
        "ls /proc | grep -c '^[0-9]' ; grep -l proc-[v]ictim /proc/[0-9]*/cmdline 2>/dev/null | wc -l; \
         kill -KILL {pid} 2>&1 || true"
    );
    let seen = runner.ok_in(&theirs, "bash", &probe).await;
    let lines: Vec<&str> = seen["stdout"].as_str().unwrap_or("").lines().collect();
    assert_eq!(lines.get(1), Some(&"0"), "another session sees it: {seen}");
    let one_shot = runner.run("bash", &probe).await;
    let lines: Vec<&str> = one_shot["stdout"].as_str().unwrap_or("").lines().collect();
    assert_eq!(
        lines.get(1),
        Some(&"0"),
        "a one-shot run sees it: {one_shot}"
    );
    let (_, listed) = runner
        .request("GET", &format!("/sessions/{theirs}/processes"), None)
        .await;
    assert_eq!(listed["processes"], json!([]), "{listed}");
    let still = runner
        .request("GET", &format!("/sessions/{mine}/processes"), None)
        .await
        .1;
    assert_eq!(still["processes"][0]["running"], true, "{still}");
}

#[tokio::test]
async fn one_process_more_than_the_session_may_run_is_refused() {
    let runner = Runner::with(Options {
        env: vec![("RUNNER_MAX_PROCESSES".into(), "2".into())],
        ..Options::default()
    });
    let id = runner.open_session(json!({})).await;
    let first = started(&runner, &id, "sleep 300").await;
    started(&runner, &id, "sleep 300").await;
    let (status, answer) = start(&runner, &id, json!({"command": "sleep 300"})).await;
    assert_eq!(
        (status, code(&answer)),
        (429, "too_many_processes"),
        "{answer}"
    );
    signal(&runner, &id, first, "KILL").await;
    ended(&runner, &id, first).await;
    let (status, answer) = start(&runner, &id, json!({"command": "true"})).await;
    assert_eq!(status, 201, "an ended one makes room: {answer}");
}

#[tokio::test]
async fn a_fork_bomb_started_as_a_process_stays_within_the_sessions_limits() {
    if without_resource_limits("a_fork_bomb_started_as_a_process_stays_within_the_sessions_limits")
    {
        return;
    }
    let runner = Runner::start();
    let health = runner.health().await;
    let pids_max = health["limits"]["pidsMax"].as_u64().expect("pidsMax") as usize;
    let bomb = runner.open_session(json!({})).await;
    let other = runner.open_session(json!({})).await;
    let tag = marker("bomb");
    started(
        &runner,
        &bomb,
        &format!("exec -a {tag} bash -c 'b() {{ b | b & }}; b'"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let count = host_processes_with(&tag).len();
    assert!(
        count <= pids_max,
        "{count} processes, over pidsMax {pids_max}"
    );
    let calm = runner.ok_in(&other, "bash", "echo calm").await;
    assert_eq!(calm["stdout"], "calm\n", "{calm}");
    assert_eq!(runner.run("bash", "echo still").await["stdout"], "still\n");
    let (status, _) = runner
        .request("DELETE", &format!("/sessions/{bomb}"), None)
        .await;
    assert_eq!(status, 204);
    eventually(
        Duration::from_secs(10),
        "the bomb outlived its session",
        || host_processes_with(&tag).is_empty(),
    )
    .await;
}

#[tokio::test]
async fn processes_end_with_their_session_and_nothing_is_left_on_the_host() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let tag = marker("leftover");
    started(&runner, &id, &format!("exec -a {tag} sleep 300")).await;
    started(
        &runner,
        &id,
        &format!("(exec -a {tag}-child sleep 300) & exec -a {tag}-parent sleep 300"),
    )
    .await;
    eventually(
        Duration::from_secs(5),
        "the processes show on the host",
        || host_processes_with(&tag).len() == 3,
    )
    .await;
    let (status, _) = runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(status, 204);
    eventually(
        Duration::from_secs(10),
        "a process outlived its session",
        || host_processes_with(&tag).is_empty(),
    )
    .await;
}

#[tokio::test]
async fn a_session_runs_while_a_process_does_and_is_held_once_none_does() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let tag = marker("awake");
    // What a run leaves in the background is held between calls, as ever (the run waits
    // for it to exec: one held before its exec would keep the shell's command line)...
    let leave = format!(
        "(exec -a {tag}-left sleep 1000) >/dev/null 2>&1 & \
         until grep -qs {tag}-left /proc/$!/cmdline; do sleep 0.02; done"
    );
    let left = runner.ok_in(&id, "bash", &leave).await;
    assert_eq!(left["exitCode"], 0, "{left}");
    let mut host = Vec::new();
    eventually(
        Duration::from_secs(5),
        "the run's leftover shows on the host",
        || {
            host = host_processes_with(&format!("{tag}-left"));
            host.len() == 1
        },
    )
    .await;
    let leftover = host[0].split(':').next().unwrap_or_default().to_owned();
    eventually(Duration::from_secs(5), "the session rests held", || {
        held_between_calls(&leftover)
    })
    .await;
    // ...but not while a process of the API runs: the session stays awake for it.
    let pid = started(&runner, &id, &format!("exec -a {tag} sleep 2")).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!held_between_calls(&leftover), "held while a process runs");
    ended(&runner, &id, pid).await;
    eventually(
        Duration::from_secs(5),
        "not held once the process ended",
        || held_between_calls(&leftover),
    )
    .await;
}

#[tokio::test]
async fn reading_output_counts_as_a_call_for_the_idle_timeout() {
    // Idle sessions end rather than pause, so that the end is seen.
    let runner = Runner::with(Options {
        env: vec![("RUNNER_SESSION_ON_IDLE".into(), "end".into())],
        ..Options::default()
    });
    let id = runner.open_session(json!({"idleTimeoutMs": 2000})).await;
    let pid = started(&runner, &id, "while :; do echo .; sleep 0.5; done").await;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let (status, answer) = output(&runner, &id, pid, "waitMs=500").await;
        assert_eq!(status, 200, "the session ended while read: {answer}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, answer) = output(&runner, &id, pid, "").await;
    assert_eq!(
        (status, code(&answer)),
        (404, "session_not_found"),
        "{answer}"
    );
}

#[tokio::test]
async fn many_processes_one_after_another_cost_the_session_nothing_once_ended() {
    let runner = Runner::start();
    let health = runner.health().await;
    let pids_max = health["limits"]["pidsMax"].as_i64().expect("pidsMax");
    let id = runner.open_session(json!({})).await;
    // More processes than the session may hold at once, each ended before the next:
    // whatever the agent keeps of an ended one must not count against the session.
    for i in 0..pids_max + 16 {
        let (status, answer) = start(&runner, &id, json!({"command": "true"})).await;
        assert_eq!(status, 201, "process {i}: {answer}");
        ended(&runner, &id, answer["pid"].as_i64().expect("pid")).await;
    }
    let threads = runner
        .ok_in(&id, "bash", "grep Threads /proc/1/status | tr -dc 0-9")
        .await;
    let threads: i64 = threads["stdout"]
        .as_str()
        .unwrap_or("")
        .parse()
        .unwrap_or(-1);
    assert!(
        (1..=4).contains(&threads),
        "the agent holds {threads} threads"
    );
}
