//! The two ways a sandbox's first process starts: a jail, this runner's child ([`jail`]),
//! or a fork of a template ([`fork`]). Either way the runner gets the same three things
//! back ([`Launched`]), and the sandbox is then the same.

use super::error::ProcessError;
use super::leader::Leader;
use super::rootless;
use super::template::Template;
use sandbox_jail::JailSpec;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::net::unix::pipe;
use tokio::net::UnixStream;
use tokio::process::Command;

/// A sandbox whose first process has started, before its agent is ready.
pub(super) struct Launched {
    /// The process that lives as long as the sandbox.
    pub leader: Leader,
    /// The channel to its agent.
    pub channel: UnixStream,
    /// Its standard error: the jail's words if the setup fails.
    pub stderr: pipe::Receiver,
}

/// Starts the jail: this binary with the jail argument, the channel on descriptor 3.
pub(super) async fn jail(spec: &JailSpec) -> Result<Launched, ProcessError> {
    let spec_json = serde_json::to_string(spec).map_err(ProcessError::Spec)?;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(ProcessError::Spawn)?;
    let theirs = OwnedFd::from(theirs);
    let theirs_raw = theirs.as_raw_fd();
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg(sandbox_jail::JAIL_ARG)
        .arg(spec_json)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe calls; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || sandbox_jail::channel_to_fd3(theirs_raw));
    }
    let mut child = cmd.spawn().map_err(ProcessError::Spawn)?;
    drop(theirs);
    let stderr = child.stderr.take().ok_or(ProcessError::NoStderr)?;
    let stderr = stderr.into_owned_fd().map_err(ProcessError::Spawn)?;
    let stderr = pipe::Receiver::from_owned_fd(stderr).map_err(ProcessError::Spawn)?;
    ours.set_nonblocking(true).map_err(ProcessError::Spawn)?;
    let channel = UnixStream::from_std(ours).map_err(ProcessError::Spawn)?;
    Ok(Launched {
        leader: Leader::Jail(child),
        channel,
        stderr,
    })
}

/// Asks `template` for the sandbox `spec` describes (index `index`), within `timeout`.
pub(super) async fn fork(
    template: &Template,
    spec: &JailSpec,
    index: usize,
    timeout: Duration,
) -> Result<Launched, ProcessError> {
    let mut spec = spec.clone();
    spec.stage_dir = PathBuf::from(rootless::STAGE_DIR);
    let forked = template.make(&spec, index, timeout).await?;
    let spawn = ProcessError::Spawn;
    // SAFETY: the pidfd is an OwnedFd moved into the AsyncFd, which alone holds it
    // (open, the same descriptor) until the AsyncFd is dropped.
    let pidfd = unsafe { tokio::io::unix::AsyncFd::register(forked.leader) }
        .map_err(|e| spawn(e.into()))?;
    forked.channel.set_nonblocking(true).map_err(spawn)?;
    let channel = UnixStream::from_std(forked.channel).map_err(spawn)?;
    let stderr = pipe::Receiver::from_owned_fd(forked.stderr).map_err(spawn)?;
    Ok(Launched {
        leader: Leader::Forked(pidfd),
        channel,
        stderr,
    })
}
