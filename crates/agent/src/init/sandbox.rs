//! The sandbox inside the guest: the same jail as the process backend's, made by the
//! init for this VM's job (or session), and the relay between the runner and its agent.
//!
//! The init makes a cgroup v2 for the sandbox (the guest kernel's own hierarchy, with
//! the runner's memory, CPU and process limits), then starts this same binary as the
//! jail ([`sandbox_jail::JAIL_ARG`]) with one end of a socketpair as its channel. The
//! jail sets the sandbox up exactly as on a host (namespaces, a minimal root of
//! read-only overlays, masked `/proc`, no `/sys`, seccomp, the sandbox user) and
//! becomes its agent. The init then stands in for the runner towards that agent
//! ([`Jailed`] is the [`Worker`] of the init's exchange with the runner): it forwards
//! Prepare and the Job, relays while the job runs what a streamed job sends (its output,
//! its program's tool calls) up and the calls' answers down (`relay.rs`), and adds to
//! the answer whether the sandbox's cgroup saw an OOM kill, which only it can read.
//!
//! A session's sandbox is frozen between its calls by the init, which relays every call
//! and so knows where each ends: it thaws the sandbox's cgroup before it forwards a
//! session's job or a file operation, and freezes it (waiting until the kernel says
//! every process is) before it hands the answer on. A session archive's operations
//! take several frames: for a Pack, every chunk the agent sends goes on to the runner
//! until its Packed or FileFailed; for an Unpack, every chunk the runner sends goes on
//! to the agent, to the last, then the agent's one answer back. The agent, inside the cgroup, is
//! frozen with the rest; the init, outside, is not.

use super::error::InitError;
use super::relay::relay_job;
use super::settings::Settings;
use crate::agent::{AgentError, LiveOutput, Worker};
use sandbox_archive::Limits;
use sandbox_jail::cgroup::{Cgroup, CgroupLimits, Hierarchy};
use sandbox_jail::layout::{IMAGE_PACKAGES, IMAGE_SHARED_PATHS, SANDBOX_UID};
use sandbox_jail::{HostIds, JailSpec, JAIL_ARG};
use sandbox_protocol::agent::{AgentMessage, FileRequest, Job, Prepare, RunnerMessage};
use sandbox_protocol::frame;
use sandbox_protocol::process::ProcessRequest;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Where the guest's cgroup v2 hierarchy is mounted.
pub(super) const CGROUP_MOUNT: &str = "/sys/fs/cgroup";
/// The instance folder of the sandbox's cgroup (there is one runner per guest: the
/// init).
const INSTANCE: &str = "guest";
/// The guest ids (uids and gids) of sandbox root (the agent) and, 1000 above, of the
/// sandbox user: the guest has no other user but root, so any range above root's will do.
const GUEST_IDS: HostIds = HostIds {
    root: 65_536,
    user: 65_536 + SANDBOX_UID,
};
/// Where the jail mounts its staging tmpfs (an empty folder of the root image, mounted
/// on in the jail's own mount namespace only).
const STAGE_DIR: &str = "/run";
/// Most open files per process, as in the process backend.
const NOFILE: u64 = 1024;

/// The paths the image's languages share into the sandbox, as the image lists them
/// (none when it lists none).
fn shared_paths() -> Vec<std::path::PathBuf> {
    std::fs::read_to_string(IMAGE_SHARED_PATHS)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with('/'))
        .map(Into::into)
        .collect()
}

/// The jailed sandbox of this VM: its cgroup and the channel to its agent.
pub(super) struct Jailed {
    cgroup: Cgroup,
    channel: UnixStream,
    /// The cgroup's OOM kills before the current job (a session runs several).
    oom_kills: u64,
}

