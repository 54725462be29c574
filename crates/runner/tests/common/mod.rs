//! Test harness: starts the real `sandbox-runner serve` binary on a free loopback port
//! and talks to it over HTTP. Every test gets its own runner, stopped on drop.

#![allow(dead_code)] // each test file uses a different part of the harness

pub mod debian_programs;
pub mod index;
pub mod programs;
pub mod tools;

use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::Duration;
use test_support::Service;

pub const TOKEN: &str = "test-token-4f9c2e1d";
/// How long a runner may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a runner may take to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// A running runner.
pub struct Runner {
    service: Service,
    pub url: String,
    pub client: reqwest::Client,
}

/// Options for a test runner.
pub struct Options {
    pub pool_size: usize,
    pub extra: Vec<String>,
    /// Variables set for the runner (and so for the pip it runs).
    pub env: Vec<(String, String)>,
    /// A command line the runner runs under (its path and arguments follow it), as root.
    pub wrapper: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pool_size: 2,
            extra: Vec::new(),
            env: Vec::new(),
            wrapper: Vec::new(),
        }
    }
}

/// The package store the runners under test use (their default): the README's test
/// command builds its set first (`sandbox-runner packages build`).
pub const PACKAGES_DIR: &str = "/var/lib/sandbox-runner/packages";

/// Fails, saying how to fix it, when the package store has no current set.
pub fn require_packages() {
    let current = std::path::Path::new(PACKAGES_DIR).join("current");
    assert!(
        current.join("manifest.json").exists(),
        "no package set in {PACKAGES_DIR}: run `sandbox-runner packages build` first \
         (the README's test command does)"
    );
}

/// The backend the runners under test use: `RUNNER_BACKEND` (as the runner reads it), or
/// `process`. The battery of api.rs and limits.rs runs against either.
pub fn backend() -> String {
    std::env::var("RUNNER_BACKEND").unwrap_or_else(|_| "process".into())
}

/// The uid the runners under test run as, when `RUNNER_TEST_AS_UID` names one: the
/// rootless battery (an ordinary user's runner, with `--unsafe-no-resource-limits`, as on
/// a host without a delegated cgroup v2; the user needs subordinate ids, which
/// scripts/test grants for the run). Unset: root.
pub fn test_uid() -> Option<u32> {
    std::env::var("RUNNER_TEST_AS_UID")
        .ok()
        .and_then(|uid| uid.parse().ok())
}

/// Whether the runners under test have no memory and CPU limits (the rootless battery):
/// the tests of those limits skip, saying so.
pub fn without_resource_limits(test: &str) -> bool {
    let without = test_uid().is_some();
    if without {
        eprintln!("SKIPPED {test}: the rootless battery's runners have no memory or CPU limits");
    }
    without
}

pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "these tests drive real sandboxes and must run as root (the README's test command does)"
    );
}

impl Runner {
    pub fn start() -> Runner {
        Runner::with(Options::default())
    }

    /// A runner that forks its sandboxes from templates or makes them by jails, without
    /// warm imports (so that every sandbox of a language is made alike).
    pub fn templates(templates: bool, pool_size: usize) -> Runner {
        Runner::with(Options {
            pool_size,
            env: vec![
                ("RUNNER_TEMPLATES".into(), templates.to_string()),
                ("RUNNER_WARM_IMPORTS".into(), String::new()),
            ],
            ..Default::default()
        })
    }

    pub fn with(options: Options) -> Runner {
        require_root();
        let runner = env!("CARGO_BIN_EXE_sandbox-runner");
        let mut command = match test_uid() {
            None if !options.wrapper.is_empty() => {
                let mut wrapped = Command::new(&options.wrapper[0]);
                wrapped.args(&options.wrapper[1..]).arg(runner);
                wrapped
            }
            None => Command::new(runner),
            Some(uid) => {
                let mut as_user = Command::new("setpriv");
                as_user
                    .args(["--reuid", &uid.to_string(), "--regid", &uid.to_string()])
                    .args(["--clear-groups", runner])
                    .env("RUNNER_UNSAFE_NO_RESOURCE_LIMITS", "true");
                as_user
            }
        };
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--pool-size"])
            .arg(options.pool_size.to_string())
            .args(&options.extra)
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .env("SANDBOX_RUNNER_TOKEN", TOKEN)
            .env("RUST_LOG", "warn")
            .stderr(Stdio::inherit());
        let service = Service::start(command, "sandbox-runner listening on ", START_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}"));
        let url = service.url().to_owned();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .expect("http client");
        Runner {
            service,
            url,
            client,
        }
    }

