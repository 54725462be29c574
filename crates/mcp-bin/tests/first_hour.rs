//! A new user's first hour with `up` and `stdio`: parallel calls that outlast the
//! runner's queue wait, a taken port, settings `up` cannot use, no root, a client that
//! starts its own server, and logs fit for a file.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::ServiceExt;

const NOBODY: &str = "65534";

fn up_command(state: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-mcp"));
    command
        .arg("up")
        .env_remove("MCP_AUTH_TOKEN")
        .env_remove("SANDBOX_RUNNER_URL")
        .env_remove("SANDBOX_RUNNER_TOKEN")
        .env_remove("RUNNER_POOL_SIZE")
        .env("XDG_STATE_HOME", state)
        .env("PORT", "0")
        .env("RUST_LOG", "warn");
    command
}

/// Reads `up`'s banner, returning the endpoint and the token.
fn endpoint_and_token(child: &mut Child) -> (String, String) {
    let stdout = child.stdout.take().expect("stdout");
    let mut url = None;
    let mut token = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("a banner line");
        let value = || line.split_whitespace().nth(2).map(str::to_owned);
        if line.trim_start().starts_with("MCP endpoint:") {
            url = value();
        }
        if line.trim_start().starts_with("Bearer token:") {
            token = value();
        }
        if line.starts_with("Stop with Ctrl-C") {
            break;
        }
    }
    (url.expect("endpoint"), token.expect("token"))
}

/// A service started by a test, stopped (SIGTERM, then waited for) when the test ends,
/// whether it passes or panics.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

/// Waits (at most 30 s) for a process expected to exit at once; returns its stderr.
fn exit_and_stderr(mut child: Child) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    (status, stderr)
}

