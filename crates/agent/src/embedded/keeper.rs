//! The keeper: the copy of the template's interpreter a sandbox holds for its Python
//! program, in a process of its own rather than in the agent.
//!
//! The sandbox's first process, once set up, forks the keeper from the interpreter it
//! holds ([`fork`]) and then executes the agent afresh, handing it the keeper's pid and
//! one end of a socket pair (see `template::agent`). The keeper waits there, as sandbox
//! root and confined as the agent is, for one request: the source of the loader and its
//! four descriptors (standard output and error, the loader's request and report pipes).
//! It then becomes that loader as the program user ([`super::child_setup`]), exactly as
//! a loader the agent forked itself would. The agent takes the keeper for the first
//! Python loader it prepares ([`take_for`]); one it cannot stand for (a recipe that is
//! not the standard loader) ends it. A keeper never used ends with its sandbox.

use super::{child_setup, loader_source, stands_for};
use crate::process::Process;
use sandbox_jail::fdpass;
use sandbox_jail::layout::SANDBOX_UID;
use sandbox_protocol::language::{LoaderKind, Recipe};
use sandbox_pyembed::{Forked, Python};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// The largest request (a loader's source: a few kilobytes of environment and code).
const REQUEST_MAX: usize = 64 * 1024;

/// In the sandbox's first process, set up as its agent is and single-threaded: forks
/// the keeper from `python`. Returns, here, the keeper's pid and the agent's end of the
/// socket to it; the keeper itself never returns.
pub(crate) fn fork(python: &Python) -> io::Result<(i32, OwnedFd)> {
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
        Ok(Some((source, fds))) => match become_loader(fds) {
            Ok(()) => match python.run(&source) {
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
    crate::launch::give(&[(socket.as_raw_fd(), SOCKET_FD)])?;
    drop(socket);
    // SAFETY: close_range only closes descriptors; none above 3 is used again here.
    if unsafe { libc::syscall(libc::SYS_close_range, SOCKET_FD + 1, u32::MAX, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: descriptor 3 was just made a copy of the socket, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(SOCKET_FD) })
}

/// The request: the loader's source, and its standard output, standard error, request
/// pipe and report pipe. `None` once the agent has let the keeper go.
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
    let source = String::from_utf8(data).map_err(io::Error::other)?;
    Ok(Some((source, fds)))
}

/// Takes the loader's descriptors (standard input from /dev/null) and becomes the
/// program user. The descriptors given are the loader's from here on: their first
/// numbers are closed (see [`child_setup`]), so none is owned here any more.
fn become_loader(fds: [OwnedFd; 4]) -> io::Result<()> {
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
    child_setup(&fds, Some((SANDBOX_UID, SANDBOX_UID)))
}

/// The agent's side: a keeper waiting in this sandbox.
pub(crate) struct Keeper {
    pid: i32,
    socket: OwnedFd,
    program: String,
}

/// The keeper of this agent's sandbox, until a loader takes it.
static KEEPER: Mutex<Option<Keeper>> = Mutex::new(None);

/// In the agent, at its start: the keeper `pid` (whose interpreter is `program`) waits
/// on the socket inherited as `fd`.
///
/// # Safety
///
/// `fd` must be an open socket that nothing else in the process owns or will close.
pub(crate) unsafe fn adopt(fd: RawFd, pid: i32, program: String) -> io::Result<()> {
    // SAFETY: the caller hands over sole ownership of `fd`.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    nix::fcntl::fcntl(
        &socket,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )?;
    let keeper = Keeper {
        pid,
        socket,
        program,
    };
    *KEEPER.lock().unwrap_or_else(|e| e.into_inner()) = Some(keeper);
    Ok(())
}

/// The keeper, for the first Python loader this agent prepares: taken if it can stand
/// for `recipe`'s loader, else let go (a recipe of the operator's that sets the
/// interpreter's variables): the loader is then executed, as every later one is.
pub(crate) fn take_for(recipe: &Recipe) -> Option<Keeper> {
    let python = recipe
        .loader
        .as_ref()
        .is_some_and(|l| l.kind == LoaderKind::Python);
    if !python {
        return None;
    }
    let keeper = KEEPER.lock().unwrap_or_else(|e| e.into_inner()).take()?;
    if stands_for(recipe, &keeper.program) {
        Some(keeper)
    } else {
        keeper.release();
        None
    }
}

impl Keeper {
    /// Has the keeper become the loader of `recipe` (as `python3 -c LOADER [warm]`
    /// would start), with `go` on descriptor 3 and `done` on 4; its output pipes' read
    /// ends are the returned process's.
    pub(crate) fn start_loader(
        self,
        recipe: &Recipe,
        warm_imports: &[String],
        (go, done): (OwnedFd, OwnedFd),
    ) -> io::Result<Process> {
        let source = loader_source(recipe, warm_imports)?;
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        let (out_read, out_write) = nix::unistd::pipe2(cloexec)?;
        let (err_read, err_write) = nix::unistd::pipe2(cloexec)?;
        let fds = [&out_write, &err_write, &go, &done].map(|fd| fd.as_raw_fd());
        let sent = fdpass::send(self.socket.as_raw_fd(), source.as_bytes(), &fds);
        if let Err(e) = sent {
            self.release();
            return Err(e);
        }
        Ok(Process::forked(self.pid as u32, out_read, err_read))
    }

    /// Lets the keeper go (it exits), and reaps it.
    fn release(self) {
        drop(self.socket);
        let pid = nix::unistd::Pid::from_raw(self.pid);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
    }
}
