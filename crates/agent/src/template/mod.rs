//! A template (issue 16): a long-lived process the runner starts once, which makes each
//! sandbox from a fork of itself instead of a fresh jail process, so that what every
//! sandbox would repeat is done once.
//!
//! The runner starts it as host root, as `sandbox-agent __sandbox-template` (its binary),
//! with an empty environment and a `SOCK_SEQPACKET` socket as descriptor 3. The first
//! message on it is the template's [`TemplateSpec`]; the template opens its own binary,
//! then confines itself (`confine.rs`) before it reads anything else: mount, network,
//! IPC and UTS namespaces of its own (made as host root, so it cannot change them), then
//! a host uid of its own (no capability on the host), then a user namespace of its own,
//! whose maps the runner writes: the template's uid is its root, and every sandbox's two
//! host ids are mapped to themselves. So the template can take a sandbox's host identity
//! (to make that sandbox's user namespace as it, which then owns it, as with a jail) and
//! no other host id: never host root.
//!
//! Each later message asks for one sandbox: the sandbox's [`JailSpec`] as
//! JSON, with three descriptors: the agent channel, the sandbox's standard error, and its
//! control socket. The template clones the sandbox's first process and announces it
//! ([`sandbox_jail::forked`]); the clone puts the channel on descriptor 3 and standard
//! error on 2, closes everything else the template held but its binary, takes the jail's
//! steps once the runner has moved it into its cgroups, and then executes the agent
//! afresh (see [`agent`]): the agent shares no address layout or stack canary with the
//! template, its other sandboxes or its own program. The template holds no secret (its
//! environment is empty and it reads nothing but its spec and the requests), so a fork
//! of it has none.
//!
//! End of file on descriptor 3 ends the template; its forks end with their sandboxes.

pub mod agent;
mod confine;

pub use confine::Ceilings;

use agent::EXE_FD;
use confine::confine;
use sandbox_jail::forked::{announce, become_sandbox, clone_sandbox};
use sandbox_jail::rootfs::{HostView, ShownFolders};
use sandbox_jail::JailSpec;
use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// The first argument that selects the template in a multicall binary.
pub const TEMPLATE_ARG: &str = "__sandbox-template";
/// The name the template is started under (its `argv[0]`), as every agent is.
pub use sandbox_jail::exec::AGENT_NAME;
/// The descriptor requests arrive on.
const REQUESTS_FD: RawFd = 3;
/// The largest request read (a jail spec is a few hundred bytes).
const REQUEST_MAX: usize = 64 * 1024;
/// How often, at most, forks whose sandboxes ended are reaped while no request comes.
const REAP_EVERY_MS: u16 = 1000;
/// Where the sandbox's first process keeps the control socket until the jail's steps
/// take it.
const CTL_FD: RawFd = 4;

/// What the template is told at start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TemplateSpec {
    /// The host uid and gid it runs as once set up: one of its own (no sandbox's).
    pub id: u32,
    /// An existing host folder on which it mounts, in its own mount namespace, a tmpfs of
    /// device nodes: `<devices>/<i>/{null,zero,full,random,urandom}` for sandbox index
    /// `i` below `slots` (a forked sandbox binds its index's, so that no two sandboxes
    /// alive at once share a device inode, nor any with the host).
    pub devices: PathBuf,
    /// How many sandbox indices get device nodes.
    pub slots: usize,
    /// The package set (a host folder holding `python/` and `node/`), shown read-only
    /// at [`PACKAGES`](sandbox_jail::layout::PACKAGES) in the template's mount namespace
    /// before it confines itself, where its sandboxes reach it wherever it is on the host
    /// (see [`ShownFolders`]); with an interpreter, what the template imports has the
    /// paths a sandbox sees.
    #[serde(default)]
    pub packages: Option<PathBuf>,
    /// The interpreter it starts (once confined), from which the sandboxes' Python
    /// programs are forked; none: they are executed, as a jail's are.
    pub python: Option<PythonSpec>,
}

/// The interpreter a template holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PythonSpec {
    /// Its shared library (`libpython3.X.so.1.0`).
    pub library: PathBuf,
    /// The interpreter it stands for (`/usr/bin/python3`): `sys.executable`, and the
    /// only command a loader it replaces may name.
    pub program: String,
    /// Modules imported once, in the template (the runner's warm imports): every
    /// sandbox forked from it has them, their pages shared until written.
    #[serde(default)]
    pub warm_imports: Vec<String>,
}

