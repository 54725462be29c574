//! The process that lives as long as a sandbox: the jail the runner started (its
//! child), or the first process of a sandbox a template cloned (known by a pidfd; the
//! template reaps it).

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use tokio::io::unix::AsyncFd;
use tokio::process::Child;

/// A sandbox's longest-lived process outside its namespaces.
pub enum Leader {
    /// The jail, this runner's child.
    Jail(Child),
    /// A template's fork: a pidfd, readable once the process has ended.
    Forked(AsyncFd<OwnedFd>),
}

impl Leader {
    /// Sends SIGKILL (nothing if it has ended).
    pub fn start_kill(&mut self) {
        match self {
            Leader::Jail(child) => {
                let _ = child.start_kill();
            }
            Leader::Forked(pidfd) => {
                // SAFETY: pidfd_send_signal takes a pidfd, a signal number and a null
                // siginfo; it touches no memory of ours.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        pidfd.get_ref().as_raw_fd(),
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    );
                }
            }
        }
    }

    /// Waits until it has ended.
    pub async fn wait(&mut self) {
        match self {
            Leader::Jail(child) => {
                let _ = child.wait().await;
            }
            Leader::Forked(pidfd) => {
                let _ = pidfd.readable().await;
            }
        }
    }

    /// A pidfd of the sandbox's first process inside its namespaces: the fork itself,
    /// or the jail's one child (the agent). Checked after it is opened, so that it
    /// cannot name a process that took a dead child's number.
    pub fn inside_pidfd(&self) -> io::Result<OwnedFd> {
        match self {
            Leader::Forked(pidfd) => pidfd.get_ref().as_fd().try_clone_to_owned(),
            Leader::Jail(child) => {
                let jail = child
                    .id()
                    .ok_or_else(|| io::Error::other("the sandbox's jail has ended"))?;
                let agent = only_child(jail)?;
                let pidfd = pidfd_open(agent)?;
                if only_child(jail)? != agent {
                    return Err(io::Error::other("the sandbox's agent changed under us"));
                }
                Ok(pidfd)
            }
        }
    }
}

/// The one child of the process `pid` (a jail has one: its sandbox's agent).
fn only_child(pid: u32) -> io::Result<i32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    let children = std::fs::read_to_string(&path)?;
    let mut pids = children.split_whitespace().map(str::parse::<i32>);
    match (pids.next(), pids.next()) {
        (Some(Ok(child)), None) => Ok(child),
        _ => Err(io::Error::other(format!(
            "{path} does not name one child: {children:?}"
        ))),
    }
}

/// A pidfd of `pid`.
fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just made and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as i32) })
}
