//! `sandbox-runner`: serve the runner API, or run one program.

use clap::{Parser, Subcommand};
use sandbox_runner::config::ServeArgs;
use sandbox_runner::image_cli::ImageCommand;
use sandbox_runner::oneshot::RunArgs;
use sandbox_runner::packages_cli::PackagesCommand;
use sandbox_runner::server;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    version,
    about = "Runs programs (bash, Python, Node, TypeScript, C, C++, Go, Java, and languages an operator adds) in fresh sandboxes"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve POST /run, GET /health and GET /metrics (the default).
    Serve(ServeArgs),
    /// Run one program in a fresh sandbox and exit with its exit code.
    Run(RunArgs),
    /// Build the kernel and images VM sandboxes boot (with the offered languages'
    /// toolchains: the built-in ones, and Debian's that `--languages` names).
    #[command(subcommand)]
    Image(ImageCommand),
    /// Build the package set sandboxes see (no network inside: it is installed here).
    #[command(subcommand)]
    Packages(PackagesCommand),
}

fn main() -> ExitCode {
    if let Some(code) = sandbox_runner::multicall::dispatch() {
        return exit_code(code);
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in a client's log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandbox-runner: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command.unwrap_or(Command::Serve(cli.serve)) {
        Command::Serve(args) => runtime.block_on(serve(args)).map(|()| 0),
        Command::Run(args) => runtime
            .block_on(sandbox_runner::oneshot::run(args))
            .map_err(anyhow::Error::from),
        Command::Image(command) => sandbox_runner::image_cli::main(command)
            .map(|()| 0)
            .map_err(anyhow::Error::from),
        Command::Packages(command) => runtime
            .block_on(sandbox_runner::packages_cli::main(command))
            .map(|()| 0),
    };
    match result {
        Ok(code) => exit_code(code),
        Err(e) => {
            eprintln!("sandbox-runner: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.validate()?;
    tracing::info!(%config, "starting");
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("listening on {}: {e}", config.listen))?;
    let addr = listener.local_addr()?;
    let announce = move || println!("sandbox-runner listening on http://{addr}");
    Ok(server::serve(config, listener, server::termination(), announce).await?)
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
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
