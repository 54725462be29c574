//! `sandbox-mcp up`: the all-in-one. It binds the MCP port first (a taken port is the
//! first and only complaint), starts a runner inside this process ([`crate::embedded`]),
//! and serves MCP wired to it; it keeps a bearer token across starts
//! ([`crate::token_store`]) and prints the URL, the token and client settings
//! ([`crate::banner`]).

use crate::banner::Banner;
use crate::embedded::{self, EmbedError, EmbeddedRunnerArgs};
use crate::token_store::{self, Origin};
use sandbox_mcp::config::ServeArgs;
use sandbox_mcp::listen::{self, ListenError};
use std::net::SocketAddr;
use tokio::sync::watch;

/// `sandbox-mcp up` settings: the MCP server's, and the embedded runner's.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// The MCP server (its runner URL and token are set by `up`).
    #[command(flatten)]
    pub serve: ServeArgs,
    /// The embedded runner.
    #[command(flatten)]
    pub runner: EmbeddedRunnerArgs,
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
    Config(#[from] sandbox_mcp::ConfigError),
    /// The MCP port could not be bound.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// The embedded runner could not start or failed.
    #[error(transparent)]
    Runner(#[from] EmbedError),
    /// The saved token could not be read or a new one saved.
    #[error(transparent)]
    TokenStore(#[from] crate::token_store::TokenStoreError),
    /// The MCP server failed.
    #[error(transparent)]
    Mcp(#[from] sandbox_mcp::ServeError),
}

/// Runs the runner and the MCP server until `shutdown` completes; `announce` gets the
/// banner once both serve.
pub async fn up(
    mut args: UpArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    announce: impl FnOnce(&Banner),
) -> Result<(), UpError> {
    embedded::refuse_foreign_settings(&args.serve.tools, "up")?;
    let mcp_addr = SocketAddr::new(args.serve.bind, args.serve.port);
    let (mcp_listener, bound) = listen::bind(mcp_addr).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let runner = embedded::start(&args.runner, stop_rx.clone()).await?;
    let (auth_token, token_origin) = match args.serve.auth_token.take() {
        Some(token) => (token, Origin::Given),
        None => token_store::load_or_make(
            token_store::default_path().as_deref(),
            args.new_token,
            embedded::random_hex,
        )?,
    };
    args.serve.auth_token = Some(auth_token.clone());
    args.serve.tools.runner_url = Some(runner.url.clone());
    args.serve.tools.runner_token = Some(runner.token.clone());
    let mcp_config = args.serve.clone().into_config()?;
    announce(&Banner {
        url: format!("http://{bound}/mcp"),
        token: auth_token,
        token_origin,
        runner: runner.url.clone(),
        backend: args.runner.sandbox.backend,
        pool_size: args.runner.pool.pool_size,
        resource_limits: !args.runner.sandbox.unsafe_no_resource_limits,
        packages: runner.packages.clone(),
        languages: runner.languages.clone(),
        network: runner.network.clone(),
        network_by_default: runner.network_by_default,
        exe: std::env::current_exe().ok(),
    });
    let served = sandbox_mcp::serve(mcp_config, mcp_listener, embedded::stopped(stop_rx)).await;
    runner.stopped().await?;
    Ok(served?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        up: UpArgs,
    }

    fn parse(args: &[&str]) -> UpArgs {
        let mut argv = vec!["sandbox-mcp"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("{e}"))
            .up
    }

    #[test]
    fn up_takes_the_servers_settings_and_the_runners() {
        let args = parse(&["--port", "0", "--pool-size", "2", "--max-sessions", "5"]);
        assert_eq!(args.serve.port, 0);
        assert_eq!(args.serve.limits.max_sessions, 5);
        assert_eq!(args.runner.pool.pool_size, 2);
        assert!(!args.new_token);
        assert!(parse(&["--new-token"]).new_token);
    }

    #[tokio::test]
    async fn a_runner_url_is_refused_before_anything_starts() {
        let args = parse(&["--runner-url", "http://127.0.0.1:8081", "--port", "0"]);
        let result = up(args, std::future::pending(), |_| panic!("announced")).await;
        assert!(
            matches!(
                result,
                Err(UpError::Runner(EmbedError::Refused {
                    variable: "SANDBOX_RUNNER_URL",
                    command: "up",
                    ..
                }))
            ),
            "{result:?}"
        );
    }
}
