//! Starts the real binaries for the integration tests and connects rmcp's client to them.
// Each test crate uses its own part of these helpers.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use test_support::Service;

/// How long a server may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A server started for one test; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Server {
    service: Service,
    /// The URL the server printed.
    pub url: String,
    /// The token it was started with.
    pub token: String,
}

impl Server {
    /// The base URL without `/mcp`.
    pub fn base(&self) -> &str {
        self.url.trim_end_matches("/mcp")
    }
}

/// A fresh random-enough token.
pub fn token() -> String {
    format!("test-token-{:x}{:x}", std::process::id(), rand_part())
}

fn rand_part() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// Starts a command and waits for its first stdout line, which must start with `prefix`.
/// Its stderr goes where `command` says (the test's own unless set).
fn start(command: Command, prefix: &str, token: String) -> Server {
    let service = Service::start(command, prefix, START_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    let url = service.url().to_owned();
    Server {
        service,
        url,
        token,
    }
}

/// Starts `sandbox-mcp serve` on a free loopback port with the given extra environment.
pub fn start_mcp(env: &[(&str, &str)]) -> Server {
    start_mcp_with_token(env, token())
}

/// [`start_mcp`] with the client token `token`.
pub fn start_mcp_with_token(env: &[(&str, &str)], token: String) -> Server {
    let mut command = mcp_command(env, &token);
    command.stderr(Stdio::inherit());
    start(command, "sandbox-mcp listening on ", token)
}

/// [`start_mcp`] whose log (stderr) goes to `log`.
pub fn start_mcp_logging_to(env: &[(&str, &str)], log: std::fs::File) -> Server {
    let token = token();
    let mut command = mcp_command(env, &token);
    command.stderr(log);
    start(command, "sandbox-mcp listening on ", token)
}

/// `sandbox-mcp serve` on a free loopback port for clients with `token`, with the given
/// extra environment and none of the caller's runner settings.
pub fn mcp_command(env: &[(&str, &str)], token: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-mcp"));
    command.arg("serve");
    for var in [
        "SANDBOX_RUNNER_URL",
        "SANDBOX_RUNNER_TOKEN",
        "SANDBOX_HANDLE_KEY",
        "FEATURE_SANDBOX_EXEC",
        "MCP_ALLOWED_ORIGINS",
        "MCP_LANGUAGE_TOOLS",
    ] {
        command.env_remove(var);
    }
    command
        .env("MCP_AUTH_TOKEN", token)
        .env("PORT", "0")
        .env("BIND", "127.0.0.1")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied());
    command
}

/// The sandbox-runner binary: `SANDBOX_RUNNER_BIN`, or the one built beside this test.
pub fn runner_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("SANDBOX_RUNNER_BIN") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("test binary path");
    let beside = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("sandbox-runner"))
        .expect("target directory");
    assert!(
        beside.exists(),
        "{} is missing: build it first (cargo build -p sandbox-runner) or set SANDBOX_RUNNER_BIN",
        beside.display()
    );
    beside
}

/// Starts `sandbox-runner serve` on a free loopback port.
pub fn start_runner() -> Server {
    start_runner_with(&[])
}

/// Starts `sandbox-runner serve` on a free loopback port, with `extra` flags.
pub fn start_runner_with(extra: &[&str]) -> Server {
    start_runner_with_token(token(), extra)
}

/// [`start_runner_with`] whose token is `token` (runners behind one server share one).
pub fn start_runner_with_token(token: String, extra: &[&str]) -> Server {
    let mut command = Command::new(runner_bin());
    command.args(["serve", "--listen", "127.0.0.1:0", "--token", &token]);
    if !extra.contains(&"--pool-size") {
        command.args(["--pool-size", "2"]);
    }
    command.args(extra).stderr(Stdio::inherit());
    start(command, "sandbox-runner listening on ", token)
}

/// Starts `sandbox-runner serve --no-auth` (no token: accepted on loopback) on a free
/// loopback port.
pub fn start_runner_without_token() -> Server {
    let mut command = Command::new(runner_bin());
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
            "--pool-size",
            "2",
        ])
        .stderr(Stdio::inherit());
    start(command, "sandbox-runner listening on ", String::new())
}

/// Connects rmcp's Streamable HTTP client with the given token.
pub async fn connect(
    server: &Server,
    token: &str,
) -> Result<RunningService<RoleClient, ()>, rmcp::service::ClientInitializeError> {
    connect_to(&server.url, token).await
}

