//! MCP over stdio, for clients that start the server as a process: one session on
//! stdin/stdout, given the tools' configuration. (`sandbox-mcp stdio --embedded`, which
//! starts a runner in the same process first, is the program's: `sandbox-mcp-bin`.)

use rmcp::ServiceExt;

use crate::config::ToolConfig;
use crate::server::{Callers, HandlerError, SandboxServer};

/// Why the stdio server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The handler could not be made.
    #[error(transparent)]
    Handler(#[from] HandlerError),
    /// The MCP session could not start (for example, a broken initialize).
    #[error("MCP session over stdio failed to start: {0}")]
    Start(String),
    /// The session ended abnormally.
    #[error("MCP session over stdio failed: {0}")]
    Session(String),
}

/// Serves one MCP session on stdin/stdout until the client closes it.
/// There is no authentication: the client started this process, and its sandbox ids are
/// bound to this process.
pub async fn serve_stdio(config: ToolConfig) -> Result<(), StdioError> {
    if config.runner.is_none() {
        tracing::warn!(
            "no runner configured: every tool call will answer \"503: runner not configured\"; \
             set SANDBOX_RUNNER_URL (and SANDBOX_RUNNER_TOKEN) in the client's settings for this server"
        );
    }
    let server = SandboxServer::new(&config, Callers::this_process()?)?;
    let _stop_following = crate::http::AbortOnDrop(server.follow_runner_limits().await);
    let _upstreams = server.start_upstreams().await;
    tracing::info!(
        runner = config.runner.as_ref().map(|r| r.url().as_str()),
        exec_enabled = config.exec_enabled,
        "MCP server on stdio"
    );
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| StdioError::Start(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| StdioError::Session(e.to_string()))?;
    Ok(())
}
