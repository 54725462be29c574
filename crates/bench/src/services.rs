//! The services under test, started as child processes on loopback ports: a
//! `sandbox-runner serve` and a `sandbox-mcp serve` wired to it.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a service may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a service may take to shut down after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the service binaries are.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `sandbox-runner`.
    pub runner: PathBuf,
    /// `sandbox-mcp`.
    pub mcp: PathBuf,
}

impl Binaries {
    /// The binaries in `dir`, or beside this executable when `dir` is `None`.
    pub fn find(dir: Option<&Path>) -> anyhow::Result<Binaries> {
        let dir = match dir {
            Some(dir) => dir.to_owned(),
            None => std::env::current_exe()
                .context("locating the bench executable")?
                .parent()
                .context("the bench executable has no folder")?
                .to_owned(),
        };
        let found = Binaries {
            runner: dir.join("sandbox-runner"),
            mcp: dir.join("sandbox-mcp"),
        };
        for bin in [&found.runner, &found.mcp] {
            if !bin.is_file() {
                bail!(
                    "{} is missing: build it first (cargo build --release -p sandbox-runner \
                     -p sandbox-mcp) or pass --bin-dir",
                    bin.display()
                );
            }
        }
        Ok(found)
    }
}

/// A running service; killed if dropped without [`Service::stop`].
pub struct Service {
    child: Child,
    /// The URL from its listening line.
    pub url: String,
    /// Its process id.
    pub pid: u32,
    /// From spawning it to its listening line.
    pub started_in: Duration,
}

impl Service {
    /// Starts `sandbox-runner serve` with `pool_size` sandboxes.
    pub async fn runner(bin: &Path, token: &str, pool_size: usize) -> anyhow::Result<Service> {
        let mut cmd = command(bin);
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--pool-size"])
            .arg(pool_size.to_string())
            .env("SANDBOX_RUNNER_TOKEN", token);
        Service::start(cmd, "sandbox-runner listening on ").await
    }

    /// Starts `sandbox-mcp serve` in front of the runner at `runner_url`.
    pub async fn mcp(
        bin: &Path,
        token: &str,
        runner_url: &str,
        runner_token: &str,
    ) -> anyhow::Result<Service> {
        let mut cmd = command(bin);
        cmd.arg("serve")
            .env("MCP_AUTH_TOKEN", token)
            .env("SANDBOX_RUNNER_URL", runner_url)
            .env("SANDBOX_RUNNER_TOKEN", runner_token)
            .env("PORT", "0")
            .env("BIND", "127.0.0.1");
        Service::start(cmd, "sandbox-mcp listening on ").await
    }

    /// Spawns and waits for the line that starts with `prefix`.
    async fn start(mut cmd: Command, prefix: &str) -> anyhow::Result<Service> {
        let program = cmd.as_std().get_program().to_string_lossy().into_owned();
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let begun = Instant::now();
        let mut child = cmd.spawn().with_context(|| format!("starting {program}"))?;
        let pid = child.id().context("the service exited at once")?;
        let stdout = child.stdout.take().context("stdout was not piped")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(START_TIMEOUT, lines.next_line())
            .await
            .with_context(|| format!("{program} printed nothing within {START_TIMEOUT:?}"))?
            .with_context(|| format!("reading the output of {program}"))?
            .with_context(|| format!("{program} exited before it listened"))?;
        let started_in = begun.elapsed();
        let Some(url) = line.trim().strip_prefix(prefix) else {
            bail!("{program} printed {line:?}, not its listening line");
        };
        let url = url.to_owned();
        // Keep reading, so that the service never writes into a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Service {
            child,
            url,
            pid,
            started_in,
        })
    }

    /// SIGTERM, so that the service shuts down cleanly (a runner destroys its
    /// sandboxes and cgroups), then a bounded wait; SIGKILL if it takes too long.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
            .with_context(|| format!("sending SIGTERM to {}", self.pid))?;
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(status) => {
                let status = status.context("waiting for a service to stop")?;
                if !status.success() {
                    bail!("service {} ended with {status}", self.pid);
                }
                Ok(())
            }
            Err(_) => {
                let _ = self.child.kill().await;
                bail!("service {} did not stop within {STOP_TIMEOUT:?}", self.pid)
            }
        }
    }
}

/// A command with a clean environment: settings the caller's environment may hold
/// (`RUNNER_POOL_SIZE`, ...) must not change what is measured.
fn command(bin: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("RUST_LOG", "warn");
    cmd
}