impl Jailed {
    /// Makes the cgroup, starts the jail, and waits for its agent's Ready.
    pub(super) fn start(settings: &Settings) -> Result<Jailed, InitError> {
        let hierarchy = Hierarchy::open(Path::new(CGROUP_MOUNT), INSTANCE)?;
        let limits = CgroupLimits {
            memory_bytes: settings.memory_mb * 1024 * 1024,
            cpu_quota_us: settings.cpu_quota_us,
            cpu_period_us: settings.cpu_period_us,
            pids_max: settings.pids_max,
        };
        let cgroup = hierarchy.create("sandbox", &limits)?;
        let tmpfs_bytes = settings.tmpfs_mb * 1024 * 1024;
        let spec = JailSpec {
            cgroup_procs: cgroup.procs_files(),
            stage_dir: STAGE_DIR.into(),
            ids: GUEST_IDS,
            gids: GUEST_IDS,
            unprivileged_owner: true,
            rootless: None,
            nproc: None,
            tmp_bytes: tmpfs_bytes,
            home_bytes: tmpfs_bytes,
            nofile: NOFILE,
            // Above the tmpfs size, so that filling /tmp ends in ENOSPC, not SIGXFSZ.
            fsize_bytes: tmpfs_bytes.saturating_mul(2),
            packages: Path::new(IMAGE_PACKAGES)
                .is_dir()
                .then(|| IMAGE_PACKAGES.into()),
            // Inline dependencies are resolved on the runner's host, which cannot mount
            // into a guest: the runner refuses them for VM sandboxes.
            deps: None,
            devices: None,
            memlock_bytes: None,
            sigpending: None,
            shared: shared_paths(),
        };
        // The jail is never waited for: the VM ends with its job.
        let mut channel = spawn_jail(&spec)?;
        match frame::read::<_, AgentMessage>(&mut channel)? {
            Some(AgentMessage::Ready) => Ok(Jailed {
                cgroup,
                channel,
                oom_kills: 0,
            }),
            Some(other) => Err(InitError::Jail(format!(
                "the sandbox's agent said {other:?} instead of Ready"
            ))),
            None => Err(InitError::Jail(
                "the jail ended before its agent was ready (its error is above)".into(),
            )),
        }
    }

    /// The agent's next answer, or why there is none.
    fn answer(&mut self) -> Result<AgentMessage, String> {
        match frame::read::<_, AgentMessage>(&mut self.channel) {
            Ok(Some(message)) => Ok(message),
            Ok(None) => Err("the sandbox's agent ended without answering".into()),
            Err(e) => Err(format!("reading the sandbox's agent: {e}")),
        }
    }

    fn send(&mut self, message: &RunnerMessage) -> Result<(), String> {
        frame::write(&mut self.channel, message)
            .map_err(|e| format!("writing to the sandbox's agent: {e}"))
    }

    /// Lets the sandbox's processes run for a session's call.
    fn thaw(&self) -> Result<(), String> {
        self.cgroup
            .freezer()
            .thaw()
            .map_err(|e| format!("thawing the sandbox: {e}"))
    }

    /// Freezes the sandbox's processes until the session's next call.
    fn freeze(&self) -> Result<(), String> {
        self.cgroup
            .freezer()
            .freeze()
            .map_err(|e| format!("freezing the sandbox between calls: {e}"))
    }

    /// Forwards the job to the agent, relays what it sends while the job runs (its
    /// output and calls to `live`, the calls' answers back, `relay.rs`); its answer, with
    /// whether the cgroup saw an OOM kill meanwhile.
    fn relay(&mut self, job: &Job, live: &mut dyn LiveOutput) -> AgentMessage {
        let before = self.oom_kills;
        match relay_job(&mut self.channel, job, live) {
            Ok(AgentMessage::Done(mut outcome)) => {
                let now = self.cgroup.oom_kills().ok();
                outcome.oom_killed = now.map(|n| n > before);
                self.oom_kills = now.unwrap_or(before);
                AgentMessage::Done(outcome)
            }
            Ok(AgentMessage::Ready) => AgentMessage::Failed {
                message: "the sandbox's agent answered a Job with Ready".into(),
            },
            Ok(failed) => failed,
            Err(message) => AgentMessage::Failed { message },
        }
    }
}

impl Worker for Jailed {
    /// Has the agent prepare the interpreter and rehearse its side of a job's exchange
    /// (see [`Prepare::rehearse`]); then rehearses the init's own side.
    fn prepare(&mut self, request: &Prepare) -> Result<(), String> {
        let request = Prepare {
            rehearse: true,
            ..request.clone()
        };
        self.send(&RunnerMessage::Prepare(request))?;
        match self.answer()? {
            AgentMessage::Ready => {
                crate::agent::rehearsal::rehearse();
                Ok(())
            }
            AgentMessage::Failed { message } => Err(message),
            other => Err(format!(
                "the sandbox's agent answered a Prepare with {other:?}"
            )),
        }
    }

    /// A file operation is a session's call: the sandbox is thawed for it.
    fn file(&mut self, request: &FileRequest) -> AgentMessage {
        match self
            .thaw()
            .and_then(|()| self.send(&RunnerMessage::File(request.clone())))
            .and_then(|()| self.answer())
            .and_then(|answer| self.freeze().map(|()| answer))
        {
            Ok(answer) => answer,
            Err(message) => AgentMessage::Failed { message },
        }
    }

