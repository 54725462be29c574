//! Tenants: what one sandbox may take from another sandbox, from the host, or from its
//! own agent. Every test runs a real attack, a Python 3 program, through the real
//! runner API (`POST /run`) and asserts on the marker lines it prints
//! (`RESULT <name> ok`, `RESULT <name> errno=N`, `RESULT <name> count=...`), with the
//! whole answer in the failure message.
//!
//! - Per-user kernel counts (pipe buffer pages, queued real-time signals, descriptors in
//!   flight over unix sockets, POSIX message queues, AIO contexts, inotify and fanotify
//!   instances): sandbox A grabs the resource until the kernel refuses more and holds it
//!   for a few seconds; meanwhile sandbox B, and for some the test process itself (host
//!   root), must still get it. A tells the host it holds by naming its own thread
//!   (`prctl(PR_SET_NAME)`): the test waits until a host process has that name before it
//!   starts B, so B never runs before A holds.
//! - Loopback socket buffers are charged to the sandbox or bounded.
//! - Socket families a program runner never needs cannot be opened.
//! - The program (the sandbox user) can neither re-limit, re-prioritise, stop nor kill
//!   the agent (PID 1), which still ends a spinning program on time.
//! - Sandboxes running at once have distinct host identities, and each owns its user
//!   namespace.
//! - Files shared with the host (`/usr`, `/etc`) cannot be locked against others.
//! - Host information (`/proc/cmdline`, `/proc/kallsyms`, ..., `/sys`) is masked.
//! - Kernel interfaces with a history of bugs are refused (memfd_secret, modify_ldt,
//!   AIO, NUMA policy calls, cachestat, seccomp user notification, ...).
//!
//! Every grab is bounded (a count or a size), every hold ends after a few seconds, and
//! every wait on the Rust side has a deadline.

#[path = "../common/mod.rs"]
mod common;
mod counts;
mod kernel;
mod sockets;

use common::{stdout, Options, Runner, TOKEN};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How long a grabbing sandbox holds what it took, in seconds.
const HOLD_SECONDS: f64 = 3.5;

/// Python put before every program: a line-buffered stdout, raw system calls, and
/// `hold()`, which names the process `MARKER` (so the host sees it holds), sleeps
/// [`HOLD_SECONDS`] and returns.
const PRELUDE: &str = r#"
import ctypes, errno, os, sys, time
sys.stdout.reconfigure(line_buffering=True)
libc = ctypes.CDLL(None, use_errno=True)

def syscall(*args):
    """A raw x86_64 system call: (return value, errno)."""
    ctypes.set_errno(0)
    rc = libc.syscall(*[ctypes.c_long(a) for a in args])
    return rc, ctypes.get_errno()

def outcome(rc, err):
    return "ok" if rc != -1 else "errno=%d" % err

def hold():
    print("HOLDING", flush=True)
    libc.prctl(15, MARKER.encode(), 0, 0, 0)
    time.sleep(HOLD_SECONDS)
    print("RELEASED", flush=True)
"#;

fn runner() -> Runner {
    Runner::with(Options {
        pool_size: 3,
        ..Default::default()
    })
}

/// The program: the prelude, `MARKER` and then `body`.
fn program(marker: &str, body: &str) -> String {
    format!("{PRELUDE}\nMARKER = {marker:?}\nHOLD_SECONDS = {HOLD_SECONDS}\n{body}")
}

/// Posts a Python run on a task of its own; the task's value is the 200 answer.
fn spawn_run(runner: &Runner, code: String, timeout_ms: u64) -> JoinHandle<Value> {
    let url = format!("{}/run", runner.url);
    let client = runner.client.clone();
    tokio::spawn(async move {
        let body = json!({"lang": "python", "code": code, "timeoutMs": timeout_ms});
        let resp = client
            .post(url)
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .expect("POST /run answered");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let value: Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON body, got {text:?}"));
        assert_eq!(status, 200, "run answered {status}: {value}");
        println!("answer: {value}"); // shown for failures, or with --nocapture
        value
    })
}

/// Runs a Python program to its end (at most 60 s on this side).
async fn run(runner: &Runner, body: &str, timeout_ms: u64) -> Value {
    let task = spawn_run(runner, program("", body), timeout_ms);
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the run answered within 60 s")
        .expect("run task")
}

/// A sandbox that grabbed something and holds it.
struct Holder {
    answer: JoinHandle<Value>,
}

impl Holder {
    /// Starts `body` (which calls `hold()` once it has grabbed) and returns once it holds.
    async fn start(runner: &Runner, tag: &str, body: &str) -> Holder {
        let marker = format!("tn{tag}{}", std::process::id() % 100_000);
        assert!(marker.len() <= 15, "a thread name has 15 bytes: {marker}");
        let answer = spawn_run(runner, program(&marker, body), 30_000);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !host_process_named(&marker) {
            if answer.is_finished() {
                let out = answer.await.expect("run task");
                panic!("the grabbing sandbox ended before it held anything: {out}");
            }
            assert!(
                Instant::now() < deadline,
                "the grabbing sandbox did not hold within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Holder { answer }
    }

    /// Its answer, once it has released.
    async fn finish(self) -> Value {
        tokio::time::timeout(Duration::from_secs(60), self.answer)
            .await
            .expect("the grabbing sandbox answered within 60 s")
            .expect("run task")
    }
}

/// Whether a host process (or thread group leader) has this name in `/proc/<pid>/comm`.
fn host_process_named(name: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
            && std::fs::read_to_string(entry.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
    })
}

/// What follows `RESULT <name> ` on its line of stdout.
fn result(out: &Value, name: &str) -> String {
    let prefix = format!("RESULT {name} ");
    stdout(out)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no `RESULT {name}` line: {out}"))
        .to_owned()
}

/// The value of `key=` in a result.
fn field(result: &str, key: &str) -> Option<String> {
    let prefix = format!("{key}=");
    result
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
        .map(str::to_owned)
}

/// The number in `key=` of a result, or panic with the answer.
fn count(out: &Value, name: &str, key: &str) -> u64 {
    let r = result(out, name);
    field(&r, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key}= in `RESULT {name}`: {out}"))
}

/// Fails with every problem found at once, and the answers they were found in.
#[track_caller]
fn assert_none(problems: &[String], answers: &[(&str, &Value)]) {
    if !problems.is_empty() {
        let answers: Vec<String> = answers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        panic!("{}\n{}", problems.join("\n"), answers.join("\n"));
    }
}

fn succeeded(result: &str) -> bool {
    result.split_whitespace().next() == Some("ok")
}

fn failed(result: &str) -> bool {
    result.starts_with("errno=")
}

/// Runs Python on the host, as host root (the test process), for at most 10 s.
async fn host_python(code: &str) -> String {
    let child = tokio::process::Command::new("/usr/bin/python3")
        .args(["-c", code])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(10), child)
        .await
        .expect("host python ended within 10 s")
        .expect("host python ran");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn errno_text() -> String {
    let e = std::io::Error::last_os_error();
    format!("errno={} ({e})", e.raw_os_error().unwrap_or(0))
}
