//! The connection to one upstream, and the task that keeps it: connect (Streamable HTTP
//! with the configured headers, or a child process on stdio), list its tools (paged,
//! bounded), and when the connection drops or cannot be made, try again with backoff,
//! for as long as sandbox-mcp runs. Meanwhile its tools are absent.
//!
//! An upstream that says its tool list changed (`notifications/tools/list_changed`) is
//! listed again. A connected upstream is pinged every [`PING_EVERY`]: one that does not
//! answer within [`PING_TIMEOUT`] (a Streamable HTTP server that went away shows no other
//! sign until a call) is taken for down and connected again.
//!
//! A child process gets an environment built from an empty one (PATH and HOME alone:
//! never sandbox-mcp's token or secrets), starts in the file's folder, has its stderr
//! copied to the log line by line, and is killed when its connection is dropped (when it
//! is replaced, or when sandbox-mcp stops).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientRequest, PaginatedRequestParams, PingRequest, Tool};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;

use super::config::{Transport, UpstreamConfig};
use super::listed::{allowed, AllowedTool};
use super::Upstream;

/// Between two pings of a connected upstream.
const PING_EVERY: Duration = Duration::from_secs(5);
/// How long a ping may take before the upstream counts as down.
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting and listing the tools may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The first pause before trying again; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(250);
/// The longest pause between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The most pages of `tools/list` read.
const MAX_PAGES: usize = 64;
/// The most tools of one upstream kept (its offer's bound).
const MAX_TOOLS: usize = sandbox_protocol::tools::MAX_OFFERED;
/// The largest answer read from an HTTP upstream.
const MAX_RESPONSE_BYTES: usize = 8 << 20;
/// The longest stderr line of a child logged, in bytes.
const MAX_LOG_LINE_BYTES: usize = 2048;
/// PATH for a child when sandbox-mcp has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A client of one upstream.
type Service = RunningService<RoleClient, Listener>;

/// Hears an upstream's notifications: a changed tool list is to be listed again.
#[derive(Debug, Clone, Default)]
struct Listener {
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.tools_changed.notify_one();
        std::future::ready(())
    }
}

/// Why an upstream could not be connected.
#[derive(Debug, thiserror::Error)]
pub(super) enum LinkError {
    /// The child process could not be started.
    #[error("cannot start its command: {0}")]
    Spawn(std::io::Error),
    /// The MCP handshake failed.
    #[error("the MCP handshake failed: {0}")]
    Handshake(String),
    /// `tools/list` failed.
    #[error("tools/list failed: {0}")]
    List(String),
    /// It did not answer in time.
    #[error("it did not answer within {} s", CONNECT_TIMEOUT.as_secs())]
    TimedOut,
}

/// A live connection: the peer calls go through, and the tools it offers that `allow`
/// lets programs call.
#[derive(Debug, Clone)]
pub(super) struct Live {
    pub(super) peer: Peer<RoleClient>,
    pub(super) tools: Arc<[AllowedTool]>,
}

