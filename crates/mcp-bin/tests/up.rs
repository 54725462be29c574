//! `sandbox-mcp up`: the all-in-one, driven as a newcomer would: start it, take the URL
//! and token it prints, connect a real MCP client, run each language.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use rmcp::model::CallToolRequestParams;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;

/// Reads what `up` prints until its last banner line.
fn banner(stdout: impl std::io::Read) -> Vec<String> {
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("a banner line");
        let last = line.starts_with("Stop with Ctrl-C");
        lines.push(line);
        if last {
            break;
        }
    }
    lines
}

fn field<'a>(lines: &'a [String], label: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.trim().strip_prefix(label))
        .map(|rest| rest.split_whitespace().next().unwrap_or_default())
        .unwrap_or_else(|| panic!("no {label:?} in the banner: {lines:#?}"))
}

fn call(tool: &'static str, code: &str) -> CallToolRequestParams {
    let mut args = serde_json::Map::new();
    args.insert("code".into(), code.into());
    CallToolRequestParams::new(tool).with_arguments(args)
}

#[tokio::test]
async fn up_prints_working_settings_and_runs_each_language() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "`up` makes sandboxes and must run as root (the README's test command does)"
    );
    let state = state_dir("languages");
    let mut child = start_up(&state, &[]);
    let lines = banner(child.stdout.take().expect("stdout"));
    let url = field(&lines, "MCP endpoint:").to_owned();
    let token = field(&lines, "Bearer token:").to_owned();
    assert!(token.len() >= 32, "a generated token is long: {token}");
    let claude = lines
        .iter()
        .find(|l| l.contains("claude mcp add"))
        .expect("a Claude Code line");
    assert!(claude.contains(&url) && claude.contains(&token), "{claude}");
    assert!(
        lines.iter().any(|l| l.contains("\"mcpServers\"")),
        "a JSON block"
    );

    let config =
        StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(token.clone());
    let client =
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("initialize with the printed settings");
    for (tool, code) in [
        ("run_bash", "echo $((6 * 7))"),
        ("run_python", "print(6 * 7)"),
        ("run_node", "console.log(6 * 7)"),
    ] {
        let result = client
            .call_tool(call(tool, code))
            .await
            .expect("tools/call");
        assert_eq!(result.is_error, Some(false), "{tool}");
        let structured = result.structured_content.expect("structuredContent");
        assert_eq!(structured["stdout"], "42\n", "{tool}");
    }
    client.cancel().await.expect("close");

    let wrong = StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header("wrong");
    assert!(
        ().serve(StreamableHttpClientTransport::from_config(wrong))
            .await
            .is_err()
    );

    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = child.wait().expect("up exits");
    assert!(status.success(), "{status}");
    let instance = format!("r{}", child.id());
    for controller in ["memory", "cpu", "pids", "freezer", ""] {
        let dir = std::path::Path::new("/sys/fs/cgroup")
            .join(controller)
            .join("sandbox-runner")
            .join(&instance);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    let _ = std::fs::remove_dir_all(&state);
}

/// `up` with its state folder (`XDG_STATE_HOME`) in `state` and `args`.
fn start_up(state: &std::path::Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_sandbox-mcp"))
        .arg("up")
        .args(args)
        .env_remove("MCP_AUTH_TOKEN")
        .env("XDG_STATE_HOME", state)
        .env("PORT", "0")
        .env("RUNNER_POOL_SIZE", "1")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start sandbox-mcp up")
}

fn state_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("up-state-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Starts `up`, reads the token from its banner, and stops it.
fn token_of_one_start(state: &std::path::Path, args: &[&str]) -> (String, Vec<String>) {
    let mut child = start_up(state, args);
    let lines = banner(child.stdout.take().expect("stdout"));
    let token = field(&lines, "Bearer token:").to_owned();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    assert!(child.wait().expect("up exits").success());
    (token, lines)
}

#[tokio::test]
async fn the_token_survives_a_restart_until_rotated() {
    assert!(nix::unistd::geteuid().is_root(), "`up` makes sandboxes");
    let state = state_dir("token");
    let (first, lines) = token_of_one_start(&state, &[]);
    let file = state.join("sandbox-mcp/token");
    assert!(lines.iter().any(|l| l.contains("saved in")), "{lines:#?}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&file).expect("token file").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let (second, lines) = token_of_one_start(&state, &[]);
    assert_eq!(second, first, "a restart keeps the token");
    assert!(lines.iter().any(|l| l.contains("kept in")), "{lines:#?}");
    let (third, _) = token_of_one_start(&state, &["--new-token"]);
    assert_ne!(third, first, "--new-token makes a new one");
    let (fourth, _) = token_of_one_start(&state, &[]);
    assert_eq!(fourth, third, "and keeps that one");
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test]
async fn where_up_opens_hosts_its_banner_names_them() {
    assert!(nix::unistd::geteuid().is_root(), "`up` makes sandboxes");
    let state = state_dir("egress");
    let allow = ["--egress-allow", "pypi.org,*.pythonhosted.org"];
    let (_, lines) = token_of_one_start(&state, &allow);
    let network = lines
        .iter()
        .find(|l| l.trim_start().starts_with("Network:"))
        .unwrap_or_else(|| panic!("no Network line: {lines:#?}"));
    assert!(
        network.contains("only pypi.org, *.pythonhosted.org, through the runner's proxy"),
        "{network}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("no network")),
        "{lines:#?}"
    );
    let (_, closed) = token_of_one_start(&state, &[]);
    assert!(
        !closed.iter().any(|l| l.contains("Network:")),
        "nothing open, no Network line: {closed:#?}"
    );
    let _ = std::fs::remove_dir_all(&state);
}
