//! The process that lives as long as a sandbox: the jail the runner started (its
//! child), or the first process of a sandbox a template cloned (known by a pidfd; the
//! template reaps it).

use std::os::fd::{AsRawFd, OwnedFd};
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
}
