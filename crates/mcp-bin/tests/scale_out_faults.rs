//! Runners and replicas that go away under load (issue 15), all real: three
//! `sandbox-runner serve` behind `sandbox-mcp serve` (a comma list). A runner's SIGTERM
//! (it drains: finishes its runs, takes no new ones) loses no call; a runner's SIGKILL loses
//! only the calls it was running, each said to be `runner_connection_lost`, and the rest
//! are answered; a replica SIGKILLed mid-load loses only its own calls in flight. No
//! program runs twice: each runner's log counts the runs it finished ("done" lines), and
//! their sum is the number of calls answered.
//!
//! Needs the runner binary (built beside these tests, or SANDBOX_RUNNER_BIN) and root.

mod common;
#[path = "common/scale_out.rs"]
mod scale_out;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{call, connect, runner_bin, start_mcp, start_mcp_with_token, wait_for_exit, Server};
use nix::sys::signal::{kill, Signal};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::RoleClient;
use scale_out::{seven_times, seven_times_output, stdout_of, PoolEnv};
use test_support::Service;

type Client = RunningService<RoleClient, ()>;

/// A runner whose log goes to a file, so that its runs can be counted after it is gone.
struct LoggedRunner {
    service: Service,
    log: PathBuf,
}

impl LoggedRunner {
    fn start(token: &str, n: usize) -> LoggedRunner {
        // Tests of this file run at once in one process: each log has a name of its own.
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let nth = STARTED.fetch_add(1, Ordering::Relaxed);
        let log = std::env::temp_dir().join(format!(
            "scale-out-runner-{}-{nth}-{n}.log",
            std::process::id()
        ));
        let file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(runner_bin());
        command
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--token",
                token,
                "--pool-size",
                "2",
            ])
            .env("RUST_LOG", "info")
            .stderr(file);
        let service = Service::start(
            command,
            "sandbox-runner listening on ",
            Duration::from_secs(30),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        LoggedRunner { service, log }
    }

    /// Runs it finished, by its log.
    fn runs(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("sandbox_runner::http: done"))
            .count()
    }

    fn signal(&mut self, signal: Signal) {
        let pid = nix::unistd::Pid::from_raw(self.service.pid() as i32);
        kill(pid, signal).expect("signal");
    }

    fn wait_for_exit(&mut self) {
        assert!(
            wait_for_exit(&mut self.service, Duration::from_secs(30)).is_some(),
            "the runner did not exit"
        );
    }
}

impl Drop for LoggedRunner {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Three runners with one token, and the environment of a server in front of them.
fn three_runners(token: &str) -> (Vec<LoggedRunner>, PoolEnv) {
    let runners: Vec<LoggedRunner> = (0..3).map(|n| LoggedRunner::start(token, n)).collect();
    let env = PoolEnv::new(runners.iter().map(|r| r.service.url()), token, 300);
    (runners, env)
}

fn slow_call(n: u64) -> CallToolRequestParams {
    call(
        "run_bash",
        &format!("sleep 0.4; {}", seven_times(n)),
        Some(10_000),
    )
}

/// What happened to one call.
#[derive(Debug, PartialEq)]
enum Fate {
    Answered,
    /// A tool result with this error code.
    Failed(String),
    /// No answer at all (the server went away).
    NoAnswer,
}

/// `count` slow calls at once, numbered from `first`.
async fn batch(client: &Client, first: u64, count: u64) -> Vec<Fate> {
    let calls = (first..first + count).map(|n| async move {
        // A server that dies may leave rmcp's client waiting: bounded here.
        let answer = tokio::time::timeout(Duration::from_secs(8), client.call_tool(slow_call(n)));
        match answer.await {
            Err(_) | Ok(Err(_)) => Fate::NoAnswer,
            Ok(Ok(result)) if result.is_error == Some(false) => {
                assert_eq!(stdout_of(&result), seven_times_output(n));
                Fate::Answered
            }
            Ok(Ok(result)) => {
                let structured = result.structured_content.clone().unwrap_or_default();
                Fate::Failed(
                    structured["error"]["code"]
                        .as_str()
                        .unwrap_or("?")
                        .to_owned(),
                )
            }
        }
    });
    futures::future::join_all(calls).await
}

/// Three batches of six, `hit` applied 150 ms into the second.
async fn under_load(client: &Client, hit: impl FnOnce()) -> Vec<Fate> {
    let mut fates = batch(client, 0, 6).await;
    let second = batch(client, 6, 6);
    let hitting = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        hit();
    };
    let (second, ()) = tokio::join!(second, hitting);
    fates.extend(second);
    // Let the server's health poll see the change, as it would in service.
    fates.extend(batch(client, 12, 6).await);
    fates
}

