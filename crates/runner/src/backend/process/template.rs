//! The runner's side of a template (issue 16; the template itself is sandbox-agent's
//! `template`): started once with the backend, as host root, which it stops being before
//! it reads any request; then asked for each sandbox, the runner doing the steps of
//! [`sandbox_jail::forked`] that need host root (joining the cgroup, writing the id maps).

use nix::sys::socket::MsgFlags;
use sandbox_agent::template::{
    devices_of, Ceilings, PythonSpec, TemplateSpec, AGENT_NAME, TEMPLATE_ARG,
};
use sandbox_jail::{HostIds, JailError, JailSpec};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How long the template may take to set itself up.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of the template's standard error kept for an error message.
const STDERR_CAP: u64 = 4096;

/// Why a template could not be started or asked.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// A socket, pipe or the process could not be made.
    #[error("{0}: {1}")]
    Io(&'static str, std::io::Error),
    /// The sandbox's first processes said why its setup failed.
    #[error("{0}")]
    Said(String),
    /// The template said why it could not start.
    #[error("the template did not start: {0}")]
    Start(String),
    /// The request could not be encoded.
    #[error("encoding the request: {0}")]
    Spec(serde_json::Error),
    /// A step of the exchange that sets the sandbox up failed.
    #[error(transparent)]
    Setup(#[from] JailError),
    /// The task doing the exchange failed.
    #[error("the setup task: {0}")]
    Task(tokio::task::JoinError),
}

/// A running template.
pub struct Template {
    /// The request socket (`SOCK_SEQPACKET`); sends are short, made under the lock.
    requests: Mutex<OwnedFd>,
    /// Killed with the backend (and it dies with the runner anyway).
    _process: Process,
    devices: PathBuf,
    slots: usize,
    shares: Shares,
    /// False once a request could not be sent (the template is gone): sandboxes are then
    /// made by jails.
    alive: AtomicBool,
}

/// Each sandbox's part of the template's [`Ceilings`] (`None`: the jail's default fits
/// any number of sandboxes).
#[derive(Debug, Clone, Copy)]
struct Shares {
    memlock_bytes: Option<u64>,
    sigpending: Option<u64>,
}

impl Shares {
    fn of(ceilings: Ceilings, slots: usize) -> Shares {
        let share = |ceiling: u64, default: u64| {
            let all = default.saturating_mul(slots.max(1) as u64);
            (ceiling < all).then(|| ceiling / slots.max(1) as u64)
        };
        Shares {
            memlock_bytes: share(ceilings.memlock_bytes, sandbox_jail::MEMLOCK_MAX),
            sigpending: share(ceilings.sigpending, sandbox_jail::SIGPENDING_MAX),
        }
    }
}

/// A sandbox the template forked, set up and waiting as its agent.
pub struct Forked {
    /// A pidfd of its first process (PID 1 inside), which lives as long as the sandbox.
    pub leader: OwnedFd,
    /// The agent channel.
    pub channel: std::os::unix::net::UnixStream,
    /// The read end of the sandbox's standard error.
    pub stderr: OwnedFd,
}

impl Template {
    /// Starts a template that runs as host `id` and has device nodes for sandbox
    /// indices below `slots`, mounted (in its own mount namespace) on `devices`, an
    /// existing folder; its sandboxes show the package set `packages` and the host
    /// folders `shared` (the languages'), and execute `agent` as their agent (none: the
    /// runner's binary). Blocks until it is ready (at most [`START_TIMEOUT`]).
    pub fn start(
        id: u32,
        devices: &Path,
        sandboxes: &[HostIds],
        packages: Option<&Path>,
        shared: &[PathBuf],
        python: Option<PythonSpec>,
        agent: Option<&Path>,
    ) -> Result<Template, TemplateError> {
        let slots = sandboxes.len();
        let spec = TemplateSpec {
            id,
            devices: devices.to_owned(),
            slots,
            packages: packages.map(Path::to_owned),
            shared: shared.to_vec(),
            agent: agent.map(Path::to_owned),
            python,
        };
        let spec_json = serde_json::to_string(&spec).map_err(TemplateError::Spec)?;
        let (ours, theirs) = seqpacket_pair()?;
        let theirs_raw = theirs.as_raw_fd();
        let mut cmd = Command::new("/proc/self/exe");
        // Its command line is every sandbox's first process's (no spec on it: the spec
        // comes as the first message).
        cmd.arg0(AGENT_NAME)
            .arg(TEMPLATE_ARG)
            .env_clear()
            // What its interpreter reads at start: the sandboxes' locale and home.
            .env("LANG", "C.UTF-8")
            .env("HOME", sandbox_jail::layout::HOME)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe calls; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || sandbox_jail::channel_to_fd3(theirs_raw));
        }
        let mut process = cmd
            .spawn()
            .map_err(|e| TemplateError::Io("starting the template", e))?;
        drop(theirs);
        let stderr = process.stderr.take();
        let process = Process(process);
        let pid = process.0.id();
        let set_up = send_spec(&ours, spec_json.as_bytes())
            .and_then(|()| map_template_ids(&ours, pid, id, sandboxes))
            .and_then(|()| await_ready(ours));
        match set_up {
            Ok((requests, ceilings)) => {
                if let Some(stderr) = stderr {
                    std::thread::spawn(move || log_stderr(stderr));
                }
                Ok(Template {
                    requests: Mutex::new(requests),
                    _process: process,
                    devices: devices.to_owned(),
                    slots,
                    shares: Shares::of(ceilings, slots),
                    alive: AtomicBool::new(true),
                })
            }
            Err(e) => {
                drop(process);
                let mut said = String::new();
                if let Some(stderr) = stderr {
                    let _ = stderr.take(STDERR_CAP).read_to_string(&mut said);
                }
                let said = said.trim();
                Err(if said.is_empty() {
                    e
                } else {
                    TemplateError::Start(said.to_owned())
                })
            }
        }
    }

    /// Whether the template makes sandbox index `index` (it has device nodes for it, and
    /// is still there).
    pub fn serves(&self, index: usize) -> bool {
        index < self.slots && self.alive()
    }

    /// Makes a sandbox of index `index` from `spec` (its `cgroup_procs` joined by the
    /// runner, not by the sandbox), waiting at most `timeout` at each step.
    pub async fn make(
        &self,
        spec: &JailSpec,
        index: usize,
        timeout: Duration,
    ) -> Result<Forked, TemplateError> {
        let mut spec = spec.clone();
        let cgroup_procs = std::mem::take(&mut spec.cgroup_procs);
        spec.devices = Some(devices_of(&self.devices, index));
        spec.memlock_bytes = self.shares.memlock_bytes;
        spec.sigpending = self.shares.sigpending;
        let body = serde_json::to_vec(&spec).map_err(TemplateError::Spec)?;
        let (channel, channel_theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| TemplateError::Io("making the agent channel", e))?;
        let (stderr, stderr_theirs) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| TemplateError::Io("making the stderr pipe", e.into()))?;
        let (ctl, ctl_theirs) = seqpacket_pair()?;
        set_receive_timeout(&ctl, timeout)?;
        self.send(
            &body,
            [&OwnedFd::from(channel_theirs), &stderr_theirs, &ctl_theirs],
        )?;
        drop((stderr_theirs, ctl_theirs));
        let setup = tokio::task::spawn_blocking(move || {
            sandbox_jail::forked::host_side(&ctl, &cgroup_procs)
        })
        .await
        .map_err(TemplateError::Task)?;
        let leader = match setup {
            Ok(leader) => leader,
            Err(e) => return Err(said_or(&stderr, e.into())),
        };
        Ok(Forked {
            leader,
            channel,
            stderr,
        })
    }

    /// Whether it still makes sandboxes.
    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Makes no more sandboxes: the template failed to make one (`error`, logged), and
    /// jails make them from now on.
    pub fn leave(&self, error: &TemplateError) {
        if self.alive.swap(false, Ordering::Relaxed) {
            tracing::error!(%error, "the template failed to make a sandbox: sandboxes are made by jails from now on");
        }
    }

    fn send(&self, body: &[u8], fds: [&OwnedFd; 3]) -> Result<(), TemplateError> {
        let raw = fds.map(|fd| fd.as_raw_fd());
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let sent = sandbox_jail::fdpass::send(requests.as_raw_fd(), body, &raw);
        if let Err(e) = sent {
            if self.alive.swap(false, Ordering::Relaxed) {
                tracing::error!(error = %e, "the template is gone: sandboxes are made by jails from now on");
            }
            return Err(TemplateError::Io("asking the template", e));
        }
        Ok(())
    }
}

