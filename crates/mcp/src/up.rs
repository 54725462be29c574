//! `sandbox-mcp up`: the all-in-one. It starts a runner (process backend) inside this
//! process, on a loopback port with a random token, and the MCP server on `PORT` wired
//! to it over the same HTTP client a split deployment uses; it makes `MCP_AUTH_TOKEN`
//! when none is given, and prints the URL, the token and client settings.

use crate::config::ServeArgs;
use crate::token_store::{self, Origin};
use sandbox_protocol::api::defaults;
use sandbox_runner::config::SandboxArgs;
use std::io::Read;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

/// `sandbox-mcp up` settings: the MCP server's, and the embedded runner's sandboxes.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// The MCP server (its runner URL and token are set by `up`).
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Sandboxes the embedded runner keeps (warm plus running): the most runs at once.
    #[arg(long, env = "RUNNER_POOL_SIZE", default_value_t = defaults::POOL_SIZE)]
    pub pool_size: usize,
    /// The embedded runner's sandboxes.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Make a new bearer token and save it in place of the one kept from earlier starts
    /// (clients configured with the old one must be given the new one).
    #[arg(long)]
    pub new_token: bool,
}

/// Why `up` could not start.
#[derive(Debug, thiserror::Error)]
pub enum UpError {
    /// An MCP server setting is not usable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A runner setting is not usable.
    #[error(transparent)]
    RunnerConfig(#[from] sandbox_runner::config::ConfigError),
    /// No random token could be made.
    #[error("making a random token from /dev/urandom: {0}")]
    Random(std::io::Error),
    /// The saved token could not be read or a new one saved.
    #[error(transparent)]
    TokenStore(#[from] crate::token_store::TokenStoreError),
    /// A port could not be bound.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address concerned.
        addr: SocketAddr,
        /// What failed underneath.
        source: std::io::Error,
    },
    /// The embedded runner failed.
    #[error("the embedded runner: {0}")]
    Runner(#[from] sandbox_runner::server::ServeError),
    /// The embedded runner's task ended without saying why (it panicked or was cancelled).
    #[error("the embedded runner stopped: {0}")]
    RunnerTask(#[from] tokio::task::JoinError),
    /// The embedded runner stopped before it was ready, without an error.
    #[error("the embedded runner stopped before it was ready")]
    RunnerGone,
    /// The MCP server failed.
    #[error(transparent)]
    Mcp(#[from] crate::ServeError),
}

/// Runs the runner and the MCP server until `shutdown` completes; `announce` gets the
/// banner once both serve.
pub async fn up(
    mut args: UpArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    announce: impl FnOnce(&Banner),
) -> Result<(), UpError> {
    if args.serve.tools.runner_url.is_some() {
        tracing::warn!("SANDBOX_RUNNER_URL is ignored by `up`, which runs its own runner");
    }
    let runner_token = random_token()?;
    let runner_config = runner_config(&args, &runner_token)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let runner_listener = bind(runner_config.listen).await?;
    let runner_addr = local_addr(&runner_listener, runner_config.listen)?;
    let (ready_tx, ready_rx) = oneshot::channel();
    let runner = tokio::spawn(sandbox_runner::server::serve(
        runner_config,
        runner_listener,
        stopped(stop_rx.clone()),
        move || {
            let _ = ready_tx.send(());
        },
    ));
    if ready_rx.await.is_err() {
        // The runner ended before it was ready: its error says why.
        return Err(match runner.await {
            Ok(Err(e)) => e.into(),
            Ok(Ok(())) => UpError::RunnerGone,
            Err(e) => e.into(),
        });
    }
    let (auth_token, token_origin) = match args.serve.auth_token.take() {
        Some(token) => (token, Origin::Given),
        None => token_store::load_or_make(
            token_store::default_path().as_deref(),
            args.new_token,
            random_hex,
        )?,
    };
    args.serve.auth_token = Some(auth_token.clone());
    args.serve.tools.runner_url = Some(format!("http://{runner_addr}"));
    args.serve.tools.runner_token = Some(runner_token);
    let mcp_addr = SocketAddr::new(args.serve.bind, args.serve.port);
    let mcp_config = args.serve.clone().into_config()?;
    let mcp_listener = bind(mcp_addr).await?;
    let bound = local_addr(&mcp_listener, mcp_addr)?;
    announce(&Banner {
        url: format!("http://{bound}/mcp"),
        token: auth_token,
        token_origin,
        runner: format!("http://{runner_addr}"),
        pool_size: args.pool_size,
    });
    let served = crate::serve(mcp_config, mcp_listener, stopped(stop_rx)).await;
    match runner.await {
        Ok(Err(e)) => return Err(e.into()),
        Err(e) => return Err(e.into()),
        Ok(Ok(())) => {}
    }
    Ok(served?)
}

fn runner_config(
    args: &UpArgs,
    token: &str,
) -> Result<sandbox_runner::config::RunnerConfig, UpError> {
    let serve = sandbox_runner::config::ServeArgs {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        token: Some(token.to_owned()),
        no_auth: false,
        pool_size: args.pool_size,
        queue_size: defaults::QUEUE_SIZE,
        queue_timeout_ms: defaults::QUEUE_TIMEOUT_MS,
        code_cap_bytes: defaults::CODE_CAP_BYTES as usize,
        shutdown_grace_ms: 30_000,
        http: sandbox_runner::config::HttpLimitArgs::default(),
        sandbox: args.sandbox.clone(),
    };
    Ok(serve.validate()?)
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, UpError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| UpError::Listen { addr, source })
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, UpError> {
    listener
        .local_addr()
        .map_err(|source| UpError::Listen { addr, source })
}

/// 32 random bytes from the kernel, as hex.
fn random_token() -> Result<String, UpError> {
    random_hex().map_err(UpError::Random)
}

fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What `up` tells its user once it serves.
#[derive(Debug, Clone)]
pub struct Banner {
    /// The MCP endpoint.
    pub url: String,
    /// The bearer token clients send.
    pub token: String,
    /// Where the token comes from.
    pub token_origin: Origin,
    /// The embedded runner's URL (loopback).
    pub runner: String,
    /// The embedded runner's pool size.
    pub pool_size: usize,
}

impl std::fmt::Display for Banner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (url, token) = (&self.url, &self.token);
        let made = match &self.token_origin {
            Origin::Given => String::new(),
            Origin::Saved(path) => {
                format!(" (kept in {}; --new-token replaces it)", path.display())
            }
            Origin::New(path) => format!(
                " (new, saved in {} for the next start; set MCP_AUTH_TOKEN to choose one)",
                path.display()
            ),
            Origin::Unsaved => {
                " (generated; no $HOME to keep it in: set MCP_AUTH_TOKEN to keep one)".to_owned()
            }
        };
        writeln!(
            f,
            "sandbox-mcp is up: bash, Python and Node in fresh sandboxes"
        )?;
        writeln!(f)?;
        writeln!(f, "  MCP endpoint:  {url}")?;
        writeln!(f, "  Bearer token:  {token}{made}")?;
        writeln!(
            f,
            "  Runner:        embedded at {}, process backend, {} sandboxes",
            self.runner, self.pool_size
        )?;
        writeln!(f)?;
        writeln!(f, "Claude Code:")?;
        writeln!(f, "  claude mcp add --transport http sandbox {url} --header \"Authorization: Bearer {token}\"")?;
        writeln!(f)?;
        writeln!(
            f,
            "Clients configured with JSON (Claude Desktop, Cursor, VS Code, ...):"
        )?;
        writeln!(f, "  {{")?;
        writeln!(f, "    \"mcpServers\": {{")?;
        writeln!(f, "      \"sandbox\": {{")?;
        writeln!(f, "        \"type\": \"http\",")?;
        writeln!(f, "        \"url\": \"{url}\",")?;
        writeln!(
            f,
            "        \"headers\": {{ \"Authorization\": \"Bearer {token}\" }}"
        )?;
        writeln!(f, "      }}")?;
        writeln!(f, "    }}")?;
        writeln!(f, "  }}")?;
        writeln!(f)?;
        write!(f, "Stop with Ctrl-C.")
    }
}
