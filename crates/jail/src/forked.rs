//! A sandbox cloned from a template (issue 16) rather than made by a fresh jail
//! process: both halves of the exchange that sets it up.
//!
//! A template is a long-lived process that has done, once, what every sandbox of its
//! kind would repeat (an interpreter started). It runs as root of a user namespace of its
//! own that maps only the sandboxes' host ids (see sandbox-agent's `template`), so the
//! steps that need host root are the runner's, told through a control socket
//! (`SOCK_SEQPACKET`) made for this sandbox alone:
//!
//! 1. the template clones the sandbox's first process ([`clone_sandbox`]) into new user,
//!    PID, mount, network, IPC and UTS namespaces with the sandbox's host identity as its
//!    effective ids, so that the sandbox's user namespace is that identity's, as with a
//!    jail; it writes the child's id maps (sandbox root and user to the sandbox's two host
//!    ids) and sends the runner a pidfd of it ([`announce`]);
//! 2. the runner moves that process into the sandbox's cgroups ([`host_side`]) and
//!    answers it;
//! 3. the process takes a cgroup namespace rooted at its cgroup, makes the stage inside
//!    its namespaces, with the device nodes the template made for this sandbox index
//!    ([`JailSpec::devices`], read-only), and takes the jail's steps 6 to 9 and the
//!    seccomp filter ([`become_sandbox`]): it is then the sandbox's agent-to-be, and
//!    executes the agent ([`crate::exec`]) as the jail does. The template reaps it.
//!
//! The sandbox's user namespace is owned by the sandbox's own host identity, as with a
//! jail; its parent is the template's user namespace (owned by the template's uid), where
//! the kernel counts what the sandbox's namespace counts, per sandbox identity, and above
//! it against the template's uid, whose per-user rlimits are lifted: each sandbox's own
//! rlimits are its bounds, and no sandbox's use is another's.

use crate::error::JailError;
use crate::fdpass;
use crate::rootfs::{HostView, ShownFolders};
use crate::setup::{clone_as_owner, enter, write_id_maps};
use crate::spec::JailSpec;
use nix::sys::socket::MsgFlags;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// In the template (root of its user namespace, one thread): clones the sandbox's first
/// process into new user, PID, mount, network, IPC and UTS namespaces, with the sandbox's
/// host identity as its effective ids (so the sandbox's user namespace is that
/// identity's). `Some(pid)` in the template, which then calls [`announce`]; `None` in the
/// child, which calls [`become_sandbox`].
pub fn clone_sandbox(spec: &JailSpec) -> Result<Option<nix::unistd::Pid>, JailError> {
    clone_as_owner(Some(spec.ids.root), false)
}

/// In the template, once `child` is cloned: writes its id maps (only a process of the
/// parent namespace may; the template is dumpable, so the child's /proc files are the
/// sandbox identity's, which the template's root may write) and sends a pidfd of it to
/// the runner on `ctl`.
pub fn announce(child: nix::unistd::Pid, spec: &JailSpec, ctl: &OwnedFd) -> Result<(), JailError> {
    write_id_maps(child, spec.ids, spec.gids)?;
    send_pidfd(ctl, SANDBOX, child.as_raw())
}

/// In the sandbox's first process: waits until the runner has moved it into the
/// sandbox's cgroups (the template had written its maps before it told the runner),
/// takes a cgroup namespace rooted there, and the jail's steps 6 to 10 but the exec; it
/// is then the agent-to-be. It does not die with the template: the runner ends it (its
/// cgroup), or it ends when its channel closes.
///
/// It was made outside its cgroups and moved in, and a move is not held to `pids.max`:
/// with `probe`, it first makes one process there (a fork that exits at once), so that a
/// sandbox whose cgroups allow no process fails here, as a jail's would, rather than
/// later with each program (a sandbox whose agent forks a loader before Ready, as the
/// Python template's do, needs no probe). `host` is the host as the template read it,
/// `sources` where it showed the host folders the tree shows.
pub fn become_sandbox(
    spec: &JailSpec,
    host: &HostView,
    sources: ShownFolders,
    ctl: OwnedFd,
    probe: bool,
) -> Result<(), JailError> {
    await_go(&ctl)?;
    drop(ctl);
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP).map_err(JailError::MountNs)?;
    if probe {
        probe_fork()?;
    }
    enter(spec, host, None, sources, false)
}

