//! Real upstream MCP servers for the tools-from-code tests (issue 32), and the
//! `MCP_UPSTREAMS` files naming them. Included (`#[path]`) beside `common` by the tests
//! that need them.
//!
//! - "tracker": a Streamable HTTP server written with the official Python SDK
//!   (`tests/upstream/tracker.py`), which wants a bearer token ([`SECRET`]) and writes
//!   down every call it receives. Its Python comes from `UPSTREAM_PYTHON`, else a venv
//!   made once under the target's temporary folder with PyPI's `mcp` (pinned by the
//!   client suite's constraints).
//! - "everything": the MCP project's reference server (npm
//!   `@modelcontextprotocol/server-everything`, pinned in `tests/upstream/everything`),
//!   over stdio, installed once with `npm ci` under the target's temporary folder.
// Each test crate uses its own part of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use test_support::Service;

/// The tracker's bearer token: the secret no program may find.
pub const SECRET: &str = "upstream-secret-7f3a9c41d2e8";

/// The folder of this crate's upstream servers.
fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstream")
}

/// Where the tests install what they need once.
fn cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Runs `command`, which must succeed.
fn must(command: &mut Command, what: &str) {
    let status = command.status().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(status.success(), "{what}: {status}");
}

/// Makes `dir` once with `make` (into a folder of its own, renamed into place, so that
/// test processes running at once never see half of it).
fn once_into(dir: &Path, ready: impl Fn(&Path) -> bool, make: impl Fn(&Path)) {
    if ready(dir) {
        return;
    }
    let building = dir.with_extension(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    make(&building);
    if std::fs::rename(&building, dir).is_err() {
        // Another test process made it first.
        let _ = std::fs::remove_dir_all(&building);
    }
    assert!(ready(dir), "{} is not usable", dir.display());
}

/// A Python with the MCP SDK.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            if let Some(given) = std::env::var_os("UPSTREAM_PYTHON") {
                return given.into();
            }
            let venv = cache().join("upstream-venv");
            let has_sdk = |venv: &Path| {
                Command::new(venv.join("bin/python"))
                    .args(["-c", "import mcp.server.mcpserver, uvicorn"])
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            once_into(&venv, has_sdk, |dir| {
                must(
                    Command::new("python3").args(["-m", "venv"]).arg(dir),
                    "python3 -m venv",
                );
                let constraints = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../tests/mcp-clients/python/constraints.txt");
                must(
                    Command::new(dir.join("bin/pip"))
                        .args([
                            "install",
                            "-q",
                            "--disable-pip-version-check",
                            "mcp==2.3.0",
                            "-c",
                        ])
                        .arg(constraints),
                    "pip install mcp",
                );
            });
            venv.join("bin/python")
        })
        .clone()
}

/// The reference server's entry point (`node INDEX stdio`).
pub fn everything() -> PathBuf {
    static INDEX: OnceLock<PathBuf> = OnceLock::new();
    INDEX
        .get_or_init(|| {
            let dir = cache().join("upstream-everything");
            let index = |dir: &Path| {
                dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
            };
            once_into(
                &dir,
                |d| index(d).exists(),
                |building| {
                    std::fs::create_dir_all(building).expect("a folder for npm");
                    for file in ["package.json", "package-lock.json"] {
                        std::fs::copy(here().join("everything").join(file), building.join(file))
                            .expect("the package files");
                    }
                    must(
                        Command::new("npm")
                            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                            .current_dir(building),
                        "npm ci",
                    );
                },
            );
            index(&dir)
        })
        .clone()
}

/// The tracker: a Python SDK server on loopback; stopped when dropped.
pub struct Tracker {
    service: Service,
    /// Its MCP endpoint.
    pub url: String,
    /// Its port (a restarted tracker takes it again).
    pub port: u16,
    calls: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tracker {
    /// Starts one on a free port.
    pub fn start() -> Tracker {
        Self::start_on(0)
    }

    /// Starts one on `port` (0: a free one).
    pub fn start_on(port: u16) -> Tracker {
        let dir = tempfile::tempdir().expect("a folder for the tracker");
        let calls = dir.path().join("calls.jsonl");
        Self::start_with(port, calls, dir)
    }

    fn start_with(port: u16, calls: PathBuf, dir: tempfile::TempDir) -> Tracker {
        let mut command = Command::new(python());
        command
            .arg(here().join("tracker.py"))
            .args(["--token", SECRET, "--port", &port.to_string()])
            .arg("--calls")
            .arg(&calls)
            .stderr(Stdio::null());
        let service = Service::start(command, "tracker listening on ", Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e}"));
        let url = service.url().to_owned();
        let port = url
            .trim_start_matches("http://127.0.0.1:")
            .trim_end_matches("/mcp")
            .parse()
            .expect("the tracker's port");
        Tracker {
            service,
            url,
            port,
            calls,
            _dir: dir,
        }
    }

    /// The calls it received so far: `{"tool", "arguments"}` each.
    pub fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a call line"))
            .collect()
    }

    /// How many calls of `tool` it received.
    pub fn count(&self, tool: &str) -> usize {
        self.calls().iter().filter(|c| c["tool"] == tool).count()
    }

    /// Stops it (its port stays free for [`start_on`](Self::start_on)).
    pub fn stop(&mut self) {
        let _ = self.service.stop(Duration::from_secs(5));
    }
}

/// Writes an `MCP_UPSTREAMS` file of `entries` (TOML `[[server]]` tables) into `dir`.
pub fn upstreams_file(dir: &Path, entries: &[String]) -> PathBuf {
    let path = dir.join("upstreams.toml");
    std::fs::write(&path, entries.join("\n")).expect("the upstreams file");
    path
}

/// The tracker's entry: its URL and token, `allow`, and `extra` lines.
pub fn tracker_entry(url: &str, allow: &str, extra: &str) -> String {
    format!(
        "[[server]]\nname = \"tracker\"\nurl = \"{url}\"\n\
         headers = {{ Authorization = \"Bearer {SECRET}\" }}\nallow = {allow}\n{extra}\n"
    )
}

/// The reference server's entry, over stdio, allowing `allow`.
pub fn everything_entry(allow: &str) -> String {
    format!(
        "[[server]]\nname = \"everything\"\ncommand = [\"node\", {:?}, \"stdio\"]\nallow = {allow}\n",
        everything().display().to_string()
    )
}

/// Waits until `GET {base}/health` shows the upstreams `wanted` says, for at most `limit`;
/// the last `upstreams` seen.
pub async fn until_upstreams(
    base: &str,
    limit: Duration,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let health: Value = reqwest::get(format!("{base}/health"))
            .await
            .expect("GET /health")
            .json()
            .await
            .expect("a health body");
        let upstreams = health["upstreams"].clone();
        if wanted(&upstreams) || Instant::now() > deadline {
            return upstreams;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether `upstreams` (from `/health`) shows `name` up with some tools.
pub fn is_up(upstreams: &Value, name: &str) -> bool {
    upstreams
        .as_array()
        .into_iter()
        .flatten()
        .any(|u| u["name"] == name && u["up"] == true && u["tools"].as_u64() > Some(0))
}

/// Waits until the server at `base` has the tracker and the reference server connected.
pub async fn until_both_up(base: &str) {
    let upstreams = until_upstreams(base, Duration::from_secs(30), |u| {
        is_up(u, "tracker") && is_up(u, "everything")
    })
    .await;
    assert!(
        is_up(&upstreams, "tracker") && is_up(&upstreams, "everything"),
        "{upstreams}"
    );
}