impl PythonSpec {
    /// The spec of `program` (`/usr/bin/python3`), if this binary can embed it and the
    /// host has its shared library.
    pub fn of(program: &Path) -> Option<PythonSpec> {
        #[cfg(feature = "embedded-python")]
        {
            let library = sandbox_pyembed::shared_library_of(program).ok()??;
            Some(PythonSpec {
                library,
                program: program.to_str()?.to_owned(),
                warm_imports: Vec::new(),
            })
        }
        #[cfg(not(feature = "embedded-python"))]
        {
            let _ = program;
            None
        }
    }
}

/// Why the template stopped.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// Its spec could not be read.
    #[error("bad template spec: {0}")]
    Spec(serde_json::Error),
    /// Reading a request failed.
    #[error("reading a request: {0}")]
    Receive(io::Error),
    /// A step of its own confinement failed.
    #[error("{step}: {source}")]
    Confine {
        /// The step.
        step: &'static str,
        /// What failed underneath.
        source: io::Error,
    },
    /// A step of the jail's failed: a device node, or reading the host.
    #[error(transparent)]
    Jail(#[from] sandbox_jail::JailError),
}

/// One request as it arrived.
struct Request {
    spec: Result<JailSpec, serde_json::Error>,
    channel: OwnedFd,
    stderr: OwnedFd,
    ctl: OwnedFd,
}

/// The template's life: reads its spec (the first message on descriptor 3), then serves
/// requests until end of file. Returns the process's exit code.
pub fn main() -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sandbox-template: {e}");
            1
        }
    }
}

fn serve() -> Result<(), TemplateError> {
    let mut first = vec![0u8; REQUEST_MAX];
    let n = nix::sys::socket::recv(REQUESTS_FD, &mut first, nix::sys::socket::MsgFlags::empty())
        .map_err(|e| TemplateError::Receive(e.into()))?;
    let spec: TemplateSpec = serde_json::from_slice(&first[..n]).map_err(TemplateError::Spec)?;
    // Opened as host root, before the confinement: every sandbox's agent is executed
    // from it (a file every user may execute, as the jail's is).
    let exe = std::fs::File::open("/proc/self/exe").map_err(|source| TemplateError::Confine {
        step: "opening its own binary",
        source,
    })?;
    let exe = OwnedFd::from(exe);
    let shown = confine(&spec)?;
    let host = HostView::read()?;
    if let Some(python) = &spec.python {
        start_python(python);
    }
    announce_ready()?;
    loop {
        reap();
        if !readable(REQUESTS_FD)? {
            continue;
        }
        let Some(request) = receive()? else {
            return Ok(());
        };
        make(request, &host, &shown, &exe);
    }
}

/// Makes the sandbox `request` asks for: clones its first process, which becomes the
/// sandbox (never returns there); here, tells the runner. A failure is written on the
/// sandbox's standard error, where the runner reads why its setup failed.
fn make(request: Request, host: &HostView, shown: &ShownFolders, exe: &OwnedFd) {
    let spec = match &request.spec {
        Ok(spec) => spec,
        Err(e) => return refuse(&request, &format!("sandbox-template: bad jail spec: {e}")),
    };
    match clone_sandbox(spec) {
        Ok(None) => sandbox(&request, spec, host, shown, exe),
        Ok(Some(child)) => {
            if let Err(e) = announce(child, spec, &request.ctl) {
                let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
                refuse(&request, &format!("sandbox-jail: {e}"));
            }
        }
        Err(e) => refuse(&request, &format!("sandbox-jail: {e}")),
    }
}

/// Whether this template's sandboxes probe that they can make a process (see
/// `become_sandbox`): all but those of a template holding Python's interpreter, which
/// fork their loader before they say Ready.
fn probes() -> bool {
    #[cfg(feature = "embedded-python")]
    {
        crate::embedded::held().is_none()
    }
    #[cfg(not(feature = "embedded-python"))]
    {
        true
    }
}

/// Says why on the sandbox's standard error (the runner then finds its control socket
/// closed).
fn refuse(request: &Request, why: &str) {
    let _ = nix::unistd::write(&request.stderr, format!("{why}\n").as_bytes());
}

/// Starts the interpreter; where it cannot be, the sandboxes' Python programs are
/// executed (said on standard error, which the runner logs).
fn start_python(spec: &PythonSpec) {
    #[cfg(feature = "embedded-python")]
    if let Err(e) = crate::embedded::start(spec) {
        eprintln!("sandbox-template: no embedded Python ({e}): Python programs are executed");
    }
    #[cfg(not(feature = "embedded-python"))]
    eprintln!(
        "sandbox-template: this binary cannot embed {}: Python programs are executed",
        spec.program
    );
}