/// Makes one process (which exits at once) and reaps it.
fn probe_fork() -> Result<(), JailError> {
    // SAFETY: this process has one thread; the child only calls _exit.
    match unsafe { libc::fork() } {
        -1 => Err(JailError::Clone(io::Error::last_os_error())),
        // SAFETY: _exit ends the child at once, touching nothing of the parent's.
        0 => unsafe { libc::_exit(0) },
        pid => {
            crate::setup::wait_exit_code(nix::unistd::Pid::from_raw(pid))?;
            Ok(())
        }
    }
}

/// The tag of the message that carries the sandbox's pidfd.
const SANDBOX: u8 = b'S';

/// The runner's side, as host root: moves the sandbox's first process into
/// `cgroup_procs` and returns a pidfd of it (it lives as long as the sandbox). The
/// socket's receive timeout bounds the wait.
pub fn host_side(ctl: &OwnedFd, cgroup_procs: &[PathBuf]) -> Result<OwnedFd, JailError> {
    let sandbox = receive_pidfd(ctl, SANDBOX)?;
    let pid = pid_of(&sandbox)?;
    for path in cgroup_procs {
        fs::write(path, pid.to_string()).map_err(|source| JailError::JoinCgroup {
            path: path.clone(),
            source,
        })?;
    }
    go(ctl)?;
    Ok(sandbox)
}

/// The pid (in this process's PID namespace) of the process `pidfd` refers to.
pub fn pid_of(pidfd: &OwnedFd) -> Result<i32, JailError> {
    let path = format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd());
    let info = fs::read_to_string(&path).map_err(JailError::Sync)?;
    info.lines()
        .find_map(|line| line.strip_prefix("Pid:"))
        .and_then(|pid| pid.trim().parse().ok())
        .filter(|pid: &i32| *pid > 0)
        .ok_or_else(|| JailError::Sync(io::Error::other(format!("no live pid in {path}"))))
}

fn send_pidfd(ctl: &OwnedFd, tag: u8, pid: i32) -> Result<(), JailError> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        return Err(JailError::Sync(io::Error::last_os_error()));
    }
    // SAFETY: the descriptor was just made and nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
    fdpass::send(ctl.as_raw_fd(), &[tag], &[pidfd.as_raw_fd()]).map_err(JailError::Sync)
}

fn receive_pidfd(ctl: &OwnedFd, tag: u8) -> Result<OwnedFd, JailError> {
    let mut byte = [0u8; 1];
    let mut msg = fdpass::receive::<1>(ctl.as_raw_fd(), &mut byte).map_err(JailError::Sync)?;
    match (msg.bytes, msg.fds.len()) {
        (1, 1) if byte[0] == tag => Ok(msg.fds.remove(0)),
        (0, _) => Err(JailError::Sync(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the sandbox's first process went away during its setup",
        ))),
        (bytes, count) => Err(JailError::Sync(io::Error::other(format!(
            "unexpected setup message ({bytes} bytes, {count} descriptors)"
        )))),
    }
}

fn go(ctl: &OwnedFd) -> Result<(), JailError> {
    nix::sys::socket::send(ctl.as_raw_fd(), b"1", MsgFlags::empty())
        .map_err(|e| JailError::Sync(e.into()))?;
    Ok(())
}

fn await_go(ctl: &OwnedFd) -> Result<(), JailError> {
    let mut byte = [0u8; 1];
    match nix::sys::socket::recv(ctl.as_raw_fd(), &mut byte, MsgFlags::empty()) {
        Ok(1) if byte[0] == b'1' => Ok(()),
        Ok(_) => Err(JailError::Sync(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the runner went away during the sandbox's setup",
        ))),
        Err(e) => Err(JailError::Sync(e.into())),
    }
}
