//! MCP over stdio, for clients that start the server as a process.

use rmcp::ServiceExt;
use tokio::sync::watch;

use crate::config::{ToolArgs, ToolConfig};
use crate::embedded::{self, EmbedError, EmbeddedRunnerArgs};
use crate::server::{Callers, HandlerError, SandboxServer};

/// `sandbox-mcp stdio` settings.
#[derive(Debug, Clone, clap::Args)]
pub struct StdioArgs {
    /// The tools and the runner they call.
    #[command(flatten)]
    pub tools: ToolArgs,
    /// Run a runner inside this process instead of calling one (as root, like `up`).
    #[arg(long)]
    pub embedded: bool,
    /// The embedded runner (with --embedded).
    #[command(flatten)]
    pub runner: EmbeddedRunnerArgs,
}

/// Why the stdio server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// A tool setting is not usable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The embedded runner could not start or failed.
    #[error(transparent)]
    Embedded(#[from] EmbedError),
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

/// `sandbox-mcp stdio`: serves one session, with an embedded runner when asked, until the
/// client closes stdin or `shutdown` completes.
pub async fn run(
    mut args: StdioArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), StdioError> {
    if !args.embedded {
        return serve_stdio(args.tools.into_config()?).await;
    }
    embedded::refuse_foreign_settings(&args.tools, "stdio --embedded")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let runner = embedded::start(&args.runner, stop_rx).await?;
    args.tools.runner_url = Some(runner.url.clone());
    args.tools.runner_token = Some(runner.token.clone());
    let served = tokio::select! {
        served = serve_stdio(args.tools.into_config()?) => served,
        () = shutdown => Ok(()),
    };
    let _ = stop_tx.send(true);
    runner.stopped().await?;
    served
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
