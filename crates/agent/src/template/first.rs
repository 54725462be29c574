//! A sandbox's first process: a clone of the template, which puts its descriptors in
//! place, takes the jail's steps ([`sandbox_jail::forked`]) and then executes the agent
//! afresh, never a copy of the template.
//!
//! A fork shares its parent's address layout and stack canary; siblings share them
//! with each other. The agent holds more than its program (the channel to the runner,
//! the capabilities to end the program), so it must share neither with the program,
//! the template or another sandbox: the first process executes the agent's binary (a
//! `sandbox-agent` of the runner's build or the template's own, opened once, before the
//! template confined itself) as the agent
//! (`__sandbox-forked-agent`, see [`crate::agent::start`]), whose layout and canary the
//! kernel draws anew. Of a template holding Python, the first process forks a keeper
//! first (`python/keeper.rs`), from which the Python program is made: the program keeps
//! the template's layout, which it shares with every Python program of the template,
//! and nothing of the agent's.

use super::requests::Request;
use crate::agent::child::give;
use crate::agent::start::FORKED_AGENT_ARG;
use sandbox_jail::forked::become_sandbox;
use sandbox_jail::rootfs::{HostView, ShownFolders};
use sandbox_jail::JailSpec;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Where the first process keeps the control socket until the jail's steps take it.
const CTL_FD: RawFd = 4;
/// Where the first process keeps the agent's executable until it executes it.
const EXE_FD: RawFd = 5;

/// The sandbox's first process, just cloned: its descriptors in place, the jail's
/// steps, then the agent, executed. Never returns.
pub(super) fn run(
    request: &Request,
    spec: &JailSpec,
    host: &HostView,
    shown: &ShownFolders,
    exe: &OwnedFd,
) -> ! {
    let error = match place_descriptors(request, exe) {
        Err(e) => format!("sandbox-template: placing the sandbox's descriptors: {e}"),
        Ok(ctl) => {
            restore_signals();
            match become_sandbox(spec, host, shown.clone(), ctl, probes()) {
                Ok(()) => become_agent(),
                Err(e) => format!("sandbox-jail: {e}"),
            }
        }
    };
    eprintln!("{error}");
    // SAFETY: _exit ends the process at once, without running the template's exit
    // handlers (they belong to the template, not to this copy of it).
    unsafe { libc::_exit(1) }
}

/// Channel on 3, standard error on 2, the control socket on [`CTL_FD`] (returned), the
/// agent's binary on [`EXE_FD`], and nothing else above 2: the template's request
/// socket and every other request's descriptors are closed.
fn place_descriptors(request: &Request, exe: &OwnedFd) -> io::Result<OwnedFd> {
    give(&[
        (request.channel.as_raw_fd(), sandbox_jail::CHANNEL_FD),
        (request.stderr.as_raw_fd(), 2),
        (request.ctl.as_raw_fd(), CTL_FD),
        (exe.as_raw_fd(), EXE_FD),
    ])?;
    // SAFETY: close_range only closes descriptors; the ones kept are 0 to 5, and the
    // OwnedFds of the request and the template (all above 5) are never used again: the
    // caller only exits.
    if unsafe { libc::syscall(libc::SYS_close_range, EXE_FD + 1, u32::MAX, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CTL_FD was just made a copy of the control socket, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(CTL_FD) })
}

/// The signal dispositions a process started afresh has: an embedded interpreter
/// changes SIGINT's and ignores SIGXFSZ, which the agent and its programs would inherit
/// across exec (an ignored signal stays ignored).
fn restore_signals() {
    for signal in [libc::SIGINT, libc::SIGXFSZ] {
        // SAFETY: SIG_DFL is a valid disposition for these signals; no handler runs.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
}

/// Whether this template's sandboxes probe that they can make a process (see
/// `become_sandbox`): all but those of a template holding Python's interpreter, which
/// fork their keeper before they say Ready.
fn probes() -> bool {
    #[cfg(feature = "embedded-python")]
    {
        super::python::held().is_none()
    }
    #[cfg(not(feature = "embedded-python"))]
    {
        true
    }
}

/// Forks the keeper if the template holds Python, then executes the agent. Returns
/// only on failure, with why.
fn become_agent() -> String {
    // SAFETY: EXE_FD was made a copy of the agent's executable when the descriptors
    // were placed, and nothing else owns it.
    let exe = unsafe { OwnedFd::from_raw_fd(EXE_FD) };
    let cloexec = nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC);
    if let Err(e) = nix::fcntl::fcntl(&exe, cloexec) {
        return format!("sandbox-agent: marking the agent's binary close-on-exec: {e}");
    }
    #[cfg(feature = "embedded-python")]
    if let Some((python, program)) = super::python::held() {
        return match super::python::keeper::fork(python) {
            Ok((pid, socket)) => exec_with_keeper(&exe, pid, socket, program),
            Err(e) => format!("sandbox-agent: forking the Python keeper: {e}"),
        };
    }
    let error = sandbox_jail::exec::exec_agent(&exe, &[FORKED_AGENT_ARG]);
    format!("sandbox-jail: {error}")
}

/// Executes the agent with the keeper `pid`'s socket on the descriptor the agent finds
/// it on.
#[cfg(feature = "embedded-python")]
fn exec_with_keeper(exe: &OwnedFd, pid: i32, socket: OwnedFd, program: &str) -> String {
    use crate::agent::start::KEEPER_FD;
    // Handed to the exec: its copy on KEEPER_FD stays, the original (close-on-exec)
    // goes, unless it was KEEPER_FD already.
    let socket = std::os::fd::IntoRawFd::into_raw_fd(socket);
    if let Err(e) = give(&[(socket, KEEPER_FD)]) {
        return format!("sandbox-agent: handing the agent the keeper's socket: {e}");
    }
    let pid = pid.to_string();
    let error = sandbox_jail::exec::exec_agent(exe, &[FORKED_AGENT_ARG, &pid, program]);
    format!("sandbox-jail: {error}")
}