/// Three runners behind one server; the middle one gets `signal` during [`under_load`]
/// and is waited for. The runners, the server (kept for the test's length), the client
/// and every call's fate.
async fn middle_runner_hit_under_load(
    signal: Signal,
) -> (Vec<LoggedRunner>, Server, Client, Vec<Fate>) {
    let token = common::token();
    let (mut runners, env) = three_runners(&token);
    let mcp = start_mcp(&env.vars());
    let client = connect(&mcp, &mcp.token).await.expect("connect");
    let fates = {
        let victim = &mut runners[1];
        under_load(&client, || victim.signal(signal)).await
    };
    runners[1].wait_for_exit();
    (runners, mcp, client, fates)
}

fn answered(fates: &[Fate]) -> usize {
    fates.iter().filter(|f| **f == Fate::Answered).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_runner_loses_no_call_and_runs_none_twice() {
    let (runners, _mcp, client, fates) = middle_runner_hit_under_load(Signal::SIGTERM).await;
    assert_eq!(answered(&fates), 18, "every call answered: {fates:?}");
    let runs: Vec<usize> = runners.iter().map(LoggedRunner::runs).collect();
    assert_eq!(
        runs.iter().sum::<usize>(),
        18,
        "each program ran once: {runs:?}"
    );
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runner_loses_only_what_it_was_running() {
    let (runners, _mcp, client, fates) = middle_runner_hit_under_load(Signal::SIGKILL).await;
    let lost: Vec<&Fate> = fates.iter().filter(|f| **f != Fate::Answered).collect();
    assert!(
        lost.iter()
            .all(|f| **f == Fate::Failed("runner_connection_lost".into())),
        "only calls that reached the killed runner fail, and say so: {fates:?}"
    );
    assert!(
        lost.len() <= 4,
        "at most its two sandboxes' calls (and a queued pair): {fates:?}"
    );
    assert!(
        fates[12..].iter().all(|f| *f == Fate::Answered),
        "{fates:?}"
    );
    let runs: Vec<usize> = runners.iter().map(LoggedRunner::runs).collect();
    assert_eq!(
        runs.iter().sum::<usize>(),
        answered(&fates),
        "no program ran twice: {runs:?}"
    );
    client.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_loses_only_its_calls_in_flight() {
    let token = common::token();
    let (runners, env) = three_runners(&token);
    let one: Server = start_mcp(&env.vars());
    let two = start_mcp_with_token(&env.vars(), one.token.clone());
    let first = connect(&one, &one.token).await.expect("connect");
    let second = connect(&two, &two.token).await.expect("connect");
    let killing = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        kill(one.pid(), Signal::SIGKILL).expect("SIGKILL");
    };
    let (on_one, on_two, ()) = tokio::join!(batch(&first, 0, 6), batch(&second, 6, 6), killing);
    assert!(on_two.iter().all(|f| *f == Fate::Answered), "{on_two:?}");
    assert!(on_one.iter().all(|f| *f == Fate::NoAnswer), "{on_one:?}");
    // The replica left goes on; the runners finished what the dead one had started.
    let more = batch(&second, 12, 6).await;
    assert!(more.iter().all(|f| *f == Fate::Answered), "{more:?}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let runs: usize = runners.iter().map(LoggedRunner::runs).sum();
    assert!(
        (12..=18).contains(&runs),
        "the survivor's 12 calls ran once each, plus at most the dead replica's 6: {runs}"
    );
    second.cancel().await.ok();
}
