//! `sandbox-runner run`: one job through the backend, for operators.

use crate::config::SandboxArgs;
use crate::http::to_response;
use crate::server::make_backend;
use sandbox_protocol::agent::Job;
use sandbox_protocol::Lang;
use std::io::{Read, Write};
use std::path::PathBuf;

/// `sandbox-runner run` settings.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The language of the program.
    #[arg(long, value_parser = parse_lang)]
    pub lang: Lang,
    /// The program text.
    #[arg(short = 'c', long = "code", conflicts_with = "file")]
    pub code: Option<String>,
    /// A file holding the program, or `-` for standard input.
    pub file: Option<PathBuf>,
    /// Timeout in milliseconds (default: SANDBOX_TIMEOUT_MS).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

fn parse_lang(s: &str) -> Result<Lang, String> {
    s.parse()
        .map_err(|e: sandbox_protocol::UnknownLang| e.to_string())
}

/// Runs one program in a fresh sandbox, prints its output, and returns its exit code.
pub async fn run(args: RunArgs) -> anyhow::Result<i32> {
    let code = read_code(&args)?;
    let config = args.sandbox.validate()?;
    let timeout = args
        .timeout_ms
        .unwrap_or(config.default_timeout.as_millis() as u64);
    if timeout == 0 || timeout > config.max_timeout.as_millis() as u64 {
        anyhow::bail!(
            "--timeout-ms must be between 1 and {}",
            config.max_timeout.as_millis()
        );
    }
    let backend = make_backend(&config)?;
    let mut sandbox = match backend.create(None).await {
        Ok(sandbox) => sandbox,
        Err(e) => {
            backend.shutdown();
            return Err(e.into());
        }
    };
    let job = Job {
        lang: args.lang,
        code,
        timeout_ms: timeout,
        stdout_cap: config.output_cap_bytes,
        stderr_cap: config.output_cap_bytes,
    };
    let outcome = sandbox.run(job).await;
    sandbox.destroy().await;
    backend.shutdown();
    let response = to_response(outcome?);
    std::io::stdout().write_all(response.stdout.as_bytes())?;
    std::io::stderr().write_all(response.stderr.as_bytes())?;
    for (flag, note) in [
        (response.timed_out, "timed out"),
        (response.oom_killed, "killed: out of memory"),
        (response.stdout_truncated, "stdout truncated at the cap"),
        (response.stderr_truncated, "stderr truncated at the cap"),
    ] {
        if flag {
            eprintln!("sandbox-runner: {note}");
        }
    }
    Ok(response.exit_code)
}

fn read_code(args: &RunArgs) -> anyhow::Result<String> {
    match (&args.code, &args.file) {
        (Some(code), _) => Ok(code.clone()),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut code = String::new();
            std::io::stdin().read_to_string(&mut code)?;
            Ok(code)
        }
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display())),
        (None, None) => {
            anyhow::bail!("give the program with -c CODE, a FILE, or - for standard input")
        }
    }
}
