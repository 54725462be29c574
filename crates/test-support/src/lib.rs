//! test-support: a service binary (`sandbox-runner serve`, `sandbox-mcp serve`) started
//! as its users start it, for the integration tests of both crates and for the bench.
//!
//! [`Service::start`] spawns the command, waits a bounded time for its first line on
//! standard output (`<name> listening on <url>`), keeps draining what it prints after,
//! and hands back the URL. [`Service::stop`] sends SIGTERM (a runner then destroys its
//! sandboxes and cgroups) and waits a bounded time before SIGKILL; dropping a service that
//! still runs does the same. Nothing here is a stand-in for our own parts: it only runs
//! the real binaries.
//!
//! A runner keeps paused sessions and snapshots in its data folder, which no two runners
//! may share (the second refuses to start): each service gets one of its own
//! (`RUNNER_DATA_DIR`, removed with the service) unless its command names one.
//!
//! [`https_server`] holds the HTTPS server of the test hosts the egress tests and the
//! bench make.

pub mod https_server;

use std::io::{self, BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long a dropped service may take to stop after SIGTERM before it is killed.
const DROP_GRACE: Duration = Duration::from_secs(15);

/// Why a service did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The binary could not be run.
    #[error("starting {program}: {source}")]
    Spawn {
        /// The binary.
        program: String,
        /// What failed.
        source: io::Error,
    },
    /// It printed no line within the time allowed.
    #[error("{program} printed nothing within {timeout:?}")]
    Silent {
        /// The binary.
        program: String,
        /// The time allowed.
        timeout: Duration,
    },
    /// It exited (or closed its standard output) before it listened.
    #[error("{program} exited before it listened")]
    Exited {
        /// The binary.
        program: String,
    },
    /// Its first line is not the listening line.
    #[error("{program} printed {line:?}, not a line starting with {announce:?}")]
    Unexpected {
        /// The binary.
        program: String,
        /// What it printed.
        line: String,
        /// What was expected first.
        announce: String,
    },
}

/// A running service; stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct Service {
    child: Child,
    url: String,
    started_in: Duration,
    _data: Option<tempfile::TempDir>,
}

/// A data folder for a runner whose command names none: a temporary folder any user
/// may make its folder in (a rootless battery's runner is not root), and the folder it
/// names inside.
fn data_folder(command: &mut Command) -> io::Result<Option<tempfile::TempDir>> {
    let named = command
        .get_envs()
        .any(|(name, value)| name == "RUNNER_DATA_DIR" && value.is_some());
    if named {
        return Ok(None);
    }
    let dir = tempfile::Builder::new().prefix("runner-data-").tempdir()?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777))?;
    command.env("RUNNER_DATA_DIR", dir.path().join("data"));
    Ok(Some(dir))
}

impl Service {
    /// Spawns `command` (standard input closed, standard output piped; standard error
    /// as the command says) and waits up to `timeout` for its first line, which must be
    /// `announce` followed by the service's URL.
    pub fn start(
        mut command: Command,
        announce: &str,
        timeout: Duration,
    ) -> Result<Service, StartError> {
        let program = command.get_program().to_string_lossy().into_owned();
        command.stdin(Stdio::null()).stdout(Stdio::piped());
        let data = data_folder(&mut command).map_err(|source| StartError::Spawn {
            program: program.clone(),
            source,
        })?;
        let begun = Instant::now();
        let mut child = command.spawn().map_err(|source| StartError::Spawn {
            program: program.clone(),
            source,
        })?;
        let first = first_line(&mut child, timeout);
        let started_in = begun.elapsed();
        let mut service = Service {
            child,
            url: String::new(),
            started_in,
            _data: data,
        };
        let line = match first {
            Ok(Some(line)) => line,
            Ok(None) => return Err(StartError::Exited { program }),
            Err(()) => return Err(StartError::Silent { program, timeout }),
        };
        match line.trim().strip_prefix(announce) {
            Some(url) => {
                service.url = url.trim().to_owned();
                Ok(service)
            }
            None => Err(StartError::Unexpected {
                program,
                line,
                announce: announce.to_owned(),
            }),
        }
    }

    /// The URL from its listening line.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// From spawning it to its listening line.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// SIGTERM, then up to `grace` for it to exit; SIGKILL after that. Its exit status.
    pub fn stop(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill()
    }

    /// SIGKILL: no chance to clean up. Its exit status.
    pub fn kill(&mut self) -> io::Result<ExitStatus> {
        let _ = self.child.kill();
        self.child.wait()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.stop(DROP_GRACE);
    }
}

/// The child's first line on standard output (`None`: it closed it first), read on a
/// thread that then drains the rest, so that the service never writes into a closed
/// pipe; `Err` when nothing came within `timeout`.
fn first_line(child: &mut Child, timeout: Duration) -> Result<Option<String>, ()> {
    let Some(stdout) = child.stdout.take() else {
        return Ok(None);
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next().and_then(Result::ok));
        for _ in lines {}
    });
    rx.recv_timeout(timeout).map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn sh(script: &str) -> Command {
        let mut command = Command::new("/bin/sh");
        command.args(["-c", script]);
        command
    }

    #[test]
    fn the_listening_line_gives_the_url_and_stop_ends_the_service() {
        let script = "echo 'demo listening on http://127.0.0.1:9'; exec sleep 30";
        let mut service = Service::start(sh(script), "demo listening on ", Duration::from_secs(5))
            .expect("started");
        assert_eq!(service.url(), "http://127.0.0.1:9");
        let status = service.stop(Duration::from_secs(5)).expect("stopped");
        assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
    }

    #[test]
    fn a_service_that_says_something_else_or_nothing_is_refused() {
        let other = Service::start(
            sh("echo hello; sleep 30"),
            "demo listening on ",
            Duration::from_secs(5),
        );
        assert!(
            matches!(other, Err(StartError::Unexpected { .. })),
            "{other:?}"
        );
        let exited = Service::start(sh("exit 3"), "demo ", Duration::from_secs(5));
        assert!(
            matches!(exited, Err(StartError::Exited { .. })),
            "{exited:?}"
        );
        let silent = Service::start(sh("sleep 30"), "demo ", Duration::from_millis(200));
        assert!(
            matches!(silent, Err(StartError::Silent { .. })),
            "{silent:?}"
        );
    }
}
