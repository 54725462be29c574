//! What a child of the agent does before it becomes a program (between fork and exec,
//! or, for a keeper forked from a template's interpreter, before it runs its loader):
//! its descriptors put in place, then hardened and made the program user, in the home
//! folder. Raw system calls only, no allocation, no lock: a child of a multi-threaded
//! process may make no other.

use super::identity::become_program_user;
use std::io;

/// [`HOME`](sandbox_jail::layout::HOME) as a C string, for the child between fork and
/// exec.
const HOME_C: &std::ffi::CStr = c"/home/sandbox";

/// In a forked child: makes each `(from, to)` descriptor `from` available as `to`
/// (across an exec too). Each is first copied above every target, so that placing one
/// never overwrites another still to be placed; the copies are close-on-exec (an exec, or
/// the caller's `close_range`, ends them). Raw calls only, no allocation: fit for
/// between fork and exec.
pub(crate) fn give<const N: usize>(pairs: &[(i32, i32); N]) -> io::Result<()> {
    let mut copies = [0; N];
    for (copy, (from, _)) in copies.iter_mut().zip(pairs) {
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) takes descriptors and touches no memory.
        *copy = unsafe { libc::fcntl(*from, libc::F_DUPFD_CLOEXEC, 10) };
        if *copy < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    for (copy, (_, to)) in copies.iter().zip(pairs) {
        // SAFETY: dup2 takes descriptors and touches no memory; the copy (close-on-exec)
        // goes away at exec.
        if unsafe { libc::dup2(*copy, *to) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// When the sandbox runs out of memory, the kernel must kill the program, never the
/// agent: raising a score needs no privilege, and everything the program starts
/// inherits it. The child is made dumpable first, as the agent is not, so that it owns
/// its /proc files. Then it becomes the program user, if one is set (its exec makes it
/// dumpable again, now as that user), and enters the home folder, which only that user
/// may enter.
///
/// It runs in the child of a multi-threaded process between fork and exec: raw system
/// calls on static strings only, no allocation, no lock.
pub(crate) fn harden(user: Option<(u32, u32)>) -> io::Result<()> {
    nix::sys::prctl::set_dumpable(true)?;
    write_static(c"/proc/self/oom_score_adj", b"1000")?;
    if let Some(user) = user {
        become_program_user(user)?;
    }
    // SAFETY: chdir reads a NUL-terminated string that lives for the whole program.
    if unsafe { libc::chdir(HOME_C.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes `contents` to the file at `path` with raw calls (async-signal-safe).
fn write_static(path: &std::ffi::CStr, contents: &[u8]) -> io::Result<()> {
    // SAFETY: open reads a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: write reads `contents.len()` bytes of a live slice from a descriptor we
    // own; close releases it once.
    let written = unsafe { libc::write(fd, contents.as_ptr().cast(), contents.len()) };
    let error = io::Error::last_os_error();
    // SAFETY: as above.
    unsafe { libc::close(fd) };
    match written {
        n if n == contents.len() as isize => Ok(()),
        n if n < 0 => Err(error),
        _ => Err(io::Error::from(io::ErrorKind::WriteZero)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_home_folders_c_string_names_home() {
        assert_eq!(super::HOME_C.to_str(), Ok(sandbox_jail::layout::HOME));
    }
}
