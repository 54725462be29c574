//! The keeper: the copy of the template's interpreter a sandbox holds for its Python
//! program, in a process of its own rather than in the agent.
//!
//! The sandbox's first process, once set up, forks the keeper from the interpreter it
//! holds ([`fork`]) and then executes the agent afresh, handing it the keeper's pid and
//! one end of a socket pair (see `first.rs`). The keeper waits there, as sandbox root and
//! confined as the agent is, for one request: what an executed loader would have been
//! started with (its environment and arguments, as JSON) and the loader's four
//! descriptors (standard output and error, the loader's request and report pipes). It
//! then becomes that loader as the program user ([`super::child_setup`]), exactly as a
//! loader the agent forked itself would. The agent's side (which loader the keeper may
//! stand for, and the request) is `crate::agent`'s `keeper.rs`. A keeper the agent lets
//! go exits; one never used ends with its sandbox.

use super::{child_setup, loader_source};
use crate::agent::child::give;
use crate::agent::keeper::REQUEST_MAX;
use sandbox_jail::fdpass;
use sandbox_jail::layout::SANDBOX_UID;
use sandbox_pyembed::{Forked, Python};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

/// In the sandbox's first process, set up as its agent is and single-threaded: forks
/// the keeper from `python`. Returns, here, the keeper's pid and the agent's end of the
/// socket to it; the keeper itself never returns.
pub(in crate::template) fn fork(python: &Python) -> io::Result<(i32, OwnedFd)> {
    let (agent_end, keeper_end) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )?;
    match python.fork().map_err(io::Error::other)? {
        Forked::Child => {
            drop(agent_end);
            keep(python, keeper_end)
        }
        Forked::Parent(pid) => Ok((pid, agent_end)),
    }
}

/// The keeper's life: nothing but its socket and standard error kept, it waits for its
/// one request and becomes the loader; it exits when the agent lets it go.
fn keep(python: &Python, socket: OwnedFd) -> ! {
    let code = match only(socket).and_then(|socket| await_request(&socket)) {
        Ok(None) => 0,
        Ok(Some((config, fds))) => match become_loader(&config, fds) {
            Ok(source) => match python.run(&source) {
                Ok(()) => 0,
                Err(_) => 1,
            },
            Err(e) => {
                eprintln!("sandbox-agent: starting the forked interpreter: {e}");
                127
            }
        },
        Err(e) => {
            eprintln!("sandbox-agent: the Python keeper: {e}");
            1
        }
    };
    // SAFETY: _exit ends the keeper at once; the interpreter has finished its program
    // (a SystemExit ends the process inside `run`), and the exit handlers it would
    // otherwise run are the template's.
    unsafe { libc::_exit(code) }
}

/// Keeps `socket` (as descriptor 3) and standard input, output and error only: the
/// agent's channel and everything else the first process held are closed.
fn only(socket: OwnedFd) -> io::Result<OwnedFd> {
    const SOCKET_FD: RawFd = 3;
    give(&[(socket.as_raw_fd(), SOCKET_FD)])?;
    drop(socket);
    // SAFETY: close_range only closes descriptors; none above 3 is used again here.
    if unsafe { libc::syscall(libc::SYS_close_range, SOCKET_FD + 1, u32::MAX, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: descriptor 3 was just made a copy of the socket, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(SOCKET_FD) })
}

/// The request: the loader's start (JSON), and its standard output, standard error,
/// request pipe and report pipe. `None` once the agent has let the keeper go.
fn await_request(socket: &OwnedFd) -> io::Result<Option<(String, [OwnedFd; 4])>> {
    let mut data = vec![0u8; REQUEST_MAX];
    let msg = fdpass::receive::<4>(socket.as_raw_fd(), &mut data)?;
    if msg.bytes == 0 && msg.fds.is_empty() {
        return Ok(None);
    }
    let fds: [OwnedFd; 4] = msg
        .fds
        .try_into()
        .map_err(|_| io::Error::other("a request without its four descriptors"))?;
    if msg.truncated {
        return Err(io::Error::other("a request over 64 KiB"));
    }
    data.truncate(msg.bytes);
    let config = String::from_utf8(data).map_err(io::Error::other)?;
    Ok(Some((config, fds)))
}

/// Takes the loader's descriptors (standard input from /dev/null) and becomes the
/// program user; returns the source that makes this interpreter the loader `config`
/// describes. The descriptors given are the loader's from here on: their first numbers
/// are closed (see [`child_setup`]), so none is owned here any more.
fn become_loader(config: &str, fds: [OwnedFd; 4]) -> io::Result<String> {
    let source = loader_source(config)?;
    let null = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    let [out, err, go, done] = fds.map(IntoRawFd::into_raw_fd);
    let fds = [
        (null.into_raw_fd(), 0),
        (out, 1),
        (err, 2),
        (go, 3),
        (done, 4),
    ];
    child_setup(&fds, Some((SANDBOX_UID, SANDBOX_UID)))?;
    Ok(source)
}