    pub fn pid(&self) -> u32 {
        self.service.pid()
    }

    /// POST /run with the token; returns status and JSON body.
    pub async fn post(&self, body: &Value) -> (u16, Value) {
        self.post_raw(body.to_string(), Some(TOKEN)).await
    }

    pub async fn post_raw(&self, body: String, token: Option<&str>) -> (u16, Value) {
        let mut req = self.client.post(format!("{}/run", self.url)).body(body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.expect("POST /run answered");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON body, got {text:?}"));
        (status, value)
    }

    /// POSTs `body` to `path` with the token, asking for a streamed answer
    /// (`Accept: application/x-ndjson`); the answer, still streaming.
    pub async fn post_streamed(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .header("accept", "application/x-ndjson")
            .body(body.to_string())
            .send()
            .await
            .expect("the runner answered")
    }

    /// Runs a program and returns the 200 answer.
    pub async fn run(&self, lang: &str, code: &str) -> Value {
        self.run_with_timeout(lang, code, None).await
    }

    pub async fn run_with_timeout(&self, lang: &str, code: &str, timeout_ms: Option<u64>) -> Value {
        let mut body = json!({"lang": lang, "code": code});
        if let Some(t) = timeout_ms {
            body["timeoutMs"] = json!(t);
        }
        let (status, value) = self.post(&body).await;
        assert_eq!(status, 200, "run answered {value}");
        value
    }

    /// Any request with the token (and a JSON body when given); status and JSON body
    /// (null when the body is empty).
    pub async fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            req = req.body(body.to_string());
        }
        let resp = req.send().await.expect("the runner answered");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON body, got {text:?}"))
        };
        (status, value)
    }

    /// Opens a session (201) and returns its id.
    pub async fn open_session(&self, body: Value) -> String {
        let (status, info) = self.request("POST", "/sessions", Some(&body)).await;
        assert_eq!(status, 201, "{info}");
        info["id"].as_str().expect("an id").to_owned()
    }

    /// A run in a session: status and body.
    pub async fn run_in(&self, id: &str, lang: &str, code: &str) -> (u16, Value) {
        let body = json!({"lang": lang, "code": code});
        self.request("POST", &format!("/sessions/{id}/run"), Some(&body))
            .await
    }

    /// A run in a session that must answer 200.
    pub async fn ok_in(&self, id: &str, lang: &str, code: &str) -> Value {
        let (status, out) = self.run_in(id, lang, code).await;
        assert_eq!(status, 200, "{out}");
        out
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let resp = self
            .client
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("GET answered");
        let status = resp.status().as_u16();
        (status, resp.text().await.expect("body"))
    }

    /// Waits until every sandbox of the pool is ready (a VM pool boots its VMs after the
    /// runner listens), at most two minutes.
    pub async fn wait_until_full(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let health = self.health().await;
            if health["available"] == health["poolSize"] {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the pool did not fill: {health}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET /health`'s body: 200 when ready, 503 (same body) when starting, degraded or
    /// draining.
    pub async fn health(&self) -> Value {
        let (status, body) = self.get("/health").await;
        let health: Value = serde_json::from_str(&body).expect("health JSON");
        let ok = health["status"] == "ok";
        assert_eq!(status, if ok { 200 } else { 503 }, "{health}");
        health
    }

    /// Sends SIGTERM without waiting: the runner drains.
    pub fn terminate(&self) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM sent");
    }

    /// Its exit status, once it has exited within `within`.
    pub async fn exited_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.service.try_wait().expect("wait") {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    /// SIGKILL: the runner gets no chance to clean up.
    pub fn kill(mut self) {
        let _ = self.service.kill();
    }

    /// SIGTERM, and wait for a clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.service.stop(STOP_GRACE).expect("runner reaped")
    }
}

/// This runner's cgroup folders that exist now (v1 controllers, or v2).
pub fn instance_cgroups(pid: u32) -> Vec<std::path::PathBuf> {
    let instance = format!("r{pid}");
    ["memory", "cpu", "pids", "freezer", ""]
        .iter()
        .map(|c| {
            std::path::Path::new("/sys/fs/cgroup")
                .join(c)
                .join("sandbox-runner")
                .join(&instance)
        })
        .filter(|d| d.exists())
        .collect()
}

/// The names of the languages a `/health` answer lists, in its order.
pub fn language_names(health: &Value) -> Vec<String> {
    health["languages"]
        .as_array()
        .expect("languages")
        .iter()
        .map(|l| l["name"].as_str().expect("a name").to_owned())
        .collect()
}

pub fn stdout(v: &Value) -> &str {
    v["stdout"].as_str().expect("stdout is a string")
}

pub fn stderr(v: &Value) -> &str {
    v["stderr"].as_str().expect("stderr is a string")
}

pub fn exit_code(v: &Value) -> i64 {
    v["exitCode"].as_i64().expect("exitCode is an integer")
}

/// Host processes whose command line contains `marker`.
pub fn host_processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(format!("{}: {cmdline}", name.to_string_lossy()));
            }
        }
    }
    found
}

/// What the cgroup freezer says of the cgroup of the runner's that holds the host
/// process `pid`: v1 `freezer.state` (`FROZEN` once frozen), v2 the `frozen` line of
/// `cgroup.events` (`frozen 1`); `None` when no such cgroup holds it.
pub fn freezer_state(pid: &str) -> Option<String> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if !path.contains("/sandbox-runner/") {
            return None;
        }
        if controllers.split(',').any(|c| c == "freezer") {
            let file = format!("/sys/fs/cgroup/freezer{path}/freezer.state");
            return std::fs::read_to_string(file)
                .ok()
                .map(|s| s.trim().to_owned());
        }
        if controllers.is_empty() {
            let file = format!("/sys/fs/cgroup{path}/cgroup.events");
            let events = std::fs::read_to_string(file).ok()?;
            return events
                .lines()
                .find(|l| l.starts_with("frozen "))
                .map(str::to_owned);
        }
        None
    })
}

/// Whether a session's host process `pid` is held between the session's calls: frozen
/// by its cgroup's freezer, or, for the rootless battery's runners (no cgroup, so no
/// freezer), stopped by its agent (state `T`).
pub fn held_between_calls(pid: &str) -> bool {
    if test_uid().is_some() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        return stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| matches!(state, "T" | "Z"));
    }
    matches!(freezer_state(pid).as_deref(), Some("FROZEN" | "frozen 1"))
}

/// Every host pid now.
fn host_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// Host pids whose `/proc/<pid>/comm` is `name`.
pub fn host_pids_named(name: &str) -> Vec<u32> {
    host_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
        .collect()
}

/// Host pids whose parent is `parent` and whose command line contains `marker`.
pub fn children_with(parent: u32, marker: &str) -> Vec<u32> {
    host_pids()
        .into_iter()
        .filter(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let ppid = status
                .lines()
                .find_map(|l| l.strip_prefix("PPid:"))
                .and_then(|p| p.trim().parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(parent) && String::from_utf8_lossy(&cmdline).contains(marker)
        })
        .collect()
}

/// POST /run of `code` in `lang` to the runner at `url` (for a task of its own); the
/// answer's body, which must be 200.
pub async fn post_run(client: &reqwest::Client, url: &str, lang: &str, code: &str) -> Value {
    let resp = client
        .post(format!("{url}/run"))
        .bearer_auth(TOKEN)
        .json(&json!({"lang": lang, "code": code}))
        .send()
        .await
        .expect("POST /run");
    assert_eq!(resp.status().as_u16(), 200, "POST /run answered");
    resp.json().await.expect("a JSON body")
}
