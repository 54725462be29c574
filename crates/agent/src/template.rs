//! A template (issue 16): a long-lived process the runner starts once, which makes each
//! sandbox from a fork of itself instead of a fresh jail process, so that what every
//! sandbox would repeat is done once.
//!
//! The runner starts it as host root, as `sandbox-agent __sandbox-template` (its binary,
//! the command line every sandbox's first process shows), with an empty environment and
//! a `SOCK_SEQPACKET` socket as descriptor 3. The first message on it is the template's
//! [`TemplateSpec`]; the template confines itself ([`confine`]) before it reads anything
//! else: mount, network, IPC and UTS namespaces of its own (made as host root, so it
//! cannot change them), then a host uid of its own (no capability on the host), then a
//! user namespace of its own, whose maps the runner writes: the template's uid is its
//! root, and every sandbox's two host ids are mapped to themselves. So the template can
//! take a sandbox's host identity (to make that sandbox's user namespace as it, which
//! then owns it, as with a jail) and no other host id: never host root. Each later message asks for one sandbox: the sandbox's [`JailSpec`] as
//! JSON, with three descriptors: the agent channel, the sandbox's standard error, and its
//! control socket. The template forks; the fork (the sandbox's leader) puts the channel
//! on descriptor 3 and standard error on 2, closes everything else the template held, and
//! takes the steps of [`sandbox_jail::forked`], the runner doing the privileged ones; the
//! sandbox's first process then serves as its agent, in-process, exactly as the agent a
//! jail executes. The template holds no secret (its environment is empty and it reads
//! nothing but its spec and the requests), so a fork of it has none.
//!
//! End of file on descriptor 3 ends the template; its forks end with their sandboxes.

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{setresgid, setresuid, Gid, Uid};
use sandbox_jail::forked::{fork_jail, Role};
use sandbox_jail::JailSpec;
use serde::{Deserialize, Serialize};
use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// The first argument that selects the template in a multicall binary.
pub const TEMPLATE_ARG: &str = "__sandbox-template";
/// The name the template is started under (its `argv[0]`): every sandbox's first
/// process is a fork of it, and shows its command line.
pub const AGENT_NAME: &str = "sandbox-agent";
/// The descriptor requests arrive on.
const REQUESTS_FD: RawFd = 3;
/// The largest request read (a jail spec is a few hundred bytes).
const REQUEST_MAX: usize = 64 * 1024;
/// How often, at most, forks whose sandboxes ended are reaped while no request comes.
const REAP_EVERY_MS: u16 = 1000;
/// Where the leader keeps the control socket until the jail's steps take it.
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
    /// The package set (a host folder holding `python/`), shown read-only at
    /// [`PACKAGES`](sandbox_jail::layout::PACKAGES) in the template's mount namespace, as
    /// in every sandbox: what the template imports has the paths a sandbox sees.
    #[serde(default)]
    pub packages: Option<PathBuf>,
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
                packages: None,
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
    /// fork(2) failed.
    #[error("fork: {0}")]
    Fork(io::Error),
    /// A step of its own confinement failed.
    #[error("{step}: {source}")]
    Confine {
        /// The step.
        step: &'static str,
        /// What failed underneath.
        source: io::Error,
    },
    /// A device node could not be made.
    #[error(transparent)]
    Device(#[from] sandbox_jail::JailError),
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
    confine(&spec)?;
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
        // SAFETY: this process has one thread (the runner starts it, and nothing in it
        // starts another), so the child is a whole copy of it.
        match unsafe { libc::fork() } {
            -1 => return Err(TemplateError::Fork(io::Error::last_os_error())),
            0 => leader(request),
            _ => drop(request),
        }
    }
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
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    loop {
        let mut data = vec![0u8; REQUEST_MAX];
        let mut space = nix::cmsg_space!([RawFd; 3]);
        let mut iov = [IoSliceMut::new(&mut data)];
        let msg = match recvmsg::<()>(
            REQUESTS_FD,
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => msg,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(TemplateError::Receive(e.into())),
        };
        let (bytes, truncated) = (msg.bytes, msg.flags.contains(MsgFlags::MSG_TRUNC));
        let mut fds = Vec::new();
        for cmsg in msg.cmsgs().map_err(|e| TemplateError::Receive(e.into()))? {
            if let ControlMessageOwned::ScmRights(received) = cmsg {
                fds.extend(received);
            }
        }
        // SAFETY: each descriptor arrived with the message and nothing else owns it.
        let mut fds: Vec<OwnedFd> = fds
            .into_iter()
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect();
        if bytes == 0 && fds.is_empty() {
            return Ok(None);
        }
        if fds.len() != 3 || truncated {
            continue;
        }
        let spec = serde_json::from_slice(&data[..bytes]);
        let ctl = fds.pop().expect("three descriptors");
        let stderr = fds.pop().expect("three descriptors");
        let channel = fds.pop().expect("three descriptors");
        return Ok(Some(Request {
            spec,
            channel,
            stderr,
            ctl,
        }));
    }
}

