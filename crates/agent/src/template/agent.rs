//! The agent of a sandbox forked from a template: executed afresh by the sandbox's first
//! process once it is set up, never a copy of the template.
//!
//! A fork shares its parent's address layout and stack canary; siblings share them
//! with each other. The agent holds more than its program (the channel to the runner,
//! the capabilities to end the program), so it must share neither with the program,
//! the template or another sandbox: the first process, a clone of the template, takes
//! the jail's steps and then executes the template's own binary (opened once, before the
//! template confined itself) as the agent, whose layout and canary the kernel draws
//! anew. Of a template holding Python, the first process forks a keeper first (see
//! `crate::embedded`), from which the Python program is made: the program keeps the
//! template's layout, which it shares with every Python program of the template, and
//! nothing of the agent's.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The first argument that selects the agent of a forked sandbox in a multicall binary:
/// `sandbox-agent __sandbox-forked-agent [<keeper pid> <interpreter>]`.
pub const FORKED_AGENT_ARG: &str = "__sandbox-forked-agent";
/// Where the first process keeps the template's executable until it executes it.
pub(super) const EXE_FD: RawFd = 5;
/// Where the executed agent finds its end of the socket to the keeper.
#[cfg(feature = "embedded-python")]
const KEEPER_FD: RawFd = 4;

/// In the sandbox's first process, set up as its agent is: forks the keeper if it holds
/// Python, then executes the agent. Returns only on failure, with why.
pub(super) fn become_agent() -> String {
    // SAFETY: EXE_FD was made a copy of the template's executable when the descriptors
    // were placed, and nothing else owns it.
    let exe = unsafe { OwnedFd::from_raw_fd(EXE_FD) };
    let cloexec = nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC);
    if let Err(e) = nix::fcntl::fcntl(&exe, cloexec) {
        return format!("sandbox-agent: marking the agent's binary close-on-exec: {e}");
    }
    #[cfg(feature = "embedded-python")]
    if let Some((python, program)) = crate::embedded::held() {
        return match crate::embedded::keeper::fork(python) {
            Ok((pid, socket)) => exec_with_keeper(&exe, pid, socket, program),
            Err(e) => format!("sandbox-agent: forking the Python keeper: {e}"),
        };
    }
    let error = sandbox_jail::exec::exec_agent(&exe, &[FORKED_AGENT_ARG]);
    format!("sandbox-jail: {error}")
}

/// Executes the agent with the keeper `pid`'s socket on [`KEEPER_FD`].
#[cfg(feature = "embedded-python")]
fn exec_with_keeper(exe: &OwnedFd, pid: i32, socket: OwnedFd, program: &str) -> String {
    // Handed to the exec: its copy on KEEPER_FD stays, the original (close-on-exec)
    // goes, unless it was KEEPER_FD already.
    let socket = std::os::fd::IntoRawFd::into_raw_fd(socket);
    if let Err(e) = crate::launch::give(&[(socket, KEEPER_FD)]) {
        return format!("sandbox-agent: handing the agent the keeper's socket: {e}");
    }
    let pid = pid.to_string();
    let error = sandbox_jail::exec::exec_agent(exe, &[FORKED_AGENT_ARG, &pid, program]);
    format!("sandbox-jail: {error}")
}

/// The executed agent's life; `args` are those after [`FORKED_AGENT_ARG`]. Returns the
/// process's exit code.
pub fn main(args: &[String]) -> i32 {
    if let Err(e) = adopt_keeper(args) {
        eprintln!("sandbox-agent: {e}");
        return 1;
    }
    crate::multicall::jailed_agent()
}

/// The keeper `args` name (its pid and interpreter), if any, becomes this agent's.
fn adopt_keeper(args: &[String]) -> io::Result<()> {
    match args {
        [] => Ok(()),
        #[cfg(feature = "embedded-python")]
        [pid, program] => {
            let pid = pid
                .parse()
                .map_err(|_| io::Error::other(format!("a keeper's pid {pid:?}")))?;
            // SAFETY: the first process handed this process the keeper's socket on
            // KEEPER_FD, and nothing else here owns it.
            unsafe { crate::embedded::keeper::adopt(KEEPER_FD, pid, program.clone()) }
        }
        _ => Err(io::Error::other(format!("unexpected arguments {args:?}"))),
    }
}
