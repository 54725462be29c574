//! The MCP server's endpoints that need no token, `GET /health` and `GET /metrics`, attacked
//! as anyone who reaches the port can (issue 28), against the real binaries:
//!
//! - hammering `/health` sends nothing to the runners: it answers from the background poll,
//!   which still shows a runner that went down within about one period;
//! - a runner URL with a user name and password (`http://user:password@host`) never shows
//!   them, in any encoding, in `/health`, `/metrics`, the log, tool errors, `--help` or a
//!   start-up error, while every request to that runner still carries them (HTTP Basic).
//!
//! Needs the runner binary (built beside these tests, or SANDBOX_RUNNER_BIN) and root.

mod common;
#[path = "common/observe.rs"]
#[allow(dead_code)] // the runners' own counts are not read here
mod observe;

use std::time::{Duration, Instant};

use base64::Engine;
use common::{call, connect, start_mcp, start_mcp_logging_to, text, tool, RecordingProxy};
use nix::sys::signal::{kill, Signal};
use observe::{get_json, metrics};
use serde_json::{json, Value};

/// `SANDBOX_RUNNER_HEALTH_MS` of the poll test.
const POLL_MS: u64 = 1000;

/// A user name with an `@`, and a password with `@`, `:`, `/` and `#`, as written in a URL
/// (percent-encoded) and as sent (decoded).
const USER: &str = "runner-op@corp";
const USER_IN_URL: &str = "runner-op%40corp";
const PASSWORD: &str = "p@ss:w0rd/#x";
const PASSWORD_IN_URL: &str = "p%40ss%3Aw0rd%2F%23x";
/// A user name without a password, and a password without a user name.
const LONE_USER: &str = "lonely-user";
const LONE_PASSWORD: &str = "only-s3cret";

/// The `Authorization: Basic` value of [`USER`] and [`PASSWORD`].
fn basic() -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
}

/// What must never be shown: each credential in every form it can take (the password's
/// `w0rd` is in its decoded and percent-encoded forms alike).
fn secrets() -> Vec<String> {
    vec![
        "op%40corp".into(),
        "op@corp".into(),
        "w0rd".into(),
        basic(),
        LONE_USER.into(),
        LONE_PASSWORD.into(),
    ]
}

/// Records, in `leaks`, each secret that `text` (named `place`) shows.
fn look_for_secrets(leaks: &mut Vec<String>, place: &str, text: &str) {
    for secret in secrets() {
        if let Some(at) = text.find(&secret) {
            let start = text[..at]
                .char_indices()
                .rev()
                .nth(60)
                .map_or(0, |(i, _)| i);
            let end = text[at..]
                .char_indices()
                .nth(60)
                .map_or(text.len(), |(i, _)| at + i);
            leaks.push(format!(
                "{place} shows {secret:?}: ...{}...",
                &text[start..end]
            ));
        }
    }
}