/// Keeps `upstream` connected until the task is aborted; `first` hears once the first
/// try has ended, however it ended.
pub(super) async fn keep(upstream: Arc<Upstream>, first: tokio::sync::oneshot::Sender<()>) {
    let mut first = Some(first);
    let mut backoff = MIN_BACKOFF;
    let name = upstream.config.name.clone();
    loop {
        let tried = tokio::time::timeout(CONNECT_TIMEOUT, connect(&upstream.config)).await;
        let connected = tried.unwrap_or(Err(LinkError::TimedOut));
        match connected {
            Ok((service, tools)) => {
                tracing::info!(server = %name, tools = tools.len(), "upstream connected");
                upstream.set_live(Some(Live {
                    peer: service.peer().clone(),
                    tools: tools.into(),
                }));
                first.take().map(|f| f.send(()));
                backoff = MIN_BACKOFF;
                watch(service, &upstream).await;
                upstream.set_live(None);
                tracing::warn!(server = %name, "upstream connection lost: reconnecting");
            }
            Err(error) => {
                upstream.set_live(None);
                first.take().map(|f| f.send(()));
                tracing::warn!(server = %name, %error, retry_in_ms = backoff.as_millis() as u64, "upstream unreachable: its tools are absent until it answers");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Waits until the connection ends, or a call found it broken (then ends it); lists the
/// tools again whenever the upstream says they changed.
async fn watch(service: Service, upstream: &Upstream) {
    let peer = service.peer().clone();
    let changed = service.service().tools_changed.clone();
    let stop = service.cancellation_token();
    let ended = service.waiting();
    tokio::pin!(ended);
    let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    loop {
        tokio::select! {
            _ = &mut ended => return,
            () = upstream.broken.notified() => {
                stop.cancel();
                let _ = ended.await;
                return;
            }
            _ = pings.tick() => {
                if let Err(why) = ping(&peer).await {
                    tracing::warn!(server = %upstream.config.name, %why, "upstream does not answer its ping");
                    stop.cancel();
                    let _ = ended.await;
                    return;
                }
            }
            () = changed.notified() => {
                let listed = tokio::time::timeout(CONNECT_TIMEOUT, list_tools(&peer)).await;
                match listed.unwrap_or(Err(LinkError::TimedOut)) {
                    Ok(listed) => {
                        let tools = allowed(&listed, &upstream.config.allow, MAX_TOOLS);
                        tracing::info!(server = %upstream.config.name, tools = tools.len(), "upstream tools changed");
                        upstream.set_live(Some(Live { peer: peer.clone(), tools: tools.into() }));
                    }
                    Err(error) => tracing::warn!(server = %upstream.config.name, %error, "upstream tools changed but cannot be listed: keeping the last list"),
                }
            }
        }
    }
}

/// Pings `peer` once, within [`PING_TIMEOUT`].
async fn ping(peer: &Peer<RoleClient>) -> Result<(), String> {
    let request = ClientRequest::PingRequest(PingRequest {
        method: Default::default(),
        extensions: Default::default(),
    });
    match tokio::time::timeout(PING_TIMEOUT, peer.send_request(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(root_cause(&error)),
        Err(_) => Err(format!("no answer within {} s", PING_TIMEOUT.as_secs())),
    }
}

/// Connects and lists the allowed tools.
async fn connect(config: &UpstreamConfig) -> Result<(Service, Vec<AllowedTool>), LinkError> {
    let service = match &config.transport {
        Transport::Http { url, headers } => {
            let headers: HashMap<_, _> = headers.0.iter().cloned().collect();
            let transport = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers)
                    .max_json_response_size(MAX_RESPONSE_BYTES)
                    .max_sse_event_size(MAX_RESPONSE_BYTES),
            );
            Listener::default()
                .serve(transport)
                .await
                .map_err(|e| LinkError::Handshake(root_cause(&e)))?
        }
        Transport::Stdio { command, dir } => {
            let transport = spawn(&config.name, command, dir)?;
            Listener::default()
                .serve(transport)
                .await
                .map_err(|e| LinkError::Handshake(root_cause(&e)))?
        }
    };
    let listed = list_tools(service.peer()).await?;
    Ok((service, allowed(&listed, &config.allow, MAX_TOOLS)))
}

/// The last cause of `error`'s chain ("Connection refused"): the part people act on.
fn root_cause(error: &dyn std::error::Error) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Every page of `tools/list`, within [`MAX_PAGES`].
async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, LinkError> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let page = peer
            .list_tools(Some(params))
            .await
            .map_err(|e| LinkError::List(root_cause(&e)))?;
        tools.extend(page.tools);
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    Ok(tools)
}

/// Starts the child of a stdio upstream, its stderr to the log.
fn spawn(
    name: &str,
    command: &[String],
    dir: &std::path::Path,
) -> Result<TokioChildProcess, LinkError> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| LinkError::Spawn(std::io::Error::other("empty command")))?;
    let mut child = tokio::process::Command::new(program);
    child
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or(DEFAULT_PATH.into()),
        )
        .env("HOME", std::env::var_os("HOME").unwrap_or("/".into()))
        .kill_on_drop(true);
    let (transport, stderr) = TokioChildProcess::builder(child)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(LinkError::Spawn)?;
    if let Some(stderr) = stderr {
        tokio::spawn(log_lines(name.to_owned(), stderr));
    }
    Ok(transport)
}

/// Copies a child's stderr to the log, a line at a time; a line longer than
/// [`MAX_LOG_LINE_BYTES`] is logged in pieces of that size.
async fn log_lines(name: String, mut stderr: tokio::process::ChildStderr) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        loop {
            let newline = pending.iter().position(|b| *b == b'\n');
            let end = match newline {
                Some(at) if at <= MAX_LOG_LINE_BYTES => at,
                _ if pending.len() >= MAX_LOG_LINE_BYTES => MAX_LOG_LINE_BYTES,
                _ => break,
            };
            let line: Vec<u8> = pending.drain(..end).collect();
            if newline == Some(end) {
                pending.remove(0);
            }
            let line = String::from_utf8_lossy(&line);
            tracing::info!(server = %name, "upstream stderr: {}", line.trim_end());
        }
    }
}
