//! Many runners behind one `sandbox-mcp serve` (issue 15), all real: three
//! `sandbox-runner serve` on loopback, given as a comma-separated `SANDBOX_RUNNER_URL`.
//! Calls spread over them (counted from each runner's own `/metrics`), a SIGKILLed runner's
//! share goes to the others, a full runner's 429 spills to another, no program runs twice,
//! a sandbox's calls go to the runner that holds it from any replica and say "session
//! lost" once that runner is gone, and `/health` and `/metrics` show the runners.
//!
//! Needs the runner binary (built beside these tests, or SANDBOX_RUNNER_BIN) and root.

mod common;
#[path = "common/observe.rs"]
mod observe;
#[path = "common/scale_out.rs"]
mod scale_out;

use std::time::Duration;

use common::Server;
use common::{call, connect, start_mcp, start_mcp_with_token, start_runner_with_token, text, tool};
use nix::sys::signal::{kill, Signal};
use observe::{get_json, metrics, runs_started};
use rmcp::model::CallToolResult;
use rmcp::service::RunningService;
use rmcp::RoleClient;
use scale_out::{seven_times, seven_times_output, stdout_of, PoolEnv};
use serde_json::json;

type Client = RunningService<RoleClient, ()>;

/// `n` runners with one token, started with `extra` flags.
fn runners(token: &str, n: usize, extra: &[&str]) -> Vec<Server> {
    (0..n)
        .map(|_| start_runner_with_token(token.to_owned(), extra))
        .collect()
}

/// The environment of a server in front of `runners`, polling their health every
/// `health_ms`.
fn pool_env(runners: &[Server], token: &str, health_ms: u64) -> PoolEnv {
    PoolEnv::new(runners.iter().map(Server::base), token, health_ms)
}

/// Programs the runner has started, from its `/metrics`.
async fn runs_of(runner: &Server) -> u64 {
    runs_started(runner.base()).await
}

/// `count` calls, `at_once` at a time, numbered from `first`; each prints its number
/// times 7. Returns each call's result.
async fn batch(
    client: &Client,
    first: u64,
    count: u64,
) -> Vec<(u64, Result<CallToolResult, String>)> {
    let calls = (first..first + count).map(|n| async move {
        let params = call("run_bash", &seven_times(n), Some(10_000));
        let outcome = client.call_tool(params).await.map_err(|e| e.to_string());
        (n, outcome)
    });
    futures::future::join_all(calls).await
}

