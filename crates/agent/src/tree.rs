//! Ending and reaping the program's process tree.

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpid, Pid};

/// Kills every process of the sandbox but the agent.
///
/// As PID 1 of its namespace the agent signals `-1`, which reaches every process of the
/// namespace, including those that left the program's session or process group. Outside
/// one (never in a real sandbox) it only signals the program's process group, so that
/// it can never signal the host.
pub(crate) fn kill_all(program: Pid) {
    // ESRCH (nothing left to kill) is the expected outcome when all have exited.
    if getpid() == Pid::from_raw(1) {
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    } else {
        let _ = killpg(program, Signal::SIGKILL);
    }
}

/// Stops every process of the sandbox but the agent (a session between its runs: no
/// process uses CPU until [`resume_all`]). Only as PID 1 of the sandbox's namespace;
/// elsewhere it does nothing.
pub(crate) fn pause_all() {
    if getpid() == Pid::from_raw(1) {
        let _ = kill(Pid::from_raw(-1), Signal::SIGSTOP);
    }
}

/// Lets every process [`pause_all`] stopped go on.
pub(crate) fn resume_all() {
    if getpid() == Pid::from_raw(1) {
        let _ = kill(Pid::from_raw(-1), Signal::SIGCONT);
    }
}

/// What a non-blocking reap found.
pub(crate) struct Reaped {
    /// The program's status, if the program was among the reaped.
    pub(crate) program: Option<WaitStatus>,
    /// No child is left at all.
    pub(crate) none_left: bool,
}

/// Reaps every child that has exited, without blocking.
pub(crate) fn reap_exited(program: Pid) -> Reaped {
    let mut reaped = Reaped {
        program: None,
        none_left: false,
    };
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return reaped,
            Ok(status) => {
                if status.pid() == Some(program) {
                    reaped.program = Some(status);
                }
            }
            Err(Errno::EINTR) => continue,
            Err(_) => {
                reaped.none_left = true;
                return reaped;
            }
        }
    }
}

/// Kills and reaps until no child is left; returns the program's status if it was
/// reaped here. Killing again on every round catches a process forked while the
/// previous signal was being delivered.
pub(crate) fn end_tree(program: Pid) -> Option<WaitStatus> {
    let mut found = None;
    loop {
        kill_all(program);
        let reaped = reap_exited(program);
        found = found.or(reaped.program);
        if reaped.none_left {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// The exit code reported for a status: the code, or 128 + signal.
pub(crate) fn exit_code(status: WaitStatus) -> (i32, Option<i32>) {
    match status {
        WaitStatus::Exited(_, code) => (code, None),
        WaitStatus::Signaled(_, sig, _) => (128 + sig as i32, Some(sig as i32)),
        // Stopped/continued states are not requested (no WUNTRACED/WCONTINUED).
        _ => (128 + Signal::SIGKILL as i32, Some(Signal::SIGKILL as i32)),
    }
}