    /// A session's call, as a file operation is: the agent's chunks go on to the runner
    /// as they come, then its answer.
    fn pack<C: Read + Write>(&mut self, max_bytes: u64, channel: &mut C) -> Result<(), AgentError> {
        let request = RunnerMessage::File(FileRequest::Pack { max_bytes });
        let mut next = self
            .thaw()
            .and_then(|()| self.send(&request))
            .and_then(|()| self.answer());
        loop {
            let answer = match next {
                Ok(chunk @ AgentMessage::ArchiveChunk { .. }) => {
                    frame::write(channel, &chunk)?;
                    next = self.answer();
                    continue;
                }
                Ok(answer) => self.freeze().map(|()| answer).unwrap_or_else(failed),
                Err(message) => failed(message),
            };
            frame::write(channel, &answer)?;
            return Ok(());
        }
    }

    /// A session's call, as a file operation is: every chunk the runner sends goes on
    /// to the agent (and is read to the last, also when the agent cannot take it, so
    /// that the runner's channel stays in step), then the agent's answer back.
    fn unpack<C: Read + Write>(
        &mut self,
        limits: Limits,
        channel: &mut C,
    ) -> Result<(), AgentError> {
        let request = RunnerMessage::File(FileRequest::Unpack {
            max_bytes: limits.max_bytes,
            max_entries: limits.max_entries,
        });
        let mut relayed = self.thaw().and_then(|()| self.send(&request));
        loop {
            match frame::read::<_, RunnerMessage>(channel)? {
                Some(RunnerMessage::File(chunk @ FileRequest::UnpackChunk { .. })) => {
                    let last = matches!(chunk, FileRequest::UnpackChunk { last: true, .. });
                    if relayed.is_ok() {
                        relayed = self.send(&RunnerMessage::File(chunk));
                    }
                    if last {
                        break;
                    }
                }
                Some(_) => {
                    return Err(AgentError::OutOfStep(
                        "another request in the middle of an unpack".into(),
                    ))
                }
                None => return Ok(()),
            }
        }
        let answer = relayed
            .and_then(|()| self.answer())
            .and_then(|answer| self.freeze().map(|()| answer));
        frame::write(channel, &answer.unwrap_or_else(failed))?;
        Ok(())
    }

    /// A process operation is a session's call: the sandbox is thawed for it, and
    /// frozen again after unless processes of the API run.
    fn process(&mut self, request: &ProcessRequest) -> AgentMessage {
        match self
            .thaw()
            .and_then(|()| self.send(&RunnerMessage::Process(request.clone())))
            .and_then(|()| self.answer())
        {
            Ok(answer @ AgentMessage::Process { running: 0, .. }) => match self.freeze() {
                Ok(()) => answer,
                Err(message) => AgentMessage::Failed { message },
            },
            Ok(answer) => answer,
            Err(message) => AgentMessage::Failed { message },
        }
    }

    /// A streamed job's output and its program's calls go to `live` as they come.
    fn run(&mut self, job: &Job, live: &mut dyn LiveOutput) -> AgentMessage {
        if job.session {
            if let Err(message) = self.thaw() {
                return AgentMessage::Failed { message };
            }
        }
        let answer = self.relay(job, live);
        match answer {
            AgentMessage::Done(ref outcome) if job.session && outcome.processes_running == 0 => {
                match self.freeze() {
                    Ok(()) => answer,
                    Err(message) => AgentMessage::Failed { message },
                }
            }
            _ => answer,
        }
    }
}

/// The answer that says the sandbox failed.
fn failed(message: String) -> AgentMessage {
    AgentMessage::Failed { message }
}

/// Starts this binary as the jail, with an empty environment, the channel on
/// [`sandbox_jail::CHANNEL_FD`] and standard error on the console (where the runner reads the VM's
/// last words if the jail fails).
fn spawn_jail(spec: &JailSpec) -> Result<UnixStream, InitError> {
    let spec_json = serde_json::to_string(spec).map_err(|e| InitError::Jail(e.to_string()))?;
    let (ours, theirs) = UnixStream::pair().map_err(InitError::Spawn)?;
    let theirs = OwnedFd::from(theirs);
    let theirs_raw = theirs.as_raw_fd();
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg(JAIL_ARG)
        .arg(spec_json)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe calls; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || sandbox_jail::channel_to_fd3(theirs_raw));
    }
    cmd.spawn().map_err(InitError::Spawn)?;
    drop(theirs);
    Ok(ours)
}
