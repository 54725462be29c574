//! `sandbox-mcp stdio`: one MCP session on stdin/stdout ([`sandbox_mcp::serve_stdio`]),
//! with a runner started in this process first when asked (`--embedded`).

use sandbox_mcp::config::{ConfigError, ToolArgs};
use tokio::sync::watch;

use crate::embedded::{self, EmbedError, EmbeddedRunnerArgs};

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

/// Why `sandbox-mcp stdio` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StdioCommandError {
    /// A tool setting is not usable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The embedded runner could not start or failed.
    #[error(transparent)]
    Embedded(#[from] EmbedError),
    /// The MCP session could not be served.
    #[error(transparent)]
    Stdio(#[from] sandbox_mcp::StdioError),
}

/// Serves one session, with an embedded runner when asked, until the client closes stdin
/// or `shutdown` completes.
pub async fn run(
    mut args: StdioArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), StdioCommandError> {
    if !args.embedded {
        return Ok(sandbox_mcp::serve_stdio(args.tools.into_config()?).await?);
    }
    embedded::refuse_foreign_settings(&args.tools, "stdio --embedded")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let runner = embedded::start(&args.runner, stop_rx).await?;
    args.tools.runner_url = Some(runner.url.clone());
    args.tools.runner_token = Some(runner.token.clone());
    let served = match args.tools.into_config() {
        Ok(config) => tokio::select! {
            served = sandbox_mcp::serve_stdio(config) => served.map_err(StdioCommandError::from),
            () = shutdown => Ok(()),
        },
        Err(e) => Err(e.into()),
    };
    let _ = stop_tx.send(true);
    runner.stopped().await?;
    served
}
