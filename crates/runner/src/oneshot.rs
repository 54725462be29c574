//! `sandbox-runner run`: one job through the backend, for operators.

use crate::config::SandboxArgs;
use crate::job::{self, Jobs, Place, RequestError};
use crate::pool::PooledSandbox;
use crate::server::{make_backend, make_egress};
use sandbox_protocol::api::RunRequest;
use std::io::{Read, Write};
use std::path::PathBuf;

/// `sandbox-runner run` settings.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The language of the program (one the runner offers).
    #[arg(long)]
    pub lang: String,
    /// The program text.
    #[arg(short = 'c', long = "code", conflicts_with = "file")]
    pub code: Option<String>,
    /// A file holding the program, or `-` for standard input.
    pub file: Option<PathBuf>,
    /// Timeout in milliseconds (default: SANDBOX_TIMEOUT_MS).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// The sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Why `sandbox-runner run` could not run the program.
#[derive(Debug, thiserror::Error)]
pub enum OneshotError {
    /// Neither `-c`, a file nor `-` was given.
    #[error("give the program with -c CODE, a FILE, or - for standard input")]
    NoProgram,
    /// The program could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file, or `-`.
        path: std::path::PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A setting is out of range.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The program cannot be run as asked (`--lang` is not offered).
    #[error(transparent)]
    Request(RequestError),
    /// `--timeout-ms` is out of range.
    #[error("--timeout-ms must be between 1 and {max}")]
    Timeout {
        /// The largest timeout.
        max: u64,
    },
    /// The sandbox failed.
    #[error(transparent)]
    Sandbox(#[from] crate::backend::BackendError),
    /// The program's output could not be written out.
    #[error("writing the program's output: {0}")]
    Output(#[from] std::io::Error),
}

/// Runs one program in a fresh sandbox, prints its output, and returns its exit code.
pub async fn run(args: RunArgs) -> Result<i32, OneshotError> {
    let code = read_code(&args)?;
    let config = args.sandbox.validate()?;
    let request = RunRequest {
        lang: args.lang,
        code,
        timeout_ms: args.timeout_ms,
        tools: None,
        egress: None,
    };
    let job = Jobs::command(&config)
        .job(request, Place::OneShot)
        .map_err(|e| match e {
            RequestError::Timeout { max, .. } => OneshotError::Timeout { max },
            other => OneshotError::Request(other),
        })?;
    let backend = make_backend(&config, 1, make_egress(&config))?;
    let mut sandbox = match backend.create(None, false).await {
        Ok(sandbox) => sandbox,
        Err(e) => {
            backend.shutdown();
            return Err(e.into());
        }
    };
    // The operator's default grant (`RUNNER_EGRESS_DEFAULT`), where hosts are open.
    if let (Ok(Some(grant)), Some(handle)) = (config.egress.grant(None), sandbox.egress()) {
        handle.set_grant(grant);
    }
    let outcome = sandbox.run(job, None).await;
    sandbox.destroy().await;
    backend.shutdown();
    let response = job::answer(outcome?, Place::OneShot);
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

fn read_code(args: &RunArgs) -> Result<String, OneshotError> {
    let read = |path: &std::path::Path, source| OneshotError::Read {
        path: path.to_owned(),
        source,
    };
    match (&args.code, &args.file) {
        (Some(code), _) => Ok(code.clone()),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut code = String::new();
            std::io::stdin()
                .read_to_string(&mut code)
                .map_err(|e| read(path, e))?;
            Ok(code)
        }
        (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| read(path, e)),
        (None, None) => Err(OneshotError::NoProgram),
    }
}