fn sigkill(server: &mut Server) {
    kill(server.pid(), Signal::SIGKILL).expect("SIGKILL");
    assert!(
        server.wait_for_exit(Duration::from_secs(10)).is_some(),
        "runner did not exit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_calls_spread_over_three_runners_and_survive_a_sigkill() {
    let token = common::token();
    let mut runners = runners(&token, 3, &[]);
    let mcp = start_mcp(&pool_env(&runners, &token, 300).vars());
    let client = connect(&mcp, &mcp.token).await.expect("connect");
    let mut answered = 0u64;
    // 30 calls, six at a time, with all three runners up.
    for round in 0..5 {
        for (n, outcome) in batch(&client, round * 6, 6).await {
            let result = outcome.expect("tools/call");
            assert_eq!(stdout_of(&result), seven_times_output(n));
            answered += 1;
        }
    }
    let before: Vec<u64> = futures::future::join_all(runners.iter().map(runs_of)).await;
    assert!(
        before.iter().all(|&runs| runs >= 3),
        "30 calls should spread over all three runners: {before:?}"
    );
    assert_eq!(
        before.iter().sum::<u64>(),
        answered,
        "each call ran once: {before:?}"
    );
    let metrics = metrics(mcp.base()).await;
    for runner in &runners {
        assert!(
            metrics.contains(&format!(
                "sandbox_mcp_runner_calls_total{{runner=\"{}/\"}}",
                runner.base()
            )),
            "{metrics}"
        );
    }
    // The third runner dies; the other 30 calls are all answered by the other two.
    let killed_runs = before[2];
    sigkill(&mut runners[2]);
    for round in 5..10 {
        for (n, outcome) in batch(&client, round * 6, 6).await {
            let result = outcome.expect("tools/call");
            assert_eq!(
                stdout_of(&result),
                seven_times_output(n),
                "after the SIGKILL"
            );
            answered += 1;
        }
    }
    assert_eq!(answered, 60);
    let after: Vec<u64> = futures::future::join_all(runners[..2].iter().map(runs_of)).await;
    assert_eq!(
        after.iter().sum::<u64>() + killed_runs,
        60,
        "no program ran twice, none was lost: {after:?} + {killed_runs}"
    );
    // /health names the three and says the killed one is unreachable.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let health = get_json(format!("{}/health", mcp.base())).await;
    let seen = health["runners"].as_array().expect("runners").clone();
    assert_eq!(seen.len(), 3, "{health}");
    let dead = format!("{}/", runners[2].base());
    let state = |url: &str| {
        seen.iter()
            .find(|r| r["url"] == url)
            .map(|r| r["state"].clone())
            .unwrap_or_default()
    };
    assert_eq!(state(&dead), "unreachable", "{health}");
    assert_eq!(state(&format!("{}/", runners[0].base())), "ok", "{health}");
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_runners_429_spills_to_another() {
    let token = common::token();
    // One sandbox each and no queue: a busy runner answers 429 at once.
    let runners = runners(&token, 2, &["--pool-size", "1", "--queue-size", "0"]);
    // Polled once at the start only: the server believes the first runner free.
    let mcp = start_mcp(&pool_env(&runners, &token, 600_000).vars());
    let client = connect(&mcp, &mcp.token).await.expect("connect");
    // Wait until both runners are warm, then fill the first one behind the server's back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let busy_url = format!("{}/run", runners[0].base());
    let http = reqwest::Client::new();
    let occupying = tokio::spawn({
        let http = http.clone();
        let token = token.clone();
        async move {
            http.post(busy_url)
                .bearer_auth(token)
                .json(&json!({"lang": "bash", "code": "sleep 6; echo done", "timeoutMs": 10000}))
                .send()
                .await
                .map(|r| r.status())
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in 0..6u64 {
        let result = client
            .call_tool(call("run_bash", &format!("echo {n}"), Some(5_000)))
            .await
            .expect("tools/call");
        assert_eq!(stdout_of(&result), format!("{n}\n"));
    }
    let metrics = metrics(mcp.base()).await;
    let retries_line = format!(
        "sandbox_mcp_runner_retries_total{{runner=\"{}/\"}} ",
        runners[0].base()
    );
    let retries: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&retries_line)?.trim().parse().ok())
        .unwrap_or_default();
    assert!(
        retries >= 1,
        "some call met the full runner's 429 and went on: {metrics}"
    );
    assert_eq!(
        runs_of(&runners[1]).await,
        6,
        "the other runner ran all six, once each"
    );
    let status = occupying.await.expect("join").expect("occupying run");
    assert_eq!(status, 200);
    assert_eq!(
        runs_of(&runners[0]).await,
        1,
        "the full runner ran only its own program"
    );
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_follows_its_runner_from_any_replica_and_is_lost_with_it() {
    let token = common::token();
    let mut runners = runners(&token, 2, &[]);
    let env = pool_env(&runners, &token, 300);
    let one = start_mcp(&env.vars());
    let two = start_mcp_with_token(&env.vars(), one.token.clone());
    let first = connect(&one, &one.token).await.expect("connect");
    let second = connect(&two, &two.token).await.expect("connect");
    let created = first
        .call_tool(tool("create_sandbox", json!({})))
        .await
        .expect("create_sandbox");
    let id = created.structured_content.clone().unwrap_or_default()["sandboxId"]
        .as_str()
        .expect("sandboxId")
        .to_owned();
    let run = |code: &str| tool("run_bash", json!({"code": code, "sandboxId": id}));
    let wrote = first
        .call_tool(run("echo kept > f; echo ok"))
        .await
        .expect("run");
    assert_eq!(stdout_of(&wrote), "ok\n");
    // Every call, from either replica, finds the file: it reaches the same runner.
    for client in [&first, &second, &first, &second] {
        let read = client.call_tool(run("cat f")).await.expect("run");
        assert_eq!(stdout_of(&read), "kept\n");
    }
    // The runner that holds the session is the one with a session open.
    let mut holder = None;
    for (i, runner) in runners.iter().enumerate() {
        let health = get_json(format!("{}/health", runner.base())).await;
        if health["sessions"].as_u64() == Some(1) {
            holder = Some(i);
        }
    }
    let holder = holder.expect("one runner holds the session");
    sigkill(&mut runners[holder]);
    for client in [&first, &second] {
        let lost = client.call_tool(run("cat f")).await.expect("run");
        assert_eq!(lost.is_error, Some(true), "{}", text(&lost));
        let said = text(&lost);
        assert!(
            said.contains("session lost") && said.contains("create_sandbox"),
            "{said}"
        );
        // One-shot calls still run, on the runner that is left.
        let fresh = client
            .call_tool(call("run_bash", "echo fresh", None))
            .await
            .expect("run");
        assert_eq!(stdout_of(&fresh), "fresh\n");
    }
    first.cancel().await.ok();
    second.cancel().await.ok();
}
