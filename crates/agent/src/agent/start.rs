//! How the agent is started: by the jail, which executes it as PID 1 of the sandbox
//! ([`jailed`], `__sandbox-agent`); by the first process of a sandbox forked from a
//! template, which executes it afresh, maybe handing it a keeper ([`forked`],
//! [`FORKED_AGENT_ARG`]); or by a launcher that starts `sandbox-agent` by path with the
//! channel on descriptor 3 ([`serve_inherited`]). Each ends in [`serve`].

use super::identity::run_programs_as;
use super::job::run_job;
use super::serve::{serve_with, AgentError, Local};
use sandbox_jail::layout::SANDBOX_UID;
use sandbox_jail::CHANNEL_FD;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// The first argument that selects the agent of a forked sandbox in a multicall binary:
/// `sandbox-agent __sandbox-forked-agent [<keeper pid> <interpreter>]`.
pub const FORKED_AGENT_ARG: &str = "__sandbox-forked-agent";
/// Where the executed agent finds its end of the socket to the keeper.
pub(crate) const KEEPER_FD: RawFd = 4;

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
/// the exchange on it and returns the process's exit code, having said on standard
/// error why it failed.
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

/// Serves the exchange over `channel`, running each job itself: Ready; optionally a
/// Prepare, answered by starting the interpreter and Ready again; then one Job (or a
/// session's jobs and file operations), answered by Done or Failed; then waits until the
/// runner closes the channel.
///
/// Returns `Ok(())` also when the runner closes the channel without sending a job
/// (a pooled sandbox being destroyed).
pub fn serve<C: Read + Write + AsFd>(channel: &mut C) -> Result<(), AgentError> {
    serve_with(channel, &mut Local::new(run_job))
}

/// The agent as the jail (or a forked sandbox's first process) executes it: sandbox
/// root, running each program as the sandbox user, on the channel handed over as
/// [`CHANNEL_FD`]. Returns the process's exit code.
pub fn jailed() -> i32 {
    run_programs_as(SANDBOX_UID, SANDBOX_UID);
    // SAFETY: the jail hands the channel over as this descriptor, and nothing else in
    // this freshly executed process owns it.
    unsafe { serve_inherited(CHANNEL_FD) }
}

/// The agent a forked sandbox's first process executed (see
/// `crate::template`); `args` are those after [`FORKED_AGENT_ARG`]: none, or the
/// keeper's pid and interpreter. Returns the process's exit code.
pub fn forked(args: &[String]) -> i32 {
    if let Err(e) = adopt_keeper(args) {
        eprintln!("sandbox-agent: {e}");
        return 1;
    }
    jailed()
}

/// The keeper `args` name (its pid and interpreter), if any, becomes this agent's.
fn adopt_keeper(args: &[String]) -> io::Result<()> {
    match args {
        [] => Ok(()),
        [pid, program] => {
            let pid = pid
                .parse()
                .map_err(|_| io::Error::other(format!("a keeper's pid {pid:?}")))?;
            // SAFETY: the first process handed this process the keeper's socket on
            // KEEPER_FD, and nothing else here owns it.
            unsafe { super::keeper::adopt(KEEPER_FD, pid, program.clone()) }
        }
        _ => Err(io::Error::other(format!("unexpected arguments {args:?}"))),
    }
}
