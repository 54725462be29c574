//! A program's process as the agent holds it: started by `Command` (fork and exec) or
//! forked from a template's interpreter (the keeper, `keeper.rs`), the same to the
//! rest of the agent. Its status is collected by the agent's reaping (`tree`), never here.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, ChildStderr, ChildStdout};

/// A started process and the read ends of its output pipes (taken by whoever watches
/// them).
pub(crate) struct Process {
    pid: u32,
    pub(crate) stdout: Option<ChildStdout>,
    pub(crate) stderr: Option<ChildStderr>,
}

impl Process {
    /// A child of the agent it did not start by `Command` (the keeper, become a loader),
    /// with its two output pipes' read ends.
    pub(crate) fn forked(pid: u32, stdout: OwnedFd, stderr: OwnedFd) -> Process {
        Process {
            pid,
            stdout: Some(ChildStdout::from(stdout)),
            stderr: Some(ChildStderr::from(stderr)),
        }
    }

    /// Its pid.
    pub(crate) fn id(&self) -> u32 {
        self.pid
    }

    /// Sends it SIGKILL.
    pub(crate) fn kill(&self) -> io::Result<()> {
        kill(Pid::from_raw(self.pid as i32), Signal::SIGKILL).map_err(io::Error::from)
    }

    /// Waits for it to end (and collects its status).
    pub(crate) fn wait(&self) -> io::Result<()> {
        nix::sys::wait::waitpid(Pid::from_raw(self.pid as i32), None)
            .map(drop)
            .map_err(io::Error::from)
    }

    /// A descriptor that becomes readable when it exits.
    pub(crate) fn pidfd(&self) -> io::Result<OwnedFd> {
        // SAFETY: pidfd_open takes a pid and flags; it touches no memory of ours.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, self.pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the descriptor was just made and nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }
}

impl From<Child> for Process {
    /// The `Child` is dropped, which neither kills nor waits for it.
    fn from(mut child: Child) -> Process {
        Process {
            pid: child.id(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
        }
    }
}
