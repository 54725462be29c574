//! Running pip and npm: bounded in time, killed when dropped, output kept to a tail.
//!
//! Both are run with options under which they start no programs of their own
//! (`--only-binary=:all:` and pip's guard build nothing, `--ignore-scripts` runs no
//! install scripts), so killing the one process ends the work; a confined scratch
//! (crate::confine) also kills whatever else its processes left when it is dropped.

use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::time::Instant;

/// How much of each output stream is kept: error messages are at the end.
const TAIL: usize = 64 << 10;

/// A finished command.
#[derive(Debug)]
pub(crate) struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// stderr then stdout, where pip's and npm's messages are.
    pub fn text(&self) -> String {
        format!("{}\n{}", self.stderr, self.stdout)
    }
}

/// Why a command did not finish.
#[derive(Debug)]
pub(crate) enum RunError {
    /// It could not be started.
    Spawn {
        program: OsString,
        source: std::io::Error,
    },
    /// Waiting for it failed.
    Wait(std::io::Error),
    /// The deadline passed; it was killed.
    TimedOut,
}

/// Runs `cmd` to completion or until `deadline`, whichever comes first.
pub(crate) async fn run(mut cmd: Command, deadline: Instant) -> Result<Output, RunError> {
    if Instant::now() >= deadline {
        return Err(RunError::TimedOut);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    tracing::debug!(command = ?cmd.as_std(), "running");
    let mut child = cmd.spawn().map_err(|source| RunError::Spawn {
        program: cmd.as_std().get_program().to_owned(),
        source,
    })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let finished = tokio::time::timeout_at(deadline, async {
        tokio::join!(child.wait(), read_tail(stdout), read_tail(stderr))
    })
    .await;
    match finished {
        Ok((status, stdout, stderr)) => Ok(Output {
            status: status.map_err(RunError::Wait)?,
            stdout,
            stderr,
        }),
        Err(_) => {
            // Killed and reaped before returning, so the caller may remove its files.
            let _ = child.start_kill();
            let _ = child.wait().await;
            Err(RunError::TimedOut)
        }
    }
}

/// How pip or npm failed, in terms both [`crate::build`] and [`crate::resolve`] report.
#[derive(Debug)]
pub(crate) enum ToolError {
    /// It could not be started.
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// A file it needs or wrote could not be read or written.
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// It ran past the deadline and was killed.
    Timeout,
    /// A package (or a version of it, or a wheel of it) does not exist; `message` says
    /// which, in words.
    NotFound { package: String, message: String },
    /// The index or registry could not be reached.
    Unreachable {
        package: Option<String>,
        detail: String,
    },
    /// The requirements contradict each other (or the base set's pins).
    Conflict { detail: String },
    /// A package's metadata names a dependency by URL (direct, VCS, local path): pip
    /// was stopped before it fetched anything.
    UrlDependency {
        /// The package whose metadata names it.
        package: String,
        /// Its file, as the index served it (may be empty).
        distribution: String,
        /// The dependency's name.
        dependency: String,
        /// The URL (cut to 300 characters).
        url: String,
    },
    /// The scratch filled up: what pip was writing is larger than the space allowed.
    NoSpace,
    /// The out-of-memory killer of its scratch's cgroup killed it (or another process
    /// of the scratch).
    OutOfMemory,
    /// Its report or lock file is not what was expected.
    Output {
        path: std::path::PathBuf,
        reason: String,
    },
    /// Any other failure: the step, and the end of its output.
    Failed { step: &'static str, detail: String },
}

impl ToolError {
    pub fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ToolError + '_ {
        move |source| ToolError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<RunError> for ToolError {
    fn from(e: RunError) -> ToolError {
        match e {
            RunError::Spawn { program, source } => ToolError::Spawn {
                program: program.to_string_lossy().into_owned(),
                source,
            },
            RunError::Wait(source) => ToolError::Failed {
                step: "waiting for a child process",
                detail: source.to_string(),
            },
            RunError::TimedOut => ToolError::Timeout,
        }
    }
}

async fn read_tail(stream: Option<impl AsyncRead + Unpin>) -> String {
    let Some(mut stream) = stream else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * TAIL {
                    kept.drain(..kept.len() - TAIL);
                }
            }
        }
    }
    if kept.len() > TAIL {
        kept.drain(..kept.len() - TAIL);
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// The last `n` non-empty lines of `text`, for error messages.
pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn output_is_captured() {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let out = run(cmd, Instant::now() + Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
    }

    #[tokio::test]
    async fn a_late_command_is_killed() {
        let mut cmd = Command::new("/bin/sleep");
        cmd.arg("30");
        let started = std::time::Instant::now();
        let err = run(cmd, Instant::now() + Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(matches!(err, RunError::TimedOut));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn last_lines_skip_blanks() {
        assert_eq!(last_lines("a\n\nb\nc\n\n", 2), "b\nc");
        assert_eq!(last_lines("a", 5), "a");
    }
}
