//! The agent: the first process inside a sandbox.
//!
//! It announces [`AgentMessage::Ready`] on its channel, receives exactly one [`Job`],
//! writes the code to a file in the home directory, runs the interpreter on it with an
//! empty, fixed environment, captures standard output and error separately up to their
//! caps, enforces the timeout on the whole process tree, reaps every child, and answers
//! with one [`AgentMessage::Done`] (or [`AgentMessage::Failed`]). Then it waits for the
//! runner to close the channel, returns, and its caller exits; a sandbox never runs a
//! second job.
//!
//! The agent knows nothing of how its sandbox was made: the process backend starts it
//! as PID 1 of fresh namespaces, a VM backend as the guest's init. What it relies on is
//! only this: it is PID 1 of its PID namespace (so that `kill(-1)` ends every other
//! process of the sandbox and orphans are reparented to it), `/tmp` and the home
//! directory are writable, and the interpreters are on [`PATH`].
//!
//! Outside a PID namespace of its own (`getpid() != 1`) it never signals `-1`; it falls
//! back to killing the program's process group.

mod capture;
pub mod init;
mod job;
mod launch;
mod tree;

pub use job::{run_job, JobError};
pub use launch::{prepare, Prepared};

use sandbox_protocol::agent::{AgentMessage, Job, JobOutcome, RunnerMessage};
use sandbox_protocol::frame::{self, FrameError};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The search path given to programs.
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The home directory and working directory of programs.
pub const HOME: &str = "/home/sandbox";

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

/// Serves one job over `channel`: Ready; optionally a Prepare, answered by starting the
/// interpreter and Ready again; then one Job, answered by Done or Failed; then waits
/// until the runner closes the channel.
///
/// Returns `Ok(())` also when the runner closes the channel without sending a job
/// (a pooled sandbox being destroyed).
pub fn serve<C: Read + Write + AsFd>(channel: &mut C) -> Result<(), AgentError> {
    serve_with(channel, run_job)
}

/// [`serve`], with `run` in place of [`run_job`] (a VM's init adds what only it can
/// tell to the outcome).
pub fn serve_with<C, F>(channel: &mut C, run: F) -> Result<(), AgentError>
where
    C: Read + Write + AsFd,
    F: FnOnce(&Job, Option<Prepared>) -> Result<JobOutcome, JobError>,
{
    // The program runs as the same user: without this it could open /proc/1/mem and
    // rewrite the agent. Its own processes become dumpable again at exec.
    nix::sys::prctl::set_dumpable(false).map_err(AgentError::Dumpable)?;
    frame::write(channel, &AgentMessage::Ready)?;
    let mut prepared = None;
    let job = loop {
        match frame::read::<_, RunnerMessage>(channel)? {
            None => return Ok(()),
            Some(RunnerMessage::Job(job)) => break job,
            Some(RunnerMessage::Prepare(_)) if prepared.is_some() => {
                return fail(channel, "a second Prepare".into());
            }
            Some(RunnerMessage::Prepare(p)) => match prepare(p.prepare) {
                Ok(started) => {
                    prepared = started;
                    frame::write(channel, &AgentMessage::Ready)?;
                }
                Err(e) => {
                    return fail(
                        channel,
                        format!("starting the {} interpreter: {e}", p.prepare),
                    )
                }
            },
        }
    };
    let answered = Arc::new(AtomicBool::new(false));
    let watcher = watch_for_hangup(channel.as_fd(), answered.clone())?;
    let answer = match run(&job, prepared) {
        Ok(outcome) => AgentMessage::Done(outcome),
        Err(e) => AgentMessage::Failed {
            message: e.to_string(),
        },
    };
    answered.store(true, Ordering::SeqCst);
    frame::write(channel, &answer)?;
    // Every process of the job is gone by now. Stay until the runner closes the
    // channel: the sandbox's teardown (a namespace's, a VM's) then happens when the
    // runner destroys it, not while the answer is on its way to the caller.
    let _ = watcher.join();
    Ok(())
}

/// While the job runs the runner sends nothing more; end of file means it is gone, and
/// nobody would read the answer: end the sandbox now rather than at the timeout. As PID 1,
/// exiting ends every process of the namespace (in a VM, the VM). Once `answered` is
/// set, end of file is the runner letting go of the sandbox: the thread just ends.
fn watch_for_hangup(
    channel: BorrowedFd<'_>,
    answered: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, AgentError> {
    let mut watcher = File::from(channel.try_clone_to_owned().map_err(AgentError::Watch)?);
    std::thread::Builder::new()
        .name("hangup".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match watcher.read(&mut buf) {
                    Ok(0) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                    Ok(_) => continue, // nothing is expected; ignore it
                }
            }
            if answered.load(Ordering::SeqCst) {
                return;
            }
            if nix::unistd::getpid() == nix::unistd::Pid::from_raw(1) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(-1),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::process::exit(1);
        })
        .map_err(AgentError::Watch)
}

fn fail<C: Write>(channel: &mut C, message: String) -> Result<(), AgentError> {
    frame::write(channel, &AgentMessage::Failed { message })?;
    Ok(())
}