/// What the sandbox's processes wrote on `stderr` before they ended (a failing step
/// says which it was), else `error`.
fn said_or(stderr: &OwnedFd, error: TemplateError) -> TemplateError {
    let _ = nix::fcntl::fcntl(
        stderr,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let mut buf = vec![0u8; STDERR_CAP as usize];
    let n = nix::unistd::read(stderr, &mut buf).unwrap_or(0);
    let said = String::from_utf8_lossy(&buf[..n]).trim().to_owned();
    if said.is_empty() {
        error
    } else {
        TemplateError::Said(said)
    }
}

fn seqpacket_pair() -> Result<(OwnedFd, OwnedFd), TemplateError> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| TemplateError::Io("making a socket pair", e.into()))
}

fn set_receive_timeout(fd: &OwnedFd, timeout: Duration) -> Result<(), TemplateError> {
    let tv = nix::sys::time::TimeVal::new(
        timeout.as_secs() as libc::time_t,
        timeout.subsec_micros() as libc::suseconds_t,
    );
    nix::sys::socket::setsockopt(fd, nix::sys::socket::sockopt::ReceiveTimeout, &tv)
        .map_err(|e| TemplateError::Io("setting a receive timeout", e.into()))
}

/// Sends the template its spec, the first message on its request socket.
fn send_spec(requests: &OwnedFd, spec: &[u8]) -> Result<(), TemplateError> {
    nix::sys::socket::send(
        requests.as_raw_fd(),
        spec,
        nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
    )
    .map_err(|e| TemplateError::Io("sending the template its spec", e.into()))?;
    Ok(())
}

