//! How a process ended, as `waitpid` says: what a run's reaping (`tree.rs`) and the
//! session's processes (`processes/`) both record.

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// This signal killed it (any number: a real-time one too).
    Signaled(i32),
}

impl Ended {
    /// How a `waitpid` status says the process ended.
    pub(crate) fn of(status: libc::c_int) -> Ended {
        if libc::WIFSIGNALED(status) {
            Ended::Signaled(libc::WTERMSIG(status))
        } else {
            Ended::Exited(libc::WEXITSTATUS(status))
        }
    }
}
