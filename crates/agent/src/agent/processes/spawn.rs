//! Starting a process of the API: `bash -c` as the program user, in a session of its
//! own, its three pipes' agent ends non-blocking (the one thread of `io.rs` serves
//! them), and a pidfd that says when it ends.

use super::super::child::harden;
use super::super::environment::environment;
use super::super::identity::program_user;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// A process just started: its pid, its pidfd, and the agent's ends of its pipes.
pub(super) struct Started {
    pub(super) pid: i32,
    pub(super) pidfd: OwnedFd,
    pub(super) stdin: OwnedFd,
    pub(super) stdout: OwnedFd,
    pub(super) stderr: OwnedFd,
}

/// Starts `command` under `bash -c` as the program user, in a session of its own (so
/// that its process group is its pid, and a run's cleanup spares it), in `cwd` (relative
/// to the home folder) with `env` added to a program's environment.
pub(super) fn start(
    command: &str,
    cwd: Option<&str>,
    env: &BTreeMap<String, String>,
) -> io::Result<Started> {
    let cwd = cwd
        .map(|c| CString::new(c).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput)))
        .transpose()?;
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(command)
        .env_clear()
        .envs(environment(&BTreeMap::new(), &[]))
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let user = program_user();
    // SAFETY: between fork and exec the child makes only async-signal-safe calls and
    // allocates nothing: setsid, `harden` (see there), and chdir on a string made
    // before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            harden(user)?;
            if let Some(cwd) = &cwd {
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as i32;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        unreachable!("every stream is piped above");
    };
    // The child is dropped without a wait: its status comes from the agent's reaping.
    drop(child);
    let (stdin, stdout, stderr) = (
        OwnedFd::from(stdin),
        OwnedFd::from(stdout),
        OwnedFd::from(stderr),
    );
    for fd in [&stdin, &stdout, &stderr] {
        nonblocking(fd)?;
    }
    Ok(Started {
        pid,
        pidfd: pidfd(pid)?,
        stdin,
        stdout,
        stderr,
    })
}

fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// A descriptor that becomes readable when `pid` exits.
fn pidfd(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; it touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just made and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