/// Waits for the template's user namespace, and writes its maps: `id` is its root, and
/// each sandbox's two host ids are themselves (gids the same numbers: a root runner's).
fn map_template_ids(
    requests: &OwnedFd,
    pid: u32,
    id: u32,
    sandboxes: &[HostIds],
) -> Result<(), TemplateError> {
    set_receive_timeout(requests, START_TIMEOUT)?;
    let mut byte = [0u8; 1];
    match nix::sys::socket::recv(requests.as_raw_fd(), &mut byte, MsgFlags::empty()) {
        Ok(1) if byte[0] == b'U' => {}
        Ok(_) => return Err(TemplateError::Start("it exited".into())),
        Err(e) => return Err(TemplateError::Io("waiting for the template", e.into())),
    }
    let mut map = format!("0 {id} 1\n");
    for ids in sandboxes {
        map += &format!("{0} {0} 1\n{1} {1} 1\n", ids.root, ids.user);
    }
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    for (file, content) in [("setgroups", "deny"), ("uid_map", &map), ("gid_map", &map)] {
        std::fs::write(proc_dir.join(file), content)
            .map_err(|e| TemplateError::Io("writing the template's id maps", e))?;
    }
    nix::sys::socket::send(requests.as_raw_fd(), b"1", MsgFlags::MSG_NOSIGNAL)
        .map_err(|e| TemplateError::Io("answering the template", e.into()))?;
    Ok(())
}

/// Waits for the template's ready message on `requests`, then returns the socket and
/// the template's ceilings.
fn await_ready(requests: OwnedFd) -> Result<(OwnedFd, Ceilings), TemplateError> {
    let mut message = [0u8; Ceilings::MESSAGE_LEN];
    match nix::sys::socket::recv(requests.as_raw_fd(), &mut message, MsgFlags::empty()) {
        Ok(n) => match Ceilings::from_message(&message[..n]) {
            Some(ceilings) => Ok((requests, ceilings)),
            None => Err(TemplateError::Start("it exited".into())),
        },
        Err(e) => Err(TemplateError::Io("waiting for the template", e.into())),
    }
}

/// Logs what the template writes on its standard error (its own failures; a sandbox's
/// go to that sandbox's pipe).
fn log_stderr(stderr: std::process::ChildStderr) {
    use std::io::BufRead;
    for line in std::io::BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
    {
        tracing::warn!(said = %line, "template stderr");
    }
}

/// The template's process, killed and reaped when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
