//! Who programs run as.
//!
//! In a process sandbox the agent is sandbox root, holding only the capabilities to
//! start and end programs, and every program runs as the sandbox user: it can then
//! neither signal, trace, re-limit nor re-prioritise the agent (each needs the same
//! user or a capability it has not). Where no program user is set (a VM guest today),
//! programs run as the agent does.

use std::io;
use std::path::Path;
use std::sync::OnceLock;

static PROGRAM_USER: OnceLock<(u32, u32)> = OnceLock::new();

/// Runs every program the agent starts from now on as `uid`/`gid`, with an empty
/// capability bounding set. Call once, before serving: a second call changes nothing.
pub fn run_programs_as(uid: u32, gid: u32) {
    let _ = PROGRAM_USER.set((uid, gid));
}

/// The program user, if one is set.
pub(crate) fn program_user() -> Option<(u32, u32)> {
    PROGRAM_USER.get().copied()
}

/// In the child, between fork and exec: empties the bounding set and becomes `user`,
/// which clears every capability. Raw system calls only (async-signal-safe).
pub(crate) fn become_program_user((uid, gid): (u32, u32)) -> io::Result<()> {
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes a capability number and touches no memory.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(e); // EINVAL: past the kernel's last capability
            }
        }
    }
    // SAFETY: setresgid and setresuid take plain ids and touch no memory; the raw calls
    // change this (only) thread's credentials, which is the whole child.
    unsafe {
        if libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
            || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Writes `contents` to `path`, as the program user when one is set (so that the file
/// is the program's, in a home folder only it may write to).
pub(crate) fn write_as_program_user(path: &Path, contents: &[u8]) -> io::Result<()> {
    as_program_user(|| std::fs::write(path, contents))?
}

/// Runs `f` with this thread's file-system ids those of the program user (when one is
/// set), so that what it touches is checked against the program's rights.
pub(crate) fn as_program_user<T>(f: impl FnOnce() -> T) -> io::Result<T> {
    let Some((uid, gid)) = program_user() else {
        return Ok(f());
    };
    let _fs = FsIds::take(uid, gid)?;
    Ok(f())
}

/// This thread's file-system ids switched to a user, and switched back on drop.
struct FsIds {
    uid: u32,
    gid: u32,
}

impl FsIds {
    fn take(uid: u32, gid: u32) -> io::Result<FsIds> {
        // SAFETY: setfsuid/setfsgid take plain ids and touch no memory; they return the
        // previous id and change only this thread's file-system ids.
        let (old_gid, old_uid) = unsafe { (libc::setfsgid(gid), libc::setfsuid(uid)) };
        let saved = FsIds {
            uid: old_uid as u32,
            gid: old_gid as u32,
        };
        // An invalid id (-1) changes nothing and reports the current one.
        // SAFETY: as above.
        let now = unsafe { (libc::setfsgid(u32::MAX), libc::setfsuid(u32::MAX)) };
        if now != (gid as i32, uid as i32) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("could not take file-system ids {uid}/{gid}"),
            ));
        }
        Ok(saved)
    }
}

impl Drop for FsIds {
    fn drop(&mut self) {
        // SAFETY: as in `take`.
        unsafe {
            libc::setfsuid(self.uid);
            libc::setfsgid(self.gid);
        }
    }
}