/// The fork: its descriptors in place, the jail's steps, then the agent (in the
/// sandbox's first process) or the wait for it (in the leader). Never returns.
fn leader(request: Request) -> ! {
    let code = match place_descriptors(&request) {
        Err(e) => {
            eprintln!("sandbox-template: placing the sandbox's descriptors: {e}");
            1
        }
        Ok(ctl) => match request.spec {
            Err(e) => {
                eprintln!("sandbox-template: bad jail spec: {e}");
                1
            }
            Ok(spec) => {
                restore_signals();
                match fork_jail(&spec, ctl) {
                    Ok(Role::Leader(code)) => code,
                    Ok(Role::Agent) => crate::multicall::jailed_agent(),
                    Err(e) => {
                        eprintln!("sandbox-jail: {e}");
                        1
                    }
                }
            }
        },
    };
    // SAFETY: _exit ends the process at once, without running the template's exit
    // handlers (they belong to the template, not to this copy of it).
    unsafe { libc::_exit(code) }
}

/// Channel on 3, standard error on 2, the control socket on [`CTL_FD`] (returned), and
/// nothing else above 2: the template's request socket and every other request's
/// descriptors are closed. Each is first copied above every target, so that placing one
/// never overwrites another still to be placed.
fn place_descriptors(request: &Request) -> io::Result<OwnedFd> {
    let pairs = [
        (request.channel.as_raw_fd(), sandbox_jail::CHANNEL_FD),
        (request.stderr.as_raw_fd(), 2),
        (request.ctl.as_raw_fd(), CTL_FD),
    ];
    let mut copies = [0; 3];
    for (copy, (from, _)) in copies.iter_mut().zip(pairs) {
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) takes descriptors and touches no memory.
        *copy = unsafe { libc::fcntl(from, libc::F_DUPFD_CLOEXEC, 10) };
        if *copy < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    for (copy, (_, to)) in copies.iter().zip(pairs) {
        // SAFETY: dup2 takes descriptors and touches no memory.
        if unsafe { libc::dup2(*copy, to) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: close_range only closes descriptors; the ones kept are 0 to 4, and the
    // OwnedFds of the request (all above 4) are never used again: the caller only exits.
    if unsafe { libc::syscall(libc::SYS_close_range, CTL_FD + 1, u32::MAX, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CTL_FD was just made a copy of the control socket, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(CTL_FD) })
}

/// The signal dispositions a freshly executed agent has: an embedded interpreter
/// changes SIGINT's and ignores SIGXFSZ, which programs would inherit across exec.
fn restore_signals() {
    for signal in [libc::SIGINT, libc::SIGXFSZ] {
        // SAFETY: SIG_DFL is a valid disposition for these signals; no handler runs.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
}

/// Started as host root: takes mount, network, IPC and UTS namespaces of its own, makes
/// the device nodes, then becomes `spec.id` for good (which clears every capability),
/// with no_new_privs, dying with the runner.
fn confine(spec: &TemplateSpec) -> Result<(), TemplateError> {
    let step = |step: &'static str| {
        move |e: nix::Error| TemplateError::Confine {
            step,
            source: e.into(),
        }
    };
    let namespaces = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    unshare(namespaces).map_err(step("taking namespaces of its own"))?;
    // The host's later mounts (a program's inline dependencies) still propagate in.
    let slave = MsFlags::MS_REC | MsFlags::MS_SLAVE;
    mount(None::<&str>, "/", None::<&str>, slave, None::<&str>)
        .map_err(step("making its mounts slaves"))?;
    make_devices(spec)?;
    make_home(spec.id)?;
    if let Some(packages) = spec.python.as_ref().and_then(|p| p.packages.as_ref()) {
        show_packages(packages)?;
    }
    lift_shared_rlimits()?;
    nix::unistd::setgroups(&[]).map_err(step("dropping supplementary groups"))?;
    let (uid, gid) = (Uid::from_raw(spec.id), Gid::from_raw(spec.id));
    setresgid(gid, gid, gid).map_err(step("taking its gid"))?;
    setresuid(uid, uid, uid).map_err(step("taking its uid"))?;
    unshare(CloneFlags::CLONE_NEWUSER).map_err(step("taking a user namespace of its own"))?;
    exchange(b'U', "asking the runner for its id maps")?;
    nix::sys::prctl::set_no_new_privs().map_err(step("setting no_new_privs"))?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(step("dying with the runner"))
}

/// A tmpfs on `spec.devices` (in the template's mount namespace only), with a folder of
/// device nodes per sandbox index.
fn make_devices(spec: &TemplateSpec) -> Result<(), TemplateError> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    let options = format!("size=64k,nr_inodes={},mode=0755", 16 + spec.slots * 8);
    mount(
        Some("tmpfs"),
        &spec.devices,
        Some("tmpfs"),
        flags,
        Some(options.as_str()),
    )
    .map_err(|e| TemplateError::Confine {
        step: "mounting the device nodes' tmpfs",
        source: e.into(),
    })?;
    for index in 0..spec.slots {
        let dir = spec.devices.join(index.to_string());
        std::fs::create_dir(&dir).map_err(|source| TemplateError::Confine {
            step: "making a device folder",
            source,
        })?;
        for name in sandbox_jail::rootfs::DEVICES {
            sandbox_jail::rootfs::make_device(name, &dir.join(name))?;
        }
    }
    Ok(())
}

/// A tmpfs on `/home` (in the template's mount namespace: the host's homes are hidden
/// from it) holding the sandboxes' home folder, the template's uid's alone: its
/// interpreter's `HOME` is then the path every sandbox's is (matplotlib keeps the
/// folders it found at import, and a forked program keeps what the template found).
fn make_home(id: u32) -> Result<(), TemplateError> {
    let failed =
        |step: &'static str| move |source: io::Error| TemplateError::Confine { step, source };
    let home = Path::new(sandbox_jail::layout::HOME);
    let parent = home.parent().unwrap_or(Path::new("/home"));
    std::fs::create_dir_all(parent).map_err(failed("making /home"))?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount(
        Some("tmpfs"),
        parent,
        Some("tmpfs"),
        flags,
        Some("size=16m,mode=0755"),
    )
    .map_err(|e| failed("mounting its /home")(e.into()))?;
    std::fs::create_dir(home).map_err(failed("making its home"))?;
    std::os::unix::fs::chown(home, Some(id), Some(id))
        .map_err(failed("making its home its own"))?;
    let private = std::os::unix::fs::PermissionsExt::from_mode(0o700);
    std::fs::set_permissions(home, private).map_err(failed("making its home private"))
}

/// The package set `packages` read-only at the sandboxes' path, in the template's mount
/// namespace. The mount point is made on the host if missing (an empty folder).
fn show_packages(packages: &Path) -> Result<(), TemplateError> {
    let target = Path::new(sandbox_jail::layout::PACKAGES);
    let failed =
        |step: &'static str| move |source: io::Error| TemplateError::Confine { step, source };
    std::fs::create_dir_all(target).map_err(failed("making the package set's mount point"))?;
    let bind = MsFlags::MS_BIND | MsFlags::MS_REC;
    mount(Some(packages), target, None::<&str>, bind, None::<&str>)
        .map_err(|e| failed("showing the package set")(e.into()))?;
    let read_only = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    mount(None::<&str>, target, None::<&str>, read_only, None::<&str>)
        .map_err(|e| failed("making the package set read-only")(e.into()))
}

/// The per-user limits the kernel also counts at a user namespace's owner, lifted for
/// the template (as root, before it makes its user namespace): what the sandboxes make
/// is counted, above their own namespaces, against the template's uid, with these as
/// ceilings, shared by all of them. Where root may not raise a hard limit (no
/// CAP_SYS_RESOURCE), the soft one rises to it, and the runner gives each sandbox a
/// share of what the ceiling is (see [`Ceilings`]).
fn lift_shared_rlimits() -> Result<(), TemplateError> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
    for resource in [
        Resource::RLIMIT_NPROC,
        Resource::RLIMIT_SIGPENDING,
        Resource::RLIMIT_MEMLOCK,
        Resource::RLIMIT_MSGQUEUE,
    ] {
        let lifted = setrlimit(resource, RLIM_INFINITY, RLIM_INFINITY).or_else(|_| {
            let (_, hard) = getrlimit(resource)?;
            setrlimit(resource, hard, hard)
        });
        lifted.map_err(|e| TemplateError::Confine {
            step: "lifting its per-user rlimits",
            source: e.into(),
        })?;
    }
    Ok(())
}

