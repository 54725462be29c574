//! The agent's side of the keeper: the copy of a Python template's interpreter that a
//! sandbox forked from that template holds, in a process of its own, waiting to become
//! the sandbox's first Python loader (the keeper's own side is the template's,
//! `crate::template`, with the feature `embedded-python`; this side is in every build,
//! since a template may execute a `sandbox-agent` built without it as its sandboxes'
//! agent).
//!
//! The agent adopts the keeper at its start ([`adopt`]: the pid and socket the sandbox's
//! first process handed it). It takes the keeper for the first Python loader it prepares
//! ([`take_for`]) if the keeper can stand for that loader ([`stands_for`]: the standard
//! one, run by the template's interpreter, with no variable the interpreter reads at
//! start), and lets it go otherwise: the loader is then executed, as every later one is.
//! A keeper never used ends with its sandbox.
//!
//! The one request, on a `SOCK_SEQPACKET` socket: what an executed `python3 -c LOADER
//! [warm]` would be started with (its environment and arguments, as JSON), with the
//! loader's standard output and error and its request and report pipes.

use super::environment::environment;
use super::process::Process;
use sandbox_jail::fdpass;
use sandbox_protocol::language::{LoaderKind, Recipe, LOADER_SOURCE};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// The largest request (a few kilobytes of environment and arguments).
pub(crate) const REQUEST_MAX: usize = 64 * 1024;

/// A keeper waiting in this sandbox.
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

/// Whether `recipe`'s loader is the standard Python one run by `program` (`python3 -c
/// LOADER`, no variable of the recipe's that the interpreter reads at start): only then
/// does a fork of the template's interpreter stand for the executed loader.
fn stands_for(recipe: &Recipe, program: &str) -> bool {
    let Some(loader) = recipe.loader.as_ref() else {
        return false;
    };
    let named = |arg: &str| arg == "python3" || arg == program;
    let standard = loader.kind == LoaderKind::Python
        && loader.command.len() == 3
        && named(&loader.command[0])
        && loader.command[1] == "-c"
        && loader.command[2] == LOADER_SOURCE;
    let start_env = recipe.env.keys().any(|k| k.starts_with("PYTHON"));
    standard && !start_env
}

/// What `python3 -c LOADER [warm]` would be started with under `recipe`: the JSON of
/// `{"env": {...}, "argv": [...]}`.
fn start_config(recipe: &Recipe, warm_imports: &[String]) -> String {
    let env = environment(&recipe.env, &[]);
    let mut argv = vec!["-c".to_owned()];
    if !warm_imports.is_empty() {
        argv.push(warm_imports.join(","));
    }
    let config = serde_json::json!({
        "env": env.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        "argv": argv,
    });
    config.to_string()
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
        let config = start_config(recipe, warm_imports);
        if config.len() > REQUEST_MAX {
            self.release();
            return Err(io::Error::other(format!(
                "the keeper's request is {} bytes, above {REQUEST_MAX}",
                config.len()
            )));
        }
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        let (out_read, out_write) = nix::unistd::pipe2(cloexec)?;
        let (err_read, err_write) = nix::unistd::pipe2(cloexec)?;
        let fds = [&out_write, &err_write, &go, &done].map(|fd| fd.as_raw_fd());
        let sent = fdpass::send(self.socket.as_raw_fd(), config.as_bytes(), &fds);
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