/// Reaps every fork whose sandbox has ended.
fn reap() {
    loop {
        // SAFETY: waitpid with WNOHANG only collects the status of ended children.
        let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}

/// Whether a request (or end of file) waits, within [`REAP_EVERY_MS`].
fn readable(fd: RawFd) -> Result<bool, TemplateError> {
    use nix::poll::{poll, PollFd, PollFlags};
    // SAFETY: `fd` is the request socket, open for the template's whole life.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::new(borrowed, PollFlags::POLLIN)];
    match poll(&mut fds, REAP_EVERY_MS) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(TemplateError::Receive(e.into())),
    }
}

/// The next request; `None` at end of file. A request without its three descriptors is
/// dropped (the runner then sees its sockets close).
fn receive() -> Result<Option<Request>, TemplateError> {
    loop {
        let mut data = vec![0u8; REQUEST_MAX];
        let mut msg = sandbox_jail::fdpass::receive::<3>(REQUESTS_FD, &mut data)
            .map_err(TemplateError::Receive)?;
        if msg.bytes == 0 && msg.fds.is_empty() {
            return Ok(None);
        }
        if msg.fds.len() != 3 || msg.truncated {
            continue;
        }
        let spec = serde_json::from_slice(&data[..msg.bytes]);
        let ctl = msg.fds.pop().expect("three descriptors");
        let stderr = msg.fds.pop().expect("three descriptors");
        let channel = msg.fds.pop().expect("three descriptors");
        return Ok(Some(Request {
            spec,
            channel,
            stderr,
            ctl,
        }));
    }
}

/// The sandbox's first process, just cloned: its descriptors in place, the jail's
/// steps, then the agent, executed. Never returns.
fn sandbox(
    request: &Request,
    spec: &JailSpec,
    host: &HostView,
    shown: &ShownFolders,
    exe: &OwnedFd,
) -> ! {
    let error = match place_descriptors(request, exe) {
        Err(e) => format!("sandbox-template: placing the sandbox's descriptors: {e}"),
        Ok(ctl) => {
            restore_signals();
            match become_sandbox(spec, host, shown.clone(), ctl, probes()) {
                Ok(()) => agent::become_agent(),
                Err(e) => format!("sandbox-jail: {e}"),
            }
        }
    };
    eprintln!("{error}");
    // SAFETY: _exit ends the process at once, without running the template's exit
    // handlers (they belong to the template, not to this copy of it).
    unsafe { libc::_exit(1) }
}

/// Channel on 3, standard error on 2, the control socket on [`CTL_FD`] (returned), the
/// template's binary on [`EXE_FD`], and nothing else above 2: the template's request
/// socket and every other request's descriptors are closed.
fn place_descriptors(request: &Request, exe: &OwnedFd) -> io::Result<OwnedFd> {
    crate::launch::give(&[
        (request.channel.as_raw_fd(), sandbox_jail::CHANNEL_FD),
        (request.stderr.as_raw_fd(), 2),
        (request.ctl.as_raw_fd(), CTL_FD),
        (exe.as_raw_fd(), EXE_FD),
    ])?;
    // SAFETY: close_range only closes descriptors; the ones kept are 0 to 5, and the
    // OwnedFds of the request and the template (all above 5) are never used again: the
    // caller only exits.
    if unsafe { libc::syscall(libc::SYS_close_range, EXE_FD + 1, u32::MAX, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CTL_FD was just made a copy of the control socket, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(CTL_FD) })
}

/// The signal dispositions a process started afresh has: an embedded interpreter
/// changes SIGINT's and ignores SIGXFSZ, which the agent and its programs would inherit
/// across exec (an ignored signal stays ignored).
fn restore_signals() {
    for signal in [libc::SIGINT, libc::SIGXFSZ] {
        // SAFETY: SIG_DFL is a valid disposition for these signals; no handler runs.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
}

/// Tells the runner the template is ready, with its [`Ceilings`].
fn announce_ready() -> Result<(), TemplateError> {
    let message = Ceilings::now().message();
    nix::sys::socket::send(REQUESTS_FD, &message, nix::sys::socket::MsgFlags::empty()).map_err(
        |e| TemplateError::Confine {
            step: "announcing itself",
            source: e.into(),
        },
    )?;
    Ok(())
}

/// The device folder of sandbox index `index` under `devices`.
pub fn devices_of(devices: &Path, index: usize) -> PathBuf {
    devices.join(index.to_string())
}
