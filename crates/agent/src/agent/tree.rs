//! Ending and reaping the program's process tree.

use super::ended::Ended;
use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::{getpid, Pid};

/// Kills every process of the sandbox but the agent and the session's processes
/// ([`processes`](super::processes): they outlive a run's cleanup).
///
/// As PID 1 of its namespace the agent signals `-1`, which reaches every process of the
/// namespace, including those that left the program's session or process group; while
/// processes of the API run, it signals each other process it finds in `/proc`
/// instead (callers kill again until nothing else is left: [`end_tree`]). Outside one
/// (never in a real sandbox) it only signals the program's process group, so that it
/// can never signal the host.
pub(crate) fn kill_all(program: Pid) {
    // ESRCH (nothing left to kill) is the expected outcome when all have exited.
    if getpid() != Pid::from_raw(1) {
        let _ = killpg(program, Signal::SIGKILL);
        return;
    }
    let protected = super::processes::protected();
    if protected.is_empty() {
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        return;
    }
    for pid in unprotected(&protected) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// The live processes of the sandbox, but the agent, outside the sessions `protected`
/// leads (a process's session, from `/proc/<pid>/stat`, cannot be changed to another's:
/// `setsid` only makes a new one).
fn unprotected(protected: &[i32]) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = getpid().as_raw();
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false; // gone meanwhile
            };
            // After the command's closing parenthesis: state, ppid, pgrp, session.
            let fields: Vec<&str> = stat
                .rfind(')')
                .map(|end| stat[end + 1..].split_whitespace().take(4).collect())
                .unwrap_or_default();
            let zombie = fields.first().is_some_and(|s| matches!(*s, "Z" | "X"));
            let session = fields.get(3).and_then(|s| s.parse::<i32>().ok());
            !zombie && !session.is_some_and(|s| protected.contains(&s))
        })
        .collect()
}

/// Rounds of stopping before [`pause_all`] gives up on a process that keeps running.
const PAUSE_ROUNDS: u32 = 200;

/// Stops every process of the sandbox but the agent: a session between its runs where
/// no cgroup freezer holds it (a sandbox without cgroups, see
/// `Job::sigstop_between_runs`). No process uses CPU until [`resume_all`], unless it
/// wakes itself: SIGCONT ends a stop however it is sent (a timer can send it), which is
/// why a sandbox with cgroups is frozen instead. Only as PID 1 of the sandbox's
/// namespace; elsewhere it does nothing.
///
/// The kernel walks the processes with forks held off, and aborts a fork whose parent
/// has a signal pending, so one signal should reach all; it is sent again until /proc
/// shows every process stopped, so that what the kernel does is checked, not assumed.
/// Returns whether every process was seen stopped.
pub(crate) fn pause_all() -> bool {
    if getpid() != Pid::from_raw(1) {
        return true;
    }
    for _ in 0..PAUSE_ROUNDS {
        let _ = kill(Pid::from_raw(-1), Signal::SIGSTOP);
        if all_stopped() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    false
}

/// Whether every process but this one is stopped (or a zombie), as /proc says.
fn all_stopped() -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    let me = getpid().as_raw().to_string();
    entries.filter_map(Result::ok).all(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            return true;
        }
        match std::fs::read_to_string(entry.path().join("stat")) {
            Ok(stat) => stat
                .rfind(')')
                .and_then(|end| stat[end + 1..].split_whitespace().next())
                .is_some_and(|state| matches!(state, "T" | "t" | "Z" | "X")),
            Err(_) => true, // gone meanwhile
        }
    })
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
    pub(crate) program: Option<Ended>,
    /// No child is left at all.
    pub(crate) none_left: bool,
}

/// Reaps every child that has exited, without blocking. The raw call, not nix's: its
/// status type holds no real-time signal, and a child killed by one would be reaped
/// with its status lost.
pub(crate) fn reap_exited(program: Pid) -> Reaped {
    let mut reaped = Reaped {
        program: None,
        none_left: false,
    };
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes the status into a live local integer; WNOHANG never
        // blocks.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        match pid {
            0 => return reaped,
            -1 if Errno::last() == Errno::EINTR => continue,
            -1 => {
                reaped.none_left = true;
                return reaped;
            }
            pid if pid == program.as_raw() => reaped.program = Some(Ended::of(status)),
            pid => super::processes::reaped(pid, Ended::of(status)),
        }
    }
}

/// Kills and reaps until no child is left (but the session's processes, and what they
/// started); returns the program's status if it was reaped here. Killing again on every
/// round catches a process forked while the previous signal was being delivered.
pub(crate) fn end_tree(program: Pid) -> Option<Ended> {
    let mut found = None;
    loop {
        kill_all(program);
        let reaped = reap_exited(program);
        found = found.or(reaped.program);
        if reaped.none_left || only_protected_left(program) {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Whether every process of the sandbox left (but the agent) is one the session's
/// processes spare, and the program has been reaped (false when none is spared: then
/// only no child at all ends the cleanup).
fn only_protected_left(program: Pid) -> bool {
    let protected = super::processes::protected();
    !protected.is_empty()
        && getpid() == Pid::from_raw(1)
        && unprotected(&protected).is_empty()
        && !std::path::Path::new(&format!("/proc/{program}")).exists()
}

/// The exit code reported for how the program ended: the code, or 128 + signal; a
/// program whose end was not seen (it was killed with its sandbox's tree) as SIGKILL.
pub(crate) fn exit_code(ended: Option<Ended>) -> (i32, Option<i32>) {
    match ended {
        Some(Ended::Exited(code)) => (code, None),
        Some(Ended::Signaled(sig)) => (128 + sig, Some(sig)),
        None => (128 + Signal::SIGKILL as i32, Some(Signal::SIGKILL as i32)),
    }
}
