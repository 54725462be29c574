//! Signal dispositions and the signal mask as a process started afresh has them. An
//! ignored signal stays ignored across fork and exec, and a blocked one stays blocked:
//! whatever started the runner (`nohup`, a supervisor, a shell that ignores SIGHUP or
//! SIGUSR1) would otherwise reach every sandbox's agent and programs, and a program's
//! process would then outlive the very signal the API sends it.

/// Every signal's disposition back to its default (but SIGKILL's and SIGSTOP's, which
/// cannot change), the C library's own real-time ones included, and nothing blocked.
/// Raw system calls only: async-signal-safe, so also fit for a child between fork and
/// exec.
pub fn reset() {
    let default = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SIGRTMAX on Linux: 64.
    for signal in 1..=64 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: rt_sigaction reads the kernel's sigaction layout from a live local
        // (mask size 8, as the kernel takes) and writes no old action (null).
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                &default as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                std::mem::size_of::<u64>(),
            );
        }
    }
    let empty: u64 = 0;
    // SAFETY: rt_sigprocmask reads an 8-byte set from a live local and writes no old set.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty as *const u64,
            std::ptr::null_mut::<u64>(),
            std::mem::size_of::<u64>(),
        );
    }
}

/// The kernel's `struct sigaction` (not the C library's, which differs): a handler,
/// flags, a restorer and a 64-signal mask.
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a child (the test process's own dispositions are left alone): ignored and
    /// blocked signals before, none after.
    #[test]
    fn every_ignored_or_blocked_signal_is_back_to_its_default() {
        // SAFETY: the child only makes raw calls and reads its own status file before
        // it exits; the parent only waits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: plain dispositions and a mask built in a live local.
            unsafe {
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                libc::signal(libc::SIGUSR1, libc::SIG_IGN);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGTERM);
                libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            reset();
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let clear = |field: &str| {
                status
                    .lines()
                    .find(|l| l.starts_with(field))
                    .is_some_and(|l| l.trim_end().ends_with("0000000000000000"))
            };
            let ok = clear("SigIgn:") && clear("SigBlk:");

            // SAFETY: ends the child at once, without the parent's atexit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked; writes into a live local.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status}"
        );
    }
}
