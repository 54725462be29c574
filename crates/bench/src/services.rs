//! The services under test, started as child processes on loopback ports: a
//! `sandbox-runner serve` and a `sandbox-mcp serve` wired to it (and any other program
//! that announces where it listens, such as the tools section's upstream).

use anyhow::{bail, Context};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

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
                     -p sandbox-mcp-bin) or pass --bin-dir",
                    bin.display()
                );
            }
        }
        Ok(found)
    }
}

/// A running service; stopped if dropped without [`Service::stop`].
pub struct Service {
    process: test_support::Service,
    /// The URL from its listening line.
    pub url: String,
    /// Its process id.
    pub pid: u32,
    /// From spawning it to its listening line.
    pub started_in: Duration,
}

/// Flags for every runner the bench starts, from the bench's command line; each applies
/// unless the runner's own flags name it.
#[derive(Debug, Default, Clone)]
pub struct RunnerFlags {
    /// `--templates`.
    pub templates: Option<bool>,
    /// `--warm-imports`.
    pub warm_imports: Option<String>,
}

static RUNNER_FLAGS: std::sync::OnceLock<RunnerFlags> = std::sync::OnceLock::new();

/// Makes every runner the bench starts from now on take `flags`.
pub fn set_runner_flags(flags: RunnerFlags) {
    let _ = RUNNER_FLAGS.set(flags);
}

impl Service {
    /// Starts `sandbox-runner serve` with `pool_size` sandboxes.
    pub async fn runner(bin: &Path, token: &str, pool_size: usize) -> anyhow::Result<Service> {
        Service::runner_with(bin, token, pool_size, &[]).await
    }

    /// Starts `sandbox-runner serve` with `pool_size` sandboxes and `extra` flags
    /// (`--warm-imports`, ...) after the bench's own.
    pub async fn runner_with(
        bin: &Path,
        token: &str,
        pool_size: usize,
        extra: &[&str],
    ) -> anyhow::Result<Service> {
        Service::runner_at(bin, token, pool_size, "127.0.0.1:0", extra).await
    }

    /// Starts `sandbox-runner serve` with `pool_size` sandboxes on `listen` (`ADDR:PORT`:
    /// a runner started again where a killed one was) with the bench's flags, then
    /// `extra`.
    pub async fn runner_at(
        bin: &Path,
        token: &str,
        pool_size: usize,
        listen: &str,
        extra: &[&str],
    ) -> anyhow::Result<Service> {
        let mut cmd = command(bin);
        cmd.args(["serve", "--listen", listen, "--pool-size"])
            .arg(pool_size.to_string())
            .args(extra)
            .env("SANDBOX_RUNNER_TOKEN", token);
        with_bench_flags(&mut cmd, extra);
        Service::start(cmd, "sandbox-runner listening on ").await
    }

    /// Starts `sandbox-runner serve` on loopback as [`Service::runner_with`] does, under
    /// `wrapper` (a program and its arguments, which ends by executing the command line
    /// it is given after them: a mount namespace of the runner's own), with `env`.
    pub async fn runner_wrapped(
        bin: &Path,
        token: &str,
        pool_size: usize,
        wrapper: &[String],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Service> {
        let (program, args) = wrapper.split_first().context("an empty wrapper")?;
        let mut cmd = command(Path::new(program));
        cmd.args(args)
            .arg(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--pool-size"])
            .arg(pool_size.to_string())
            .envs(env.iter().copied())
            .env("SANDBOX_RUNNER_TOKEN", token);
        with_bench_flags(&mut cmd, &[]);
        Service::start(cmd, "sandbox-runner listening on ").await
    }

    /// Starts `sandbox-mcp serve` in front of the runner at `runner_url`.
    pub async fn mcp(
        bin: &Path,
        token: &str,
        runner_url: &str,
        runner_token: &str,
    ) -> anyhow::Result<Service> {
        Service::mcp_with(bin, token, runner_url, runner_token, &[]).await
    }

    /// Starts `sandbox-mcp serve` in front of the runner at `runner_url`, with `extra`
    /// environment (`MCP_UPSTREAMS`, ...) after the bench's own.
    pub async fn mcp_with(
        bin: &Path,
        token: &str,
        runner_url: &str,
        runner_token: &str,
        extra: &[(&str, &OsStr)],
    ) -> anyhow::Result<Service> {
        let mut cmd = command(bin);
        cmd.arg("serve")
            .env("MCP_AUTH_TOKEN", token)
            .env("SANDBOX_RUNNER_URL", runner_url)
            .env("SANDBOX_RUNNER_TOKEN", runner_token)
            .env("PORT", "0")
            .env("BIND", "127.0.0.1")
            .envs(extra.iter().copied());
        Service::start(cmd, "sandbox-mcp listening on ").await
    }

    /// Spawns `cmd` and waits for its line that starts with `prefix`; the service's URL
    /// is the rest of that line (on a blocking thread: the start is a child process and
    /// a pipe).
    pub async fn start(mut cmd: Command, prefix: &str) -> anyhow::Result<Service> {
        cmd.stderr(Stdio::inherit());
        let prefix = prefix.to_owned();
        let process = tokio::task::spawn_blocking(move || {
            test_support::Service::start(cmd, &prefix, START_TIMEOUT)
        })
        .await
        .context("the task starting a service")??;
        Ok(Service {
            url: process.url().to_owned(),
            pid: process.pid(),
            started_in: process.started_in(),
            process,
        })
    }

    /// SIGTERM, so that the service shuts down cleanly (a runner destroys its
    /// sandboxes and cgroups), then a bounded wait; SIGKILL if it takes too long.
    pub async fn stop(self) -> anyhow::Result<()> {
        let pid = self.pid;
        let status = self.terminate().await?;
        if !status.success() {
            bail!("service {pid} ended with {status} (killed if it took over {STOP_TIMEOUT:?})");
        }
        Ok(())
    }

    /// SIGTERM, then a bounded wait and SIGKILL if it takes too long, as [`Service::stop`];
    /// its exit status, whatever it is (a service that ends by re-raising SIGTERM once it
    /// has shut down cleanly, as uvicorn does).
    pub async fn terminate(self) -> anyhow::Result<ExitStatus> {
        let mut process = self.process;
        tokio::task::spawn_blocking(move || process.stop(STOP_TIMEOUT))
            .await
            .context("the task stopping a service")?
            .context("waiting for a service to stop")
    }

    /// SIGKILL: no chance to clean up (a runner's sandboxes die with it; the next
    /// runner removes their cgroups).
    pub async fn kill(self) -> anyhow::Result<()> {
        let mut process = self.process;
        tokio::task::spawn_blocking(move || process.kill())
            .await
            .context("the task killing a service")?
            .context("killing a service")?;
        Ok(())
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

/// The bench's flags for every runner (`--runner-templates`, `--runner-warm-imports`),
/// each unless `extra` names it.
fn with_bench_flags(cmd: &mut Command, extra: &[&str]) {
    let flags = RUNNER_FLAGS.get().cloned().unwrap_or_default();
    if let Some(templates) = flags.templates.filter(|_| !extra.contains(&"--templates")) {
        cmd.args(["--templates", if templates { "true" } else { "false" }]);
    }
    if let Some(warm) = flags
        .warm_imports
        .filter(|_| !extra.contains(&"--warm-imports"))
    {
        cmd.args(["--warm-imports", &warm]);
    }
}