/// The template's ceilings of the per-user counts its sandboxes share above their own
/// namespaces (`u64::MAX`: none), which it reports when ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    /// Locked memory, bytes.
    pub memlock_bytes: u64,
    /// Queued signals.
    pub sigpending: u64,
}

impl Ceilings {
    /// The length of the ready message: `R` and the two ceilings.
    pub const MESSAGE_LEN: usize = 17;

    fn now() -> Ceilings {
        use nix::sys::resource::{getrlimit, Resource};
        let soft = |r| getrlimit(r).map_or(0, |(soft, _)| soft);
        Ceilings {
            memlock_bytes: soft(Resource::RLIMIT_MEMLOCK),
            sigpending: soft(Resource::RLIMIT_SIGPENDING),
        }
    }

    fn message(&self) -> [u8; Self::MESSAGE_LEN] {
        let mut message = [0u8; Self::MESSAGE_LEN];
        message[0] = b'R';
        message[1..9].copy_from_slice(&self.memlock_bytes.to_le_bytes());
        message[9..].copy_from_slice(&self.sigpending.to_le_bytes());
        message
    }

    /// The ceilings of a ready message; `None` if it is not one.
    pub fn from_message(message: &[u8]) -> Option<Ceilings> {
        if message.len() != Self::MESSAGE_LEN || message[0] != b'R' {
            return None;
        }
        let number = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().unwrap_or_default());
        Some(Ceilings {
            memlock_bytes: number(&message[1..9]),
            sigpending: number(&message[9..]),
        })
    }
}

/// Sends `tag` to the runner and waits for its answer (one byte, `1`).
fn exchange(tag: u8, step: &'static str) -> Result<(), TemplateError> {
    use nix::sys::socket::{recv, send, MsgFlags};
    let failed = |source: io::Error| TemplateError::Confine { step, source };
    send(REQUESTS_FD, &[tag], MsgFlags::empty()).map_err(|e| failed(e.into()))?;
    let mut byte = [0u8; 1];
    match recv(REQUESTS_FD, &mut byte, MsgFlags::empty()) {
        Ok(1) if byte[0] == b'1' => Ok(()),
        Ok(_) => Err(failed(io::ErrorKind::UnexpectedEof.into())),
        Err(e) => Err(failed(e.into())),
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