/// [`connect`] to a server at `url` (its `/mcp`) that this harness did not start.
pub async fn connect_to(
    url: &str,
    token: &str,
) -> Result<RunningService<RoleClient, ()>, rmcp::service::ClientInitializeError> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
}

/// The names of the run tools the server lists now.
pub async fn run_tools(server: &Server) -> Vec<String> {
    let client = connect(server, &server.token).await.expect("initialize");
    let tools = client.list_all_tools().await.expect("tools/list");
    let _ = client.cancel().await;
    tools
        .into_iter()
        .map(|t| t.name.to_string())
        .filter(|n| n.starts_with("run_"))
        .collect()
}

/// `tools/call` with `{code, timeoutMs?}`.
pub fn call(name: &'static str, code: &str, timeout_ms: Option<u64>) -> CallToolRequestParams {
    let mut arguments = JsonObject::new();
    arguments.insert("code".into(), code.into());
    if let Some(t) = timeout_ms {
        arguments.insert("timeoutMs".into(), t.into());
    }
    CallToolRequestParams::new(name).with_arguments(arguments)
}

/// `tools/call` of `name` with `arguments` (a JSON object).
pub fn tool(name: &'static str, arguments: serde_json::Value) -> CallToolRequestParams {
    let serde_json::Value::Object(arguments) = arguments else {
        panic!("arguments must be an object");
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

/// A connected rmcp client.
pub type Client = RunningService<RoleClient, ()>;

/// A call that must succeed: its result and `structuredContent` (`error` null).
pub async fn call_ok(
    client: &Client,
    params: CallToolRequestParams,
) -> (CallToolResult, serde_json::Value) {
    let name = params.name.clone();
    let result = client.call_tool(params).await.expect("tools/call");
    assert_eq!(result.is_error, Some(false), "{name}: {}", text(&result));
    let structured = result
        .structured_content
        .clone()
        .expect("structuredContent");
    assert!(structured["error"].is_null(), "{name}: {structured}");
    (result, structured)
}

/// A call that must fail with `code`, saying `needle`.
pub async fn call_err(client: &Client, params: CallToolRequestParams, code: &str, needle: &str) {
    let name = params.name.clone();
    let result = client.call_tool(params).await.expect("tools/call");
    assert_eq!(result.is_error, Some(true), "{name}: {}", text(&result));
    let structured = result
        .structured_content
        .clone()
        .expect("structuredContent");
    assert_eq!(
        structured["error"]["code"],
        code,
        "{name}: {}",
        text(&result)
    );
    assert!(text(&result).contains(needle), "{name}: {}", text(&result));
}

/// A runner behind a recording proxy, and two servers in front of it with two tokens
/// (Alice's and Bob's), each with a client.
pub struct TwoHolders {
    /// The runner.
    pub runner: Server,
    /// The proxy both servers call the runner through.
    pub proxy: RecordingProxy,
    /// Alice's server.
    pub alice: Server,
    /// Bob's server.
    pub bob: Server,
    /// A client of Alice's server, with her token.
    pub alice_client: Client,
    /// A client of Bob's server, with his token.
    pub bob_client: Client,
}

/// Starts a [`TwoHolders`].
pub async fn two_holders() -> TwoHolders {
    let runner = start_runner();
    let proxy = RecordingProxy::start(runner.addr()).await;
    let env = [
        ("SANDBOX_RUNNER_URL", proxy.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
    ];
    let alice = start_mcp_with_token(&env, "alice-token-0123456789abcdef".into());
    let bob = start_mcp_with_token(&env, "bob-token-0123456789abcdef".into());
    let alice_client = connect(&alice, &alice.token).await.expect("initialize");
    let bob_client = connect(&bob, &bob.token).await.expect("initialize");
    TwoHolders {
        runner,
        proxy,
        alice,
        bob,
        alice_client,
        bob_client,
    }
}

/// The text content of a result.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

impl Server {
    /// The server's process id.
    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.service.pid() as i32)
    }

    /// `host:port` of the server.
    pub fn addr(&self) -> String {
        self.base().trim_start_matches("http://").to_owned()
    }

    /// Waits up to `limit` for the process to exit on its own.
    pub fn wait_for_exit(
        &mut self,
        limit: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        wait_for_exit(&mut self.service, limit)
    }
}

/// Waits up to `limit` for `service` to exit on its own.
pub fn wait_for_exit(
    service: &mut Service,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(status)) = service.try_wait() {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

/// What a [`FakeRunner`] answers to `POST /run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A 200 whose body is not JSON.
    NotJson,
    /// A 200 with JSON that is not a run result.
    WrongShape,
    /// A run result with `stdout` "fake\n", after the delay.
    Good,
}

/// A tiny HTTP server standing for a runner across the network: it answers every request
/// with what `answer` says, after `delay`. It stands for a broken or slow peer, not for
/// our runner's logic.
pub struct FakeRunner {
    /// Its base URL.
    pub url: String,
    answer: std::sync::Arc<std::sync::Mutex<(Answer, std::time::Duration)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeRunner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeRunner {
    /// Starts answering on a free loopback port.
    pub async fn start(answer: Answer, delay: std::time::Duration) -> FakeRunner {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake runner");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let answer = std::sync::Arc::new(std::sync::Mutex::new((answer, delay)));
        let shared = answer.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(fake_exchange(stream, shared.clone()));
            }
        });
        FakeRunner { url, answer, task }
    }

    /// Changes what the next requests get.
    pub fn set(&self, answer: Answer, delay: std::time::Duration) {
        *self.answer.lock().expect("answer lock") = (answer, delay);
    }
}

