//! The `sandbox-mcp` binary: `serve` (the default), `stdio`, and `up` (with an embedded
//! runner). See the crate's library for what each command joins.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sandbox_mcp::config::ServeArgs;
use sandbox_mcp_bin::stdio::StdioArgs;
use sandbox_mcp_bin::up::UpArgs;
use tracing_subscriber::EnvFilter;

/// MCP server for sandboxed code: bash, Python, Node.js, TypeScript, C, C++, Go, Java and more.
#[derive(Parser)]
// The name is the program's, not its package's (`sandbox-mcp-bin`).
#[command(
    name = "sandbox-mcp",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Arguments of `serve`, which runs when no command is given.
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over Streamable HTTP on /mcp (the default).
    Serve(Box<ServeArgs>),
    /// Serve one MCP session over stdin/stdout.
    Stdio(Box<StdioArgs>),
    /// Run everything here: a runner in this process, and the MCP server wired to it
    /// (as root, or as a user with subordinate ids in a delegated cgroup v2: the
    /// sandboxes use namespaces and cgroups).
    Up(Box<UpArgs>),
}

fn main() -> ExitCode {
    // The embedded runner of `up` starts its sandboxes by executing this binary again.
    if let Some(code) = sandbox_runner::multicall::dispatch() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    sandbox_mcp::config::forget_empty_env_vars();
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
    };
    let result = match cli.command {
        Some(Command::Serve(args)) => runtime.block_on(serve(*args)),
        None => runtime.block_on(serve(cli.serve)),
        Some(Command::Stdio(args)) => runtime.block_on(stdio(*args)),
        Some(Command::Up(args)) => runtime.block_on(up(*args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&format!("{e:#}")),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("sandbox-mcp: {message}");
    ExitCode::FAILURE
}

/// Logs go to stderr: stdout carries the listening line (serve) or the protocol (stdio).
fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in a client's log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let addr = SocketAddr::new(args.bind, args.port);
    let config = args.into_config()?;
    let (listener, bound) = sandbox_mcp::listen::bind(addr).await?;
    println!("sandbox-mcp listening on http://{bound}/mcp");
    sandbox_mcp::serve(config, listener, shutdown_signal()).await?;
    Ok(())
}

async fn up(args: UpArgs) -> anyhow::Result<()> {
    sandbox_mcp_bin::up::up(args, shutdown_signal(), |banner| {
        println!("sandbox-mcp listening on {}", banner.url);
        println!("{banner}");
    })
    .await?;
    Ok(())
}

async fn stdio(args: StdioArgs) -> anyhow::Result<()> {
    sandbox_mcp_bin::stdio::run(args, shutdown_signal()).await?;
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!(%e, "cannot watch SIGTERM; only Ctrl-C stops the server");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Flags flattened from several crates must not collide (clap checks only when a
    /// command is first parsed).
    #[test]
    fn every_subcommand_s_flags_are_unique() {
        Cli::command().debug_assert();
    }
}
