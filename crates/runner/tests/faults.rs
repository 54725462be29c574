//! Faults: a runner killed mid-run, and what the next one does about it.

mod common;

use common::{host_processes_with, instance_cgroups, Runner};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Sends `POST /run` on a task of its own; the answer (or the error) comes from the handle.
fn post_in_background(
    runner: &Runner,
    body: serde_json::Value,
) -> JoinHandle<reqwest::Result<reqwest::Response>> {
    let url = format!("{}/run", runner.url);
    let client = runner.client.clone();
    tokio::spawn(async move {
        client
            .post(url)
            .bearer_auth(common::TOKEN)
            .json(&body)
            .send()
            .await
    })
}

/// Waits until a process whose command line holds `marker` runs on the host.
async fn wait_until_running(marker: &str) {
    let started = Instant::now();
    while host_processes_with(marker).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the run never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_killed_runner_leaves_no_process_and_the_next_one_cleans_its_cgroups() {
    let runner = Runner::with(common::Options {
        pool_size: 3,
        ..Default::default()
    });
    let marker = format!("7{}.113", std::process::id());
    let body = json!({"lang": "bash", "code": format!("sleep {marker}; echo never"), "timeoutMs": 120_000});
    let in_flight = post_in_background(&runner, body);
    wait_until_running(&marker).await;
    let pid = runner.pid();
    runner.kill();
    assert!(
        in_flight.await.expect("task").is_err(),
        "the killed runner cannot answer"
    );
    // The agents notice their runner is gone: running and warm sandboxes end at once.
    let left = instance_cgroups(pid);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !host_processes_with(&marker).is_empty() || processes_in(&left) > 0 {
        assert!(
            Instant::now() < deadline,
            "{} processes left running",
            processes_in(&left)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !left.is_empty(),
        "a killed runner cannot remove its cgroups"
    );
    let next = Runner::start();
    for dir in &left {
        assert!(
            !dir.exists(),
            "{} was not cleaned up by the next runner",
            dir.display()
        );
    }
    assert_eq!(common::stdout(&next.run("bash", "echo ok").await), "ok\n");
}

/// Processes in the sandbox cgroups below these instance folders.
fn processes_in(instances: &[std::path::PathBuf]) -> usize {
    instances
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flat_map(|entries| entries.flatten())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| std::fs::read_to_string(e.path().join("cgroup.procs")).ok())
        .map(|procs| procs.lines().count())
        .sum()
}

#[tokio::test]
async fn sigterm_lets_runs_in_flight_finish_and_exits_zero() {
    let runner = Runner::start();
    let url = format!("{}/run", runner.url);
    let client = runner.client.clone();
    let body = json!({"lang": "bash", "code": "sleep 1.5; echo finished"});
    let in_flight = post_in_background(&runner, body);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = nix::unistd::Pid::from_raw(runner.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let late = client
        .post(&url)
        .bearer_auth(common::TOKEN)
        .json(&json!({"lang": "bash", "code": "echo late"}))
        .send()
        .await
        .expect("a draining runner still listens");
    assert_eq!(late.status(), 503, "a draining runner takes no new run");
    let late: serde_json::Value = late.json().await.expect("json");
    assert_eq!(late["error"]["code"], "draining");
    let answer = in_flight
        .await
        .expect("task")
        .expect("the run in flight is answered");
    assert_eq!(answer.status(), 200);
    let value: serde_json::Value = answer.json().await.expect("json");
    assert_eq!(common::stdout(&value), "finished\n");
    let pid = runner.pid();
    let status = runner.stop();
    assert!(status.success(), "{status}");
    assert!(instance_cgroups(pid).is_empty());
}

#[tokio::test]
async fn sigterm_kills_runs_that_outlast_the_grace_period() {
    let runner = Runner::with(common::Options {
        pool_size: 2,
        extra: vec!["--shutdown-grace-ms".into(), "300".into()],
        env: Vec::new(),
        ..common::Options::default()
    });
    let marker = format!("6{}.271", std::process::id());
    let body = json!({"lang": "bash", "code": format!("sleep {marker}")});
    let in_flight = post_in_background(&runner, body);
    wait_until_running(&marker).await;
    let pid = runner.pid();
    let stopping = Instant::now();
    let status = runner.stop();
    assert!(status.success(), "{status}");
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "the grace period bounds the stop"
    );
    assert!(host_processes_with(&marker).is_empty());
    assert!(instance_cgroups(pid).is_empty());
    // The caller gets an answer or a closed connection, never a hang.
    let _ = tokio::time::timeout(Duration::from_secs(5), in_flight)
        .await
        .expect("the caller is not left hanging");
}

#[tokio::test]
async fn a_caller_that_goes_away_stops_its_run() {
    let runner = Runner::with(common::Options {
        pool_size: 1,
        ..Default::default()
    });
    let marker = format!("5{}.337", std::process::id());
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(1500))
        .build()
        .expect("client");
    let body = json!({"lang": "bash", "code": format!("sleep {marker}"), "timeoutMs": 120_000});
    let gave_up = impatient
        .post(format!("{}/run", runner.url))
        .bearer_auth(common::TOKEN)
        .json(&body)
        .send()
        .await;
    assert!(gave_up.is_err(), "the client timed out");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !host_processes_with(&marker).is_empty() || runner.health().await["available"] != 1 {
        assert!(
            Instant::now() < deadline,
            "the abandoned run still holds its sandbox: {:?}",
            host_processes_with(&marker)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        common::stdout(&runner.run("bash", "echo next").await),
        "next\n"
    );
}
