//! The agent: the first process inside a sandbox.
//!
//! It announces Ready on its channel, receives exactly one
//! [`Job`](sandbox_protocol::agent::Job),
//! writes the code to a file in the home directory, runs the interpreter on it with an
//! empty, fixed environment, captures standard output and error separately up to their
//! caps, enforces the timeout on the whole process tree, reaps every child, and answers
//! with one Done (or Failed). Then it waits for the
//! runner to close the channel, returns, and its caller exits; a sandbox never runs a
//! second job.
//!
//! The agent knows nothing of how its sandbox was made: the jail ([`sandbox_jail`])
//! starts it as PID 1 of fresh namespaces, on a host (the process backend) or inside a
//! VM guest, whose init ([`init`], this same binary) made the jail and relays the
//! exchange (see [`serve_with`] and [`Worker`]). What it relies on is
//! only this: it is PID 1 of its PID namespace (so that `kill(-1)` ends every other
//! process of the sandbox and orphans are reparented to it), `/tmp` and the home
//! directory are writable, and the interpreters are on [`PATH`].
//!
//! Outside a PID namespace of its own (`getpid() != 1`) it never signals `-1`; it falls
//! back to killing the program's process group.

mod capture;
#[cfg(feature = "embedded-python")]
mod embedded;
mod files;
mod hangup;
mod identity;
pub mod init;
mod job;
mod launch;
pub mod multicall;
mod outputs;
mod process;
mod resident;
mod serve;
mod sink;
pub mod template;
mod tree;
mod watch;

pub use identity::run_programs_as;
pub use job::{run_job, JobError, Kept};
pub use launch::{prepare, Prepared};
pub use serve::{serve_restorable, serve_with, Local, Restorable, Worker};

use sandbox_protocol::frame::FrameError;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

pub use sandbox_jail::layout::{HOME, PATH, SANDBOX_UID};
/// [`HOME`] as a C string, for the child between fork and exec.
const HOME_C: &std::ffi::CStr = c"/home/sandbox";

/// Why the agent stopped without answering a job.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The channel to the runner failed.
    #[error(transparent)]
    Channel(#[from] FrameError),
    /// The agent could not shield itself from the program.
    #[error("making the agent non-dumpable: {0}")]
    Dumpable(nix::Error),
    /// The agent could not watch its channel for the runner going away.
    #[error("watching the channel: {0}")]
    Watch(io::Error),
    /// The agent could not reach the runner.
    #[error("connecting to the runner: {0}")]
    Connect(io::Error),
    /// The kernel's random pool could not be reseeded, or the clock set, after a restore.
    #[error("reseeding the kernel's random pool and setting the clock: {0}")]
    Reseed(io::Error),
}

/// Takes the channel inherited as `fd` and marks it close-on-exec, so that the program
/// never inherits it (it could otherwise forge the agent's answer).
///
/// # Safety
///
/// `fd` must be an open socket that nothing else in the process owns or will close.
pub unsafe fn channel_from_fd(fd: RawFd) -> io::Result<UnixStream> {
    // SAFETY: the caller hands over sole ownership of `fd`.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    nix::fcntl::fcntl(
        &owned,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(io::Error::from)?;
    Ok(UnixStream::from(owned))
}

/// The whole life of an agent whose runner hands it the channel as descriptor `fd`
/// (the process backend's jail, or a launcher starting `sandbox-agent` by path): serves
/// one job on it and returns the process's exit code, having said on standard error why
/// it failed.
///
/// # Safety
///
/// `fd` must be an open socket that nothing else in the process owns or will close.
pub unsafe fn serve_inherited(fd: RawFd) -> i32 {
    // SAFETY: the caller hands over sole ownership of `fd`.
    let mut channel = match unsafe { channel_from_fd(fd) } {
        Ok(channel) => channel,
        Err(e) => {
            eprintln!("sandbox-agent: channel on descriptor {fd}: {e}");
            return 1;
        }
    };
    match serve(&mut channel) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sandbox-agent: {e}");
            1
        }
    }
}

/// Serves one job over `channel`: Ready; optionally a Prepare, answered by starting the
/// interpreter and Ready again; then one Job, answered by Done or Failed; then waits
/// until the runner closes the channel.
///
/// Returns `Ok(())` also when the runner closes the channel without sending a job
/// (a pooled sandbox being destroyed).
pub fn serve<C: Read + Write + AsFd>(channel: &mut C) -> Result<(), AgentError> {
    serve_with(channel, &mut Local::new(run_job))
}
