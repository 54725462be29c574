//! A sandbox made from a fork of a template (issue 16) rather than from a fresh jail
//! process: both halves of the exchange that sets it up.
//!
//! A template is a long-lived process that has done, once, what every sandbox of its
//! language would repeat (an interpreter started). It runs as a host uid of its own,
//! without any capability, so every step that needs host root is the runner's, told
//! through a control socket (`SOCK_SEQPACKET`) made for this sandbox alone, or is done
//! by the template's root in the template's user namespace:
//!
//! 1. the fork (**leader**) sends a pidfd of itself; the runner moves that process into
//!    the sandbox's cgroups ([`host_side`]) and answers;
//! 2. the leader clones into new user, PID, mount, network, IPC, UTS and cgroup
//!    namespaces (the cgroup namespace rooted at the sandbox's cgroup, which it is
//!    already in) with the sandbox's host identity as its effective ids, so that the
//!    sandbox's user namespace is that identity's, as with a jail (the template's user
//!    namespace maps the sandbox ids, and only those: see sandbox-agent's `template`);
//!    back to the template's root, it writes the child's id maps (sandbox root and user
//!    to the sandbox's two host ids), which only a process of the parent namespace may;
//! 3. the child makes the stage inside its namespaces, with device nodes the template
//!    made for this sandbox index ([`JailSpec::devices`]), and takes the same steps as
//!    the jail's child ([`crate::setup`] 6 to 9 and the seccomp filter); it is then the
//!    sandbox's agent-to-be, and [`fork_jail`] returns [`Role::Agent`] in it;
//! 4. the leader waits for it and returns its exit code ([`Role::Leader`]).
//!
//! The sandbox's user namespace is owned by the sandbox's own host identity, as with a
//! jail; its parent is the template's user namespace (owned by the template's uid), where
//! the kernel counts what the sandbox's namespace counts, per sandbox identity, and above
//! it against the template's uid, whose per-user rlimits are lifted: each sandbox's own
//! rlimits are its bounds, and no sandbox's use is another's.

use crate::setup::{
    clone_as_owner, enter, pipe, wait_exit_code, wait_for_parent, write_id_maps, JailSpec,
};
use crate::JailError;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::fs::{self, File};
use std::io::{self, IoSlice, IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// What [`fork_jail`] returns in each process.
#[derive(Debug, PartialEq, Eq)]
pub enum Role {
    /// The sandbox's first process, confined: it goes on as the agent.
    Agent,
    /// The leader, once the sandbox's first process has ended: its exit code.
    Leader(i32),
}

/// The leader's side (in a fresh fork of a template, with `ctl` the sandbox's control
/// socket): steps 1 to 4 above.
pub fn fork_jail(spec: &JailSpec, ctl: OwnedFd) -> Result<Role, JailError> {
    send_pidfd(&ctl, b'L', nix::unistd::getpid().as_raw())?;
    await_go(&ctl)?;
    drop(ctl);
    let (ready_rx, ready_tx) = pipe()?;
    let (cloned_rx, cloned_tx) = pipe()?;
    match clone_as_owner(Some(spec.ids.root))? {
        None => {
            drop((ready_tx, cloned_rx));
            // Its /proc files are then its identity's, which the template's root may
            // write (not host root's, as for a process that is not dumpable); its first
            // change of ids, in `enter`, makes it not dumpable again.
            nix::sys::prctl::set_dumpable(true).map_err(JailError::NsRoot)?;
            File::from(cloned_tx)
                .write_all(b"1")
                .map_err(JailError::Sync)?;
            wait_for_parent(ready_rx)?;
            enter(spec, None)?;
            Ok(Role::Agent)
        }
        Some(child) => {
            drop((ready_rx, cloned_tx));
            wait_for_parent(cloned_rx)?;
            write_id_maps(child, spec.ids, spec.gids)?;
            File::from(ready_tx)
                .write_all(b"1")
                .map_err(JailError::Sync)?;
            Ok(Role::Leader(wait_exit_code(child)?))
        }
    }
}

/// The runner's side, as host root: moves the leader into `cgroup_procs` and returns a
/// pidfd of it (it lives as long as the sandbox). The socket's receive timeout bounds
/// the wait.
pub fn host_side(ctl: &OwnedFd, cgroup_procs: &[PathBuf]) -> Result<OwnedFd, JailError> {
    let leader = receive_pidfd(ctl, b'L')?;
    let pid = pid_of(&leader)?;
    for path in cgroup_procs {
        fs::write(path, pid.to_string()).map_err(|source| JailError::JoinCgroup {
            path: path.clone(),
            source,
        })?;
    }
    go(ctl)?;
    Ok(leader)
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
    let fds = [pidfd.as_raw_fd()];
    sendmsg::<()>(
        ctl.as_raw_fd(),
        &[IoSlice::new(&[tag])],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(|e| JailError::Sync(e.into()))?;
    Ok(())
}

fn receive_pidfd(ctl: &OwnedFd, tag: u8) -> Result<OwnedFd, JailError> {
    let mut byte = [0u8; 1];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [IoSliceMut::new(&mut byte)];
    let msg = recvmsg::<()>(
        ctl.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| JailError::Sync(e.into()))?;
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs().map_err(|e| JailError::Sync(e.into()))? {
        if let ControlMessageOwned::ScmRights(received) = cmsg {
            fds.extend(received);
        }
    }
    // SAFETY: each descriptor arrived with the message and is owned by nothing else.
    let mut owned: Vec<OwnedFd> = fds
        .into_iter()
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    let bytes = msg.bytes;
    match (bytes, owned.len()) {
        (1, 1) if byte[0] == tag => Ok(owned.remove(0)),
        (0, _) => Err(JailError::Sync(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the sandbox's first process went away during its setup",
        ))),
        _ => Err(JailError::Sync(io::Error::other(format!(
            "unexpected setup message ({bytes} bytes, {} descriptors)",
            owned.len()
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
