//! Readiness and draining, for orchestrators and for sandbox-mcp spreading calls over
//! runners: `/health` 503 while starting, degraded or draining and 200 only when ready;
//! `/health/live` 200 throughout; the instance id; SIGTERM keeps the listener open,
//! refuses new runs with 503 `draining`, lets the runs in flight finish and exits as soon
//! as none is left.

mod common;

use common::{host_processes_with, Options, Runner, TOKEN};
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A throttled CPU cgroup (5% of a CPU) for a runner whose start must be slow enough to
/// watch; removed on drop (its processes are moved out first).
struct Throttle {
    dir: PathBuf,
    /// Where its processes go back to.
    parent: PathBuf,
}

impl Throttle {
    fn new() -> Throttle {
        let name = format!("readiness-test-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let (parent, quota, value) = if v1.join("cpu.cfs_quota_us").exists() {
            (v1.to_path_buf(), "cpu.cfs_quota_us", "5000")
        } else {
            let root = PathBuf::from("/sys/fs/cgroup");
            // v2: the root's children get the cpu controller (it may be on already).
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
            (root, "cpu.max", "5000 100000")
        };
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir).expect("a test cgroup");
        let throttle = Throttle { dir, parent };
        std::fs::write(throttle.dir.join(quota), value).expect("the CPU quota");
        throttle
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Moves `pid` back out: it runs at full speed again.
    fn release(&self, pid: u32) {
        let _ = std::fs::write(self.parent.join("cgroup.procs"), pid.to_string());
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.procs()) {
            for pid in procs.lines() {
                let _ = std::fs::write(self.parent.join("cgroup.procs"), pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A runner spawned without waiting for its listening line; SIGTERM, then SIGKILL, on drop.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port free now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client")
}

/// GET `url`: status and JSON body; `None` while nothing listens.
async fn get_json(client: &reqwest::Client, url: &str) -> Option<(u16, Value)> {
    let response = client.get(url).send().await.ok()?;
    let status = response.status().as_u16();
    let text = response.text().await.ok()?;
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON, got {text:?}"));
    Some((status, body))
}

/// `GET /health` until `done` says yes to its answer, for at most `within`.
async fn health_until(runner: &Runner, within: Duration, done: impl Fn(u16, &Value) -> bool) {
    let deadline = Instant::now() + within;
    loop {
        let (status, body) = runner.get("/health").await;
        let body: Value = serde_json::from_str(&body).expect("health JSON");
        if done(status, &body) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/health still says {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of the sample `name` (with its labels, as printed) in `/metrics`.
async fn metric(runner: &Runner, sample: &str) -> f64 {
    let (status, text) = runner.get("/metrics").await;
    assert_eq!(status, 200);
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

fn is_instance_id(id: &Value) -> bool {
    id.as_str()
        .is_some_and(|id| id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()))
}

#[tokio::test]
async fn a_starting_runner_answers_503_starting_then_200_once_its_pool_is_ready() {
    common::require_root();
    let throttle = Throttle::new();
    let data = tempfile::tempdir().expect("a data folder");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let runner = Command::new("/bin/sh")
        .args(["-c", r#"echo $$ > "$0" && exec "$@""#])
        .arg(throttle.procs())
        .arg(env!("CARGO_BIN_EXE_sandbox-runner"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--pool-size", "1"])
        .env("SANDBOX_RUNNER_TOKEN", TOKEN)
        .env("RUNNER_DATA_DIR", data.path())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("the runner started");
    let runner = Spawned(runner);
    let client = client();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, first) = loop {
        if let Some(answer) = get_json(&client, &format!("{base}/health")).await {
            break answer;
        }
        assert!(Instant::now() < deadline, "the runner never listened");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // Its pool makes its first sandbox at 5% of a CPU: it answers long before that.
    assert_eq!(
        (status, &first["status"]),
        (503, &json!("starting")),
        "{first}"
    );
    assert!(is_instance_id(&first["instanceId"]), "{first}");
    assert_eq!(first["available"], 0, "{first}");
    assert!(
        first["limits"].is_object() && first["languages"].is_array(),
        "{first}"
    );
    let live = get_json(&client, &format!("{base}/health/live")).await;
    assert_eq!(
        live,
        Some((
            200,
            json!({"status": "alive", "instanceId": first["instanceId"]})
        ))
    );
    // What its API answers meanwhile (503 `starting`) is the router's unit tests' part:
    // here the pool could be ready by the time a run is sent.
    throttle.release(runner.0.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, health) = get_json(&client, &format!("{base}/health"))
            .await
            .expect("it still listens");
        if health["status"] == "ok" {
            assert_eq!(status, 200, "{health}");
            assert_eq!(
                health["instanceId"], first["instanceId"],
                "one id per process"
            );
            break;
        }
        assert_eq!((status, &health["status"]), (503, &json!("starting")));
        assert!(Instant::now() < deadline, "the pool never got ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_instance_id_is_stable_for_a_process_and_new_after_a_restart() {
    let first = Runner::start();
    let id = first.health().await["instanceId"].clone();
    assert!(is_instance_id(&id), "{id}");
    for _ in 0..3 {
        assert_eq!(first.health().await["instanceId"], id);
    }
    let (status, live) = first.get("/health/live").await;
    assert_eq!(status, 200);
    let live: Value = serde_json::from_str(&live).expect("JSON");
    assert_eq!(live, json!({"status": "alive", "instanceId": id}));
    assert!(first.stop().success());
    let second = Runner::start();
    let other = second.health().await["instanceId"].clone();
    assert!(is_instance_id(&other) && other != id, "{id} then {other}");
}

#[tokio::test]
async fn a_runner_that_cannot_make_sandboxes_is_degraded_503_until_it_can_again() {
    if common::without_resource_limits("the degraded test (it limits the runner's cgroup)") {
        return;
    }
    let runner = Runner::with(Options {
        pool_size: 1,
        ..Default::default()
    });
    runner.wait_until_full().await;
    let pids = common::instance_cgroups(runner.pid())
        .into_iter()
        .map(|dir| dir.join("pids.max"))
        .find(|file| file.exists())
        .expect("the runner's pids cgroup");
    // The warm sandbox keeps its processes; no new process can start, so no new
    // sandbox either. A run uses the warm one up (it fails: it cannot fork either).
    std::fs::write(&pids, "1").expect("pids.max");
    let (status, out) = runner
        .post(&json!({"lang": "bash", "code": "echo hi"}))
        .await;
    assert!(status == 200 || status == 500, "{status} {out}");
    health_until(&runner, Duration::from_secs(10), |status, body| {
        body["status"] == "degraded" && status == 503
    })
    .await;
    assert_eq!(metric(&runner, "sandbox_runner_ready").await, 0.0);
    std::fs::write(&pids, "max").expect("pids.max");
    health_until(&runner, Duration::from_secs(10), |status, body| {
        body["status"] == "ok" && status == 200
    })
    .await;
    assert_eq!(metric(&runner, "sandbox_runner_ready").await, 1.0);
}

#[tokio::test]
async fn sigterm_drains_the_runs_in_flight_refuses_new_ones_and_exits_once_done() {
    let mut runner = Runner::with(Options {
        pool_size: 3,
        extra: vec!["--shutdown-grace-ms".into(), "20000".into()],
        ..Default::default()
    });
    let session = runner.open_session(json!({})).await;
    // Long enough for every check below to be made while it runs, even on a busy host.
    let marker = format!("4.{}", std::process::id());
    let code = format!("echo begun; sleep {marker}; echo finished");
    let in_flight = tokio::spawn({
        let (client, url) = (runner.client.clone(), format!("{}/run", runner.url));
        let body = json!({"lang": "bash", "code": code, "timeoutMs": 30_000});
        async move {
            let answer = client.post(url).bearer_auth(TOKEN).json(&body).send();
            let answer = answer.await.expect("the run answered");
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.expect("JSON"))
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while host_processes_with(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the run never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runner.terminate();
    let terminated = Instant::now();
    health_until(&runner, Duration::from_secs(5), |status, body| {
        body["status"] == "draining" && status == 503
    })
    .await;
    let (status, live) = runner.get("/health/live").await;
    assert_eq!(status, 200, "{live}");
    let (status, refused) = runner
        .post(&json!({"lang": "bash", "code": "echo never"}))
        .await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (503, &json!("draining"))
    );
    let (status, refused) = runner.request("POST", "/sessions", None).await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (503, &json!("draining"))
    );
    // An open session goes on while the runner drains.
    let out = runner.ok_in(&session, "bash", "echo still here").await;
    assert_eq!(common::stdout(&out), "still here\n");
    assert_eq!(metric(&runner, "sandbox_runner_draining").await, 1.0);
    assert_eq!(metric(&runner, "sandbox_runner_ready").await, 0.0);
    let started = r#"sandbox_runner_programs_started_total{lang="bash"}"#;
    assert_eq!(
        metric(&runner, started).await,
        2.0,
        "the run and the session's"
    );
    let refusals = r#"sandbox_runner_runs_total{lang="bash",outcome="draining"}"#;
    assert_eq!(metric(&runner, refusals).await, 1.0);

    let (status, done) = in_flight.await.expect("task");
    assert_eq!(status, 200, "{done}");
    assert_eq!(common::stdout(&done), "begun\nfinished\n");
    let exit = runner.exited_within(Duration::from_secs(5)).await;
    let exit = exit.expect("the runner exits soon after its last run");
    assert_eq!((exit.code(), exit.signal()), (Some(0), None));
    assert!(
        terminated.elapsed() < Duration::from_secs(10),
        "it exited {:?} after SIGTERM: it waited for more than its runs",
        terminated.elapsed()
    );
}

#[tokio::test]
async fn sigterm_with_nothing_in_flight_exits_at_once() {
    let mut runner = Runner::with(Options {
        pool_size: 1,
        extra: vec!["--shutdown-grace-ms".into(), "20000".into()],
        ..Default::default()
    });
    runner.run("bash", "echo warm").await;
    let terminated = Instant::now();
    runner.terminate();
    let exit = runner.exited_within(Duration::from_secs(5)).await;
    let exit = exit.expect("exited well within its grace");
    assert_eq!(exit.code(), Some(0));
    assert!(terminated.elapsed() < Duration::from_secs(5));
}
