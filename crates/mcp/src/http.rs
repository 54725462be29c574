//! The HTTP server: `/mcp` (Streamable HTTP, behind the Origin check, bearer auth and the
//! limits) and `/health`, served by `http_limits`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{AuthToken, HostPolicy, McpConfig};
use crate::limits::McpLimits;
use crate::server::{Callers, HandlerError, SandboxServer};
use crate::{accept, auth, health, limits, origin};

/// After the grace period, how long connections have to close once their sessions end.
const CLOSE_TIME: Duration = Duration::from_secs(2);

/// Why the HTTP server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The handler could not be made.
    #[error(transparent)]
    Handler(#[from] HandlerError),
}

fn transport_config(config: &McpConfig, shutdown: CancellationToken) -> StreamableHttpServerConfig {
    let base = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(config.max_body_bytes);
    // The Origin check is ours (crate::origin), so that it runs before authentication.
    let base = base.disable_allowed_origins();
    match &config.allowed_hosts {
        HostPolicy::Loopback => base,
        HostPolicy::Any => base.disable_allowed_hosts(),
        HostPolicy::List(hosts) => base.with_allowed_hosts(hosts.clone()),
    }
}

/// rmcp answers a session's DELETE with 202; the Python SDK expects 200 or 204 (and warns on
/// anything else), and a DELETE that ended the session has nothing more to accept.
async fn session_ended(method: Method, mut response: Response) -> Response {
    if method == Method::DELETE && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

fn router(
    config: &McpConfig,
    server: SandboxServer,
    sessions_end: CancellationToken,
    in_flight: TaskTracker,
) -> Router {
    let factory_server = server.clone();
    let sessions = Arc::new(LocalSessionManager::default());
    let mcp = StreamableHttpService::new(
        move || Ok(factory_server.for_new_session()),
        sessions.clone(),
        transport_config(config, sessions_end),
    );
    let limits = McpLimits::new(
        config.max_body_bytes,
        config.max_sessions,
        sessions,
        in_flight,
    );
    let mcp = Router::new()
        .route_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(limits),
            limits::limit_posts,
        ))
        .layer(axum::middleware::map_response(session_ended))
        .layer(axum::middleware::from_fn(accept::answer_as_accepted))
        .route_layer(axum::middleware::from_fn_with_state(
            config.auth_token.clone(),
            auth::require_bearer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            config.allowed_origins.clone(),
            origin::check_origin,
        ));
    Router::new()
        .route("/health", get(health::health))
        .route("/metrics", get(health::metrics))
        .with_state(server)
        .merge(mcp)
        .fallback(auth::not_found)
}

/// The `/mcp` and `/health` routes for `config`, without the connection limits and the
/// shutdown of [`serve`]: for mounting in another server, or for driving in-process (the
/// fuzz target does). Cancelling `sessions_end` ends every session. Nothing polls the
/// runners here (that is [`serve`]'s background task), so `/health` shows them `unknown`.
pub fn app(config: &McpConfig, sessions_end: CancellationToken) -> Result<Router, ServeError> {
    let server = SandboxServer::with_max_calls(
        &config.tools,
        config.max_calls_per_session,
        Callers::Bearer,
    )?;
    Ok(router(config, server, sessions_end, TaskTracker::new()))
}

/// Serves MCP over Streamable HTTP on `listener` until `shutdown` completes.
///
/// On shutdown it stops accepting, lets the calls in flight finish for at most the grace
/// period, then ends every session (open SSE streams close) and returns.
pub async fn serve(
    config: McpConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    if config.auth_token.is_weak() {
        tracing::warn!(
            "MCP_AUTH_TOKEN is shorter than {} characters: use a long random token",
            AuthToken::RECOMMENDED_LEN
        );
    }
    let server = SandboxServer::with_max_calls(
        &config.tools,
        config.max_calls_per_session,
        Callers::Bearer,
    )?;
    let following = server.follow_runner_limits().await;
    let _stop_following = AbortOnDrop(following);
    let _upstreams = server.start_upstreams().await;
    let sessions_end = CancellationToken::new();
    let in_flight = TaskTracker::new();
    let app = router(&config, server, sessions_end.clone(), in_flight.clone());
    tracing::info!(
        addr = ?listener.local_addr().ok(),
        runner = config.tools.runner.as_ref().map(|r| r.url().as_str()),
        exec_enabled = config.tools.exec_enabled,
        upstreams = ?server_names(&config),
        default_timeout_ms = config.tools.default_timeout.map(|t| t.as_millis() as u64),
        allowed_origins = ?config.allowed_origins,
        allowed_hosts = ?config.allowed_hosts,
        limits = ?config.http,
        max_body_bytes = config.max_body_bytes,
        max_sessions = config.max_sessions,
        max_calls_per_session = config.max_calls_per_session,
        shutdown_grace_ms = config.shutdown_grace.as_millis() as u64,
        "MCP server listening"
    );
    let stop = CancellationToken::new();
    let serving = http_limits::serve(listener, app, config.http, stop.clone().cancelled_owned());
    let stopping = async {
        shutdown.await;
        stop.cancel();
        drain(in_flight, config.shutdown_grace).await;
        sessions_end.cancel();
        tokio::time::sleep(CLOSE_TIME).await;
    };
    tokio::select! {
        () = serving => {}
        () = stopping => tracing::warn!("connections still open after shutdown: closing them"),
    }
    Ok(())
}

/// The upstreams' names, for the start's log line (never their addresses or headers).
fn server_names(config: &McpConfig) -> Vec<String> {
    config
        .tools
        .upstreams
        .as_ref()
        .map(|u| u.names())
        .unwrap_or_default()
}

/// Waits for the POSTs in flight to be answered, for at most `grace`.
async fn drain(in_flight: TaskTracker, grace: Duration) {
    in_flight.close();
    let calls = in_flight.len();
    if calls > 0 {
        tracing::info!(calls, ?grace, "waiting for the calls in flight");
    }
    if tokio::time::timeout(grace, in_flight.wait()).await.is_err() {
        tracing::warn!(
            calls = in_flight.len(),
            ?grace,
            "grace period over: ending the calls still in flight"
        );
    }
}

/// Aborts a background task when dropped (when the server stops, however it stops).
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
