//! MCP over stdio, for clients that start the server as a process.

use rmcp::ServiceExt;

use crate::config::ToolConfig;
use crate::server::SandboxServer;

/// Why the stdio server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The runner client could not be built.
    #[error("cannot build the runner client: {0}")]
    RunnerClient(#[from] reqwest::Error),
    /// The MCP session could not start (for example, a broken initialize).
    #[error("MCP session over stdio failed to start: {0}")]
    Start(String),
    /// The session ended abnormally.
    #[error("MCP session over stdio failed: {0}")]
    Session(String),
}

/// Serves one MCP session on stdin/stdout until the client closes it.
/// There is no authentication: the client started this process.
pub async fn serve_stdio(config: ToolConfig) -> Result<(), StdioError> {
    let server = SandboxServer::new(&config)?;
    let _stop_following = crate::http::AbortOnDrop(server.follow_runner_limits().await);
    tracing::info!(
        runner = config.runner.as_ref().map(|r| r.url.as_str()),
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