async fn fake_exchange(
    mut stream: tokio::net::TcpStream,
    answer: std::sync::Arc<std::sync::Mutex<(Answer, std::time::Duration)>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = stream.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if request.len() >= end + 4 + length {
                break;
            }
        }
    }
    let (kind, delay) = *answer.lock().expect("answer lock");
    tokio::time::sleep(delay).await;
    let body = match kind {
        Answer::NotJson => "<html>502 from a proxy, served as 200</html>".to_owned(),
        Answer::WrongShape => r#"{"result": "ok", "items": [1, 2, 3]}"#.to_owned(),
        Answer::Good => serde_json::json!({
            "stdout": "fake\n", "stderr": "", "exitCode": 0, "durationMs": 1,
            "timedOut": false, "oomKilled": false,
            "stdoutTruncated": false, "stderrTruncated": false,
        })
        .to_string(),
    };
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}

/// Sends `head` (and `body`) on a new connection and reads until the server closes it or
/// `limit` passes; `None` when the server kept it open.
pub async fn raw_exchange(
    addr: &str,
    request: &[u8],
    limit: std::time::Duration,
) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("send");
    let mut answer = Vec::new();
    match tokio::time::timeout(limit, stream.read_to_end(&mut answer)).await {
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        Err(_) => None,
    }
}

/// A TCP proxy in front of a real runner that keeps every byte sent to it, so that a test
/// can tell which requests reached the runner. It stands between our parts; it answers
/// nothing itself.
pub struct RecordingProxy {
    /// Its base URL.
    pub url: String,
    sent: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RecordingProxy {
    /// Starts forwarding a free loopback port to `target` (`host:port`).
    pub async fn start(target: String) -> RecordingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let shared = sent.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(runner) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                tokio::spawn(forward(client, runner, shared.clone()));
            }
        });
        RecordingProxy { url, sent, task }
    }

    /// How many times the bytes sent so far contain `text`.
    pub fn sent_count(&self, text: &str) -> usize {
        let sent = self.sent.lock().expect("proxy lock");
        String::from_utf8_lossy(&sent).matches(text).count()
    }

    /// How many requests sent so far name a path containing `fragment`. (A request line
    /// may follow the previous request's body on the same line: bodies need not end in a
    /// newline.)
    pub fn requests_to(&self, fragment: &str) -> usize {
        let sent = self.sent.lock().expect("proxy lock");
        let sent = String::from_utf8_lossy(&sent);
        sent.match_indices(" HTTP/1.1\r\n")
            .filter(|(end, _)| {
                let head = &sent[..*end];
                let start = ["GET /", "POST /", "PUT /", "DELETE /"]
                    .iter()
                    .filter_map(|method| head.rfind(method))
                    .max();
                start.is_some_and(|start| head[start..].contains(fragment))
            })
            .count()
    }
}

async fn forward(
    client: tokio::net::TcpStream,
    runner: tokio::net::TcpStream,
    sent: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_read, mut client_write) = client.into_split();
    let (mut runner_read, mut runner_write) = runner.into_split();
    let upstream = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = client_read.read(&mut buf).await {
            if n == 0 || runner_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
            sent.lock()
                .expect("proxy lock")
                .extend_from_slice(&buf[..n]);
        }
        let _ = runner_write.shutdown().await;
    };
    let downstream = async move {
        let _ = tokio::io::copy(&mut runner_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::join!(upstream, downstream);
}