fn state_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("first-hour-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Under `up`'s defaults (4 sandboxes, a 5 s queue wait) 8 parallel 6-second programs all
/// return their output: the second four wait past the runner's queue wait, within their
/// own deadline.
#[tokio::test]
async fn eight_parallel_six_second_programs_all_finish_under_ups_defaults() {
    assert!(nix::unistd::geteuid().is_root(), "`up` makes sandboxes");
    let state = state_dir("parallel");
    let mut child = Stopped(
        up_command(&state)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start up"),
    );
    let (url, token) = endpoint_and_token(&mut child.0);
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(token);
    let client =
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("initialize");
    let calls = (0..8).map(|i| {
        let peer = client.peer().clone();
        let code = format!("sleep 6; echo done {i}");
        async move {
            (
                i,
                peer.call_tool(common::call("run_bash", &code, None)).await,
            )
        }
    });
    let started = Instant::now();
    for (i, result) in futures::future::join_all(calls).await {
        let result = result.expect("tools/call");
        assert_eq!(
            result.is_error,
            Some(false),
            "call {i}: {}",
            common::text(&result)
        );
        let structured = result.structured_content.expect("structuredContent");
        assert_eq!(structured["stdout"], format!("done {i}\n"), "call {i}");
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(12),
        "two waves of 6 s: {took:?}"
    );
    client.cancel().await.expect("close");
    drop(child);
    let _ = std::fs::remove_dir_all(&state);
}

/// A taken port is one line that names the fix, before any sandbox is made, and logs
/// written to a file carry no colour codes.
#[test]
fn a_taken_port_is_one_clear_line() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = held.local_addr().expect("addr").port().to_string();
    let state = state_dir("port");
    let child = up_command(&state)
        .env("PORT", &port)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start up");
    let (status, stderr) = exit_and_stderr(child);
    assert!(!status.success());
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(
        lines[0].contains(&format!("port {port} on 127.0.0.1 is already in use"))
            && lines[0].contains("PORT=")
            && lines[0].contains("--port"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "no colour codes: {stderr:?}");
}

/// `up` runs its own runner: a runner URL or a runner HTTP limit is refused by name.
#[test]
fn up_refuses_runner_settings_it_cannot_use_by_name() {
    let state = state_dir("refuse");
    for (variable, value) in [
        ("SANDBOX_RUNNER_URL", "http://127.0.0.1:8081"),
        ("RUNNER_LISTEN", "127.0.0.1:8081"),
        ("RUNNER_MAX_CONNECTIONS", "10"),
    ] {
        let child = up_command(&state)
            .env(variable, value)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start up");
        let (status, stderr) = exit_and_stderr(child);
        assert!(!status.success(), "{variable}");
        assert!(
            stderr.contains(&format!("{variable} is set, but up runs its own runner")),
            "{variable}: {stderr}"
        );
    }
}

/// As an ordinary user, `up` exits at once with commands; the commands it gives work: the
/// runner as root, and `sandbox-mcp stdio` as that user runs a program.
#[tokio::test]
async fn as_a_normal_user_up_gives_commands_that_work() {
    assert!(nix::unistd::geteuid().is_root(), "the test switches users");
    let state = state_dir("nobody");
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_sandbox-mcp"))
        .arg("up")
        .env_remove("MCP_AUTH_TOKEN")
        .env("XDG_STATE_HOME", &state)
        .env("PORT", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let (status, stderr) = exit_and_stderr(command.spawn().expect("setpriv up"));
    assert!(!status.success());
    assert!(stderr.contains("need root"), "{stderr}");
    let runner_line = command_after(&stderr, "sudo env SANDBOX_RUNNER_TOKEN=");
    let stdio_line = command_after(&stderr, "SANDBOX_RUNNER_URL=");
    assert!(stderr.contains("sudo "), "{stderr}");

    // The runner's command, as root (sudo is root already), on a free port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let runner_line = runner_line
        .trim_start_matches("sudo ")
        .replace("127.0.0.1:8081", &listen);
    let mut runner = Stopped(
        Command::new("sh")
            .args(["-c", &format!("exec {runner_line} --pool-size 1")])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the runner as printed"),
    );
    let mut first = String::new();
    BufReader::new(runner.0.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("the runner's first line");
    assert!(first.contains("listening"), "{first}");

    // The MCP server's command, as the ordinary user, driven by a stdio client.
    let stdio_line = stdio_line.replace("127.0.0.1:8081", &listen);
    let client_command = tokio::process::Command::new("setpriv").configure(|cmd| {
        cmd.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups"])
            .args(["sh", "-c", &format!("exec env {stdio_line}")])
            .env("RUST_LOG", "warn");
    });
    let client =
        ().serve(TokioChildProcess::new(client_command).expect("spawn stdio"))
            .await
            .expect("initialize over stdio");
    assert_python_prints(&client, "print(6 * 7)", "42\n").await;
    client.cancel().await.expect("close");
    drop(runner);
}

/// Subordinate ids granted to a user in /etc/subuid and /etc/subgid for a test, taken
/// back when it ends (passing or not).
struct SubordinateIds(String);

impl SubordinateIds {
    fn grant(line: &str) -> SubordinateIds {
        for file in ["/etc/subuid", "/etc/subgid"] {
            let mut text = std::fs::read_to_string(file).unwrap_or_default();
            text.push_str(line);
            text.push('\n');
            std::fs::write(file, text).expect("granting subordinate ids");
        }
        SubordinateIds(line.to_owned())
    }
}

impl Drop for SubordinateIds {
    fn drop(&mut self) {
        for file in ["/etc/subuid", "/etc/subgid"] {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let kept: String = text
                .lines()
                .filter(|l| *l != self.0)
                .map(|l| format!("{l}\n"))
                .collect();
            let _ = std::fs::write(file, kept);
        }
    }
}

/// As an ordinary user with subordinate ids (and the uidmap helpers), on a host that
/// offers no delegated cgroup v2 (this one: v1), `up` refuses to run without limits
/// unless told by name; told, it runs programs, and says loudly that they have no memory
/// or CPU limit: in its banner and in every tool's description.
#[tokio::test]
async fn as_a_normal_user_with_subordinate_ids_up_runs_programs_only_when_told_to_drop_limits() {
    assert!(nix::unistd::geteuid().is_root(), "the test switches users");
    let _ids = SubordinateIds::grant("nobody:3100000:65536");
    let state = state_dir("rootless");
    std::fs::create_dir_all(&state).expect("state folder");
    nix::unistd::chown(&state, Some(65534.into()), Some(65534.into())).expect("chown state");
    let as_nobody = |opt_out: bool| {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_sandbox-mcp"))
            .arg("up")
            .env_remove("MCP_AUTH_TOKEN")
            .env("XDG_STATE_HOME", &state)
            .env("PORT", "0")
            .env("RUNNER_POOL_SIZE", "2")
            .env("RUST_LOG", "warn");
        if opt_out {
            command.env("RUNNER_UNSAFE_NO_RESOURCE_LIMITS", "true");
        }
        command
    };
    let (status, stderr) = exit_and_stderr(
        as_nobody(false)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("setpriv up"),
    );
    assert!(!status.success());
    assert!(
        stderr.contains("delegated") && stderr.contains("RUNNER_UNSAFE_NO_RESOURCE_LIMITS=true"),
        "{stderr}"
    );

    let mut child = Stopped(
        as_nobody(true)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("setpriv up"),
    );
    let mut banner = String::new();
    for line in BufReader::new(child.0.stdout.take().expect("stdout")).lines() {
        let line = line.expect("a banner line");
        banner.push_str(&line);
        banner.push('\n');
        if line.starts_with("Stop with Ctrl-C") {
            break;
        }
    }
    assert!(banner.contains("WARNING: UNSAFE"), "{banner}");
    let value = |key: &str| {
        banner
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .and_then(|l| l.split_whitespace().nth(2))
            .expect(key)
            .to_owned()
    };
    let (url, token) = (value("MCP endpoint:"), value("Bearer token:"));
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(token);
    let client =
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("initialize");
    let tools = client.list_all_tools().await.expect("tools/list");
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(
            description.contains("NO memory or CPU limit"),
            "{description}"
        );
    }
    assert_python_prints(&client, "import os; print(os.getuid(), 6 * 7)", "1000 42\n").await;
    client.cancel().await.expect("close");
    drop(child);
    let _ = std::fs::remove_dir_all(&state);
}

/// Calls run_python with `code`: a result, not an error, whose stdout is `expected`.
async fn assert_python_prints(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    code: &str,
    expected: &str,
) {
    let result = client
        .call_tool(common::call("run_python", code, None))
        .await
        .expect("tools/call");
    assert_eq!(result.is_error, Some(false), "{}", common::text(&result));
    assert_eq!(
        result.structured_content.expect("structured")["stdout"],
        expected
    );
}

/// The command on the line of `text` that holds `start`, from `start` on.
fn command_after(text: &str, start: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.contains(start))
        .unwrap_or_else(|| panic!("no {start:?} in: {text}"));
    let at = line.find(start).expect("found");
    line[at..].trim().to_owned()
}

/// A client that starts its own server: `stdio --embedded` runs programs with a runner
/// inside the process, and leaves nothing behind when the client closes.
#[tokio::test]
async fn stdio_embedded_runs_programs() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the embedded runner makes sandboxes"
    );
    let command =
        tokio::process::Command::new(env!("CARGO_BIN_EXE_sandbox-mcp")).configure(|cmd| {
            cmd.args(["stdio", "--embedded"])
                .env_remove("SANDBOX_RUNNER_URL")
                .env_remove("SANDBOX_RUNNER_TOKEN")
                .env("RUNNER_POOL_SIZE", "1")
                .env("RUST_LOG", "warn");
        });
    let client =
        ().serve(TokioChildProcess::new(command).expect("spawn stdio --embedded"))
            .await
            .expect("initialize");
    for (tool, code) in [
        ("run_bash", "echo $((6 * 7))"),
        ("run_node", "console.log(6 * 7)"),
    ] {
        let result = client
            .call_tool(common::call(tool, code, None))
            .await
            .expect("tools/call");
        assert_eq!(
            result.is_error,
            Some(false),
            "{tool}: {}",
            common::text(&result)
        );
        assert_eq!(
            result.structured_content.expect("structured")["stdout"],
            "42\n"
        );
    }
    client.cancel().await.expect("close");
}

/// `stdio` without a runner says so when it starts, not only at the first call.
#[test]
fn stdio_without_a_runner_warns_at_start() {
    let child = Command::new(env!("CARGO_BIN_EXE_sandbox-mcp"))
        .arg("stdio")
        .env_remove("SANDBOX_RUNNER_URL")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stdio");
    let (_, stderr) = exit_and_stderr(child);
    assert!(
        stderr.contains("no runner configured") && stderr.contains("SANDBOX_RUNNER_URL"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "no colour codes: {stderr:?}");
}
