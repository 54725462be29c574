//! The runner going away while a job runs: the agent watches its channel for the
//! hang-up, and ends the sandbox at once rather than at the job's timeout.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::thread::JoinHandle;

/// While a job runs the runner sends nothing; the channel hanging up means it is gone,
/// and nobody would read the answer: end the sandbox now rather than at the timeout. As
/// PID 1, exiting ends every process of the namespace (in a VM, the VM).
///
/// The watch polls for the hang-up only and never reads, so that the next message of a
/// session stays on the channel for the loop that reads it.
pub(crate) struct HangupWatch {
    stop: File,
    thread: JoinHandle<()>,
}

impl HangupWatch {
    pub(crate) fn start(channel: BorrowedFd<'_>) -> io::Result<Self> {
        let watched = channel.try_clone_to_owned()?;
        let (stop_rx, stop_tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let thread = std::thread::Builder::new()
            .name("hangup".into())
            .spawn(move || {
                if hung_up(watched.as_fd(), stop_rx.as_fd()) {
                    end_sandbox();
                }
            })?;
        Ok(HangupWatch {
            stop: File::from(stop_tx),
            thread,
        })
    }

    /// Ends the watch (the answer is about to be written).
    pub(crate) fn stop(self) {
        drop(self.stop); // end of file on the stop pipe
        let _ = self.thread.join();
    }
}

/// Waits until the channel hangs up (true) or the stop pipe closes (false).
fn hung_up(channel: BorrowedFd<'_>, stop: BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    // nix names no POLLRDHUP (the peer shut its end down); libc does.
    let rdhup = PollFlags::from_bits_retain(libc::POLLRDHUP);
    let hangup = rdhup | PollFlags::POLLHUP | PollFlags::POLLERR;
    loop {
        let mut fds = [
            PollFd::new(channel, rdhup),
            PollFd::new(stop, PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return false;
        }
        if fds[0].revents().is_some_and(|r| r.intersects(hangup)) {
            return true;
        }
    }
}

/// Kills every other process of the sandbox (as its PID 1) and exits.
fn end_sandbox() -> ! {
    if nix::unistd::getpid() == nix::unistd::Pid::from_raw(1) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(-1),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    std::process::exit(1);
}