/// A loopback port nothing listens on.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// The output of `command`, killed if it still runs after 20 s (it is meant to refuse to
/// start).
fn briefly(mut command: std::process::Command) -> std::process::Output {
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().expect("output")
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("HTTP client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_answered_from_the_background_poll() {
    let runner = common::start_runner();
    let proxy = RecordingProxy::start(runner.addr()).await;
    let poll_ms = POLL_MS.to_string();
    let mcp = start_mcp(&[
        ("SANDBOX_RUNNER_URL", proxy.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
        ("SANDBOX_RUNNER_HEALTH_MS", poll_ms.as_str()),
    ]);
    let health_url = format!("{}/health", mcp.base());
    let client = http();
    // 200 unauthenticated GET /health, 20 at a time.
    let started = Instant::now();
    let before = proxy.requests_to("/health");
    for _ in 0..10 {
        let answers = futures::future::join_all((0..20).map(|_| async {
            let response = client.get(&health_url).send().await.expect("GET /health");
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.expect("JSON")
        }))
        .await;
        for health in answers {
            assert_eq!(health["status"], "ok", "{health}");
            assert_eq!(health["runnerReachable"], true, "{health}");
            assert_eq!(health["runners"][0]["state"], "ok", "{health}");
        }
    }
    let elapsed = started.elapsed();
    let polled = proxy.requests_to("/health") - before;
    // The background's own: a poll a period, the limits' refresh (every 10 s), and one of
    // each already under way at either end.
    let allowed = (elapsed.as_millis() as u64 / POLL_MS) as usize + 3;
    assert!(
        polled <= allowed,
        "200 GET /health made {polled} requests to the runner's /health in {elapsed:?} \
         (at most {allowed}: the background poll's)"
    );
    // The runner goes down: /health says so within about one period.
    kill(runner.pid(), Signal::SIGTERM).expect("SIGTERM");
    let stopped = Instant::now();
    loop {
        let health = get_json(health_url.clone()).await;
        let state = &health["runners"][0]["state"];
        if state == "unhealthy" || state == "unreachable" {
            assert_eq!(health["status"], "degraded", "{health}");
            assert_eq!(health["runnerReachable"], false, "{health}");
            break;
        }
        assert!(
            stopped.elapsed() < Duration::from_millis(POLL_MS + 1500),
            "the stopped runner is still shown up after {:?}: {health}",
            stopped.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_url_s_credentials_are_never_shown() {
    let runner = common::start_runner_without_token();
    let proxy = RecordingProxy::start(runner.addr()).await;
    let proxy_addr = proxy.url.trim_start_matches("http://").to_owned();
    let live = format!("http://{USER_IN_URL}:{PASSWORD_IN_URL}@{proxy_addr}");
    let (dead, dead_too) = (free_port(), free_port());
    let urls = format!(
        "{live},http://{LONE_USER}@127.0.0.1:{dead},http://:{LONE_PASSWORD}@localhost:{dead_too}"
    );
    let mut leaks = Vec::new();

    // A server with the three: runs go to the live one, with its credentials.
    let log = tempfile::NamedTempFile::new().expect("log file");
    let mcp = start_mcp_logging_to(
        &[
            ("SANDBOX_RUNNER_URL", urls.as_str()),
            ("SANDBOX_RUNNER_HEALTH_MS", "300"),
            ("RUST_LOG", "debug"),
        ],
        log.reopen().expect("log file"),
    );
    let client = connect(&mcp, &mcp.token).await.expect("connect");
    let result = client
        .call_tool(call("run_bash", "echo hi", Some(10_000)))
        .await
        .expect("tools/call");
    assert_eq!(result.is_error, Some(false), "{}", text(&result));
    assert_eq!(
        result.structured_content.unwrap_or_default()["stdout"],
        "hi\n"
    );
    client.cancel().await.ok();
    let health = get_json(format!("{}/health", mcp.base())).await;
    let shown = format!("http://{proxy_addr}/");
    let live_seen = health["runners"]
        .as_array()
        .expect("runners")
        .iter()
        .find(|r| r["state"] == "ok")
        .cloned()
        .unwrap_or_default();
    assert!(live_seen["url"].is_string(), "no runner is up: {health}");
    if live_seen["url"] != shown.as_str() {
        leaks.push(format!(
            "/health names the live runner {}",
            live_seen["url"]
        ));
    }
    look_for_secrets(&mut leaks, "/health", &health.to_string());
    let page = metrics(mcp.base()).await;
    if !page.contains(&format!("sandbox_mcp_runner_up{{runner=\"{shown}\"}} 1")) {
        leaks.push(format!("/metrics has no series for {shown}"));
    }
    look_for_secrets(&mut leaks, "/metrics", &page);
    // Every request that reached the runner carried the credentials.
    let requests = proxy.requests_to("/");
    assert!(proxy.requests_to("/run") >= 1 && requests >= 2);
    assert_eq!(
        proxy.sent_count(&format!("Basic {}", basic())),
        requests,
        "every request to the runner carries its URL's credentials as HTTP Basic"
    );

    // A server whose only runner, with credentials, is down: its errors name no secret.
    let lost_log = tempfile::NamedTempFile::new().expect("log file");
    let lost_url = format!("http://{USER_IN_URL}:{PASSWORD_IN_URL}@127.0.0.1:{dead}");
    let lost = start_mcp_logging_to(
        &[
            ("SANDBOX_RUNNER_URL", lost_url.as_str()),
            ("RUST_LOG", "debug"),
        ],
        lost_log.reopen().expect("log file"),
    );
    let client = connect(&lost, &lost.token).await.expect("connect");
    for params in [
        call("run_bash", "echo hi", Some(5_000)),
        tool("create_sandbox", json!({})),
    ] {
        let result = client.call_tool(params).await.expect("tools/call");
        assert_eq!(result.is_error, Some(true), "{}", text(&result));
        let answer = serde_json::to_string(&result).expect("JSON");
        look_for_secrets(&mut leaks, "a tool's error", &answer);
    }
    client.cancel().await.ok();
    let health = get_json(format!("{}/health", lost.base())).await;
    look_for_secrets(
        &mut leaks,
        "/health of a server whose runner is down",
        &health.to_string(),
    );
    let page = metrics(lost.base()).await;
    look_for_secrets(
        &mut leaks,
        "/metrics of a server whose runner is down",
        &page,
    );
    drop((mcp, lost));
    let logged = std::fs::read_to_string(log.path()).expect("read the log");
    if !logged.contains(&shown) {
        leaks.push(format!("the log never names the runner as {shown}"));
    }
    look_for_secrets(&mut leaks, "the log", &logged);
    let logged = std::fs::read_to_string(lost_log.path()).expect("read the log");
    look_for_secrets(&mut leaks, "the log of the other server", &logged);

    // --help, with the variable set.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox-mcp"))
        .args(["serve", "--help"])
        .env("SANDBOX_RUNNER_URL", &urls)
        .output()
        .expect("sandbox-mcp --help");
    look_for_secrets(&mut leaks, "--help", &String::from_utf8_lossy(&help.stdout));
    // Start-up errors: a URL it refuses, and one that does not parse (a raw '/' and '#' in
    // the password end the host part early).
    for refused in [
        format!("https://{USER_IN_URL}:{PASSWORD_IN_URL}@127.0.0.1:{dead}"),
        format!("http://{USER_IN_URL}:{PASSWORD}@127.0.0.1:{dead}"),
    ] {
        let output = briefly(common::mcp_command(
            &[("SANDBOX_RUNNER_URL", refused.as_str())],
            "t",
        ));
        assert!(!output.status.success(), "{refused} was accepted");
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(said.contains("SANDBOX_RUNNER_URL"), "{said}");
        look_for_secrets(&mut leaks, "a start-up error", &said);
    }
    assert!(leaks.is_empty(), "credentials shown:\n{}", leaks.join("\n"));
}
