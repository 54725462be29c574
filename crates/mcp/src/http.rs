//! The HTTP server: `/mcp` (Streamable HTTP, behind the Origin check and bearer auth) and
//! `/health`.

use std::future::Future;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::{AuthToken, HostPolicy, McpConfig};
use crate::server::SandboxServer;
use crate::{accept, auth, health, origin};

/// Why the HTTP server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The runner client could not be built.
    #[error("cannot build the runner client: {0}")]
    RunnerClient(#[from] reqwest::Error),
    /// Accepting or serving connections failed.
    #[error("serving HTTP failed: {0}")]
    Io(#[from] std::io::Error),
}

fn transport_config(config: &McpConfig, shutdown: CancellationToken) -> StreamableHttpServerConfig {
    let base = StreamableHttpServerConfig::default().with_cancellation_token(shutdown);
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

fn router(config: &McpConfig, server: SandboxServer, shutdown: CancellationToken) -> Router {
    let factory_server = server.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(factory_server.clone()),
        LocalSessionManager::default().into(),
        transport_config(config, shutdown),
    );
    let mcp = Router::new()
        .route_service("/mcp", mcp)
        .layer(axum::middleware::map_response(session_ended))
        .layer(axum::middleware::from_fn(accept::answer_as_accepted))
        .layer(axum::middleware::from_fn_with_state(
            config.auth_token.clone(),
            auth::require_bearer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            config.allowed_origins.clone(),
            origin::check_origin,
        ));
    Router::new()
        .route("/health", get(health::health))
        .with_state(server)
        .merge(mcp)
}

/// Serves MCP over Streamable HTTP on `listener` until `shutdown` completes.
///
/// On shutdown every session ends (open SSE streams close) and in-flight requests finish.
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
    let server = SandboxServer::new(&config.tools)?;
    let sessions = CancellationToken::new();
    let app = router(&config, server, sessions.clone());
    tracing::info!(
        addr = ?listener.local_addr().ok(),
        runner = config.tools.runner.as_ref().map(|r| r.url.as_str()),
        exec_enabled = config.tools.exec_enabled,
        default_timeout_ms = config.tools.default_timeout.as_millis() as u64,
        allowed_origins = ?config.allowed_origins,
        allowed_hosts = ?config.allowed_hosts,
        "MCP server listening"
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            sessions.cancel();
        })
        .await?;
    Ok(())
}
