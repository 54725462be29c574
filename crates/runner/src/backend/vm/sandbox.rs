//! One VM sandbox, whichever VMM runs it: reaching its agent within the boot timeout
//! (accepting the VMM's connection, reading Ready, preparing the interpreter), failing
//! with what the VMM and the guest's console said, running the job, and destroying the
//! VM with what it left on the host. It keeps what saving it whole takes: the machine
//! it is ([`Machine`]) and the way to the VMM itself ([`Control`]).

use super::qmp::Qmp;
use super::saved::Machine;
use super::tunnel::{Quiesced, Tunnel};
use super::{BootError, VmError};
use crate::backend::archive::{ArchiveRefusal, ArchiveSummary};
use crate::backend::cgroup::Cgroup;
use crate::backend::channel;
use crate::backend::RunOutcome;
use crate::languages::Language;
use crate::live::LiveOutput;
use sandbox_egress::{Egress, SandboxEgress};
use sandbox_protocol::agent::{AgentMessage, FileRequest, Job};
use sandbox_protocol::process::ProcessRequest;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::process::Child;

/// How long the agent may take, past the job's run time ([`Job::run_time`]), to report
/// (`GET /health` publishes it: `limits.answerMarginMs`).
pub const REPORT_GRACE: Duration = Duration::from_secs(10);
/// The most bytes of the console log and the VMM's messages put in an error.
const LOG_TAIL: usize = 2048;

/// What a VM leaves on the host until it is destroyed: its cgroup and its folder.
/// Removed on destroy, and on drop should a sandbox be dropped without it.
pub(super) struct Leftovers {
    pub(super) cgroup: Option<Cgroup>,
    pub(super) dir: Option<PathBuf>,
}

impl Leftovers {
    fn remove(&mut self) {
        if let Some(cgroup) = self.cgroup.take() {
            if let Err(e) = cgroup.kill_and_remove() {
                tracing::error!(error = %e, "VM cgroup left behind");
            }
        }
        if let Some(dir) = self.dir.take() {
            if let Err(e) = fs::remove_dir_all(&dir) {
                tracing::error!(error = %e, dir = %dir.display(), "VM folder left behind");
            }
        }
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        self.remove();
    }
}

/// How the runner reaches a VM's VMM itself, beside the agent's channel: to save it.
#[derive(Debug)]
pub(super) enum Control {
    /// QEMU's QMP connection.
    Qmp(Qmp),
    /// Firecracker's API socket, and the VM's root, where it writes a snapshot.
    Firecracker {
        /// The host path of the API socket.
        api: PathBuf,
        /// The VM's root (its jail's, or its folder).
        root: PathBuf,
        /// Whether the VM runs in the jailer's chroot.
        jailed: bool,
    },
}

/// One warm VM: its VMM process, the channel to its agent, and what to remove.
pub struct VmSandbox {
    pub(super) id: u64,
    pub(super) child: Child,
    pub(super) channel: Option<UnixStream>,
    /// The machine it is, which a save records (`None`: it cannot be saved).
    pub(super) machine: Option<Machine>,
    /// The way to its VMM, for a save (taken by it).
    pub(super) control: Option<Control>,
    /// Its egress port's stream (QEMU), served or only held.
    egress: Option<Box<EgressPort>>,
    leftovers: Leftovers,
}

/// A QEMU VM's egress port, as the runner keeps it.
enum EgressPort {
    /// Without egress: held open (so that QEMU keeps the port connected), never used.
    Held { _open: UnixStream },
    /// Served by the runner's proxy.
    Served(Tunnel),
}

impl VmSandbox {
    /// A VM whose VMM `child` has just started, before its agent is reached.
    pub(super) fn started(id: u64, child: Child, leftovers: Leftovers) -> VmSandbox {
        VmSandbox {
            id,
            child,
            channel: None,
            machine: None,
            control: None,
            egress: None,
            leftovers,
        }
    }

    /// Takes the VM's egress port: served by `egress` where the runner has a proxy,
    /// for `handle` (a resumed tunnel's) or a new sandbox handle, else only held.
    pub(super) fn attach_egress(
        &mut self,
        stream: UnixStream,
        egress: Option<&Egress>,
        handle: Option<SandboxEgress>,
    ) {
        self.egress = Some(Box::new(match egress {
            Some(egress) => {
                let handle = handle.unwrap_or_else(|| egress.sandbox());
                EgressPort::Served(Tunnel::open(egress, handle, stream))
            }
            None => EgressPort::Held { _open: stream },
        }));
    }

    /// The VM sandbox's grant and counters, where its tunnel is served.
    pub fn egress(&self) -> Option<&SandboxEgress> {
        match self.egress.as_deref() {
            Some(EgressPort::Served(tunnel)) => Some(&tunnel.handle),
            _ => None,
        }
    }

    /// Quiesces the tunnel before a save (see [`Tunnel::quiesce`]); what
    /// [`VmSandbox::resume_egress`] takes should the save not happen. A held port stays.
    pub(super) async fn quiesce_egress(&mut self) -> Option<Quiesced> {
        match self.egress.take().map(|port| *port) {
            Some(EgressPort::Served(tunnel)) => tunnel.quiesce().await,
            held => {
                self.egress = held.map(Box::new);
                None
            }
        }
    }

    /// Serves a quiesced tunnel again (a save that did not happen).
    pub(super) fn resume_egress(&mut self, quiesced: Option<Quiesced>) {
        if let Some(quiesced) = quiesced {
            self.egress = Some(Box::new(EgressPort::Served(quiesced.resume())));
        }
    }

    /// Accepts the VMM's connection to the agent's channel; fails early if the VMM
    /// exits.
    pub(super) async fn accept(&mut self, listener: &UnixListener) -> Result<(), VmError> {
        self.channel = Some(self.accept_control(listener).await?);
        Ok(())
    }

    /// Accepts a connection of the VMM on `listener` (its agent's channel, or QMP);
    /// fails early if the VMM exits.
    pub(super) async fn accept_control(
        &mut self,
        listener: &UnixListener,
    ) -> Result<UnixStream, VmError> {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            status = self.child.wait() => {
                return Err(BootError::VmmExited(describe(status)).into());
            }
        };
        let (stream, _) = accepted.map_err(BootError::Accept)?;
        Ok(stream)
    }

    /// Reads the agent's Ready (twice with `prepare`); fails early if the VMM exits.
    pub(super) async fn ready(
        &mut self,
        prepare: Option<&Language>,
        warm_imports: &[String],
    ) -> Result<(), VmError> {
        let channel = self.channel.as_mut().ok_or(VmError::NoChannel)?;
        let ready = async {
            channel::expect_ready(channel).await?;
            match prepare {
                Some(language) => channel::prepare(channel, language, warm_imports).await,
                None => Ok(()),
            }
        };
        tokio::select! {
            ready = ready => ready.map_err(|e| BootError::Handshake(e).into()),
            status = self.child.wait() => {
                Err(BootError::VmmExited(describe(status)).into())
            }
        }
    }

    /// What a boot bounded by `timeout` came to: the sandbox, or the error with what the
    /// VM said (the VM is then destroyed).
    pub(super) async fn booted(
        self,
        outcome: Result<Result<(), VmError>, tokio::time::error::Elapsed>,
        timeout: Duration,
    ) -> Result<VmSandbox, VmError> {
        match outcome {
            Ok(Ok(())) => Ok(self),
            Ok(Err(e)) => Err(self.fail(e).await),
            Err(_) => {
                let e = BootError::NoReady(timeout).into();
                Err(self.fail(e).await)
            }
        }
    }

    /// Destroys a VM that failed to boot, and puts what the VMM and the guest's console
    /// said into the error.
    pub(super) async fn fail(mut self, e: VmError) -> VmError {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        let said = self.last_words();
        self.destroy().await;
        if said.is_empty() {
            e
        } else {
            VmError::Said {
                source: Box::new(e),
                said,
            }
        }
    }

    /// The ends of the VMM's messages and of the guest console.
    fn last_words(&self) -> String {
        let Some(dir) = &self.leftovers.dir else {
            return String::new();
        };
        ["vmm.log", "console.log"]
            .iter()
            .filter_map(|name| fs::read(dir.join(name)).ok())
            .map(|bytes| {
                let tail = &bytes[bytes.len().saturating_sub(LOG_TAIL)..];
                String::from_utf8_lossy(tail).trim().to_owned()
            })
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// Sends the job and waits for the result, its output sent to `live` as it comes
    /// (the guest's init relays the agent's frames while the job runs). The VM is spent:
    /// destroy must follow.
    pub async fn run(
        &mut self,
        job: Job,
        live: Option<&LiveOutput>,
    ) -> Result<RunOutcome, VmError> {
        let before = self.egress().map(SandboxEgress::usage);
        let channel = self.channel.as_mut().ok_or(VmError::NoChannel)?;
        let job = channel::run_job(channel, &job, REPORT_GRACE, live).await?;
        // The agent is alone in its kernel: its count of OOM kills is exact.
        let oom_killed = job.oom_killed.unwrap_or(false);
        Ok(RunOutcome {
            job,
            oom_killed,
            resumed: false,
            egress: crate::backend::run_egress(self.egress(), before),
        })
    }

    /// Does a session's file operation.
    pub async fn file(&mut self, request: FileRequest) -> Result<AgentMessage, VmError> {
        let channel = self.channel.as_mut().ok_or(VmError::NoChannel)?;
        Ok(channel::file(channel, request).await?)
    }

    /// Writes the session archive to the file `to`, at most `max_bytes` of it (the
    /// guest's init thaws the sandbox for it and freezes it after).
    pub async fn pack(
        &mut self,
        to: &Path,
        max_bytes: u64,
    ) -> Result<Result<ArchiveSummary, ArchiveRefusal>, VmError> {
        let channel = self.channel.as_mut().ok_or(VmError::NoChannel)?;
        Ok(channel::pack_to(channel, to, max_bytes).await?)
    }

    /// Restores the session archive in the file `from`.
    pub async fn unpack(
        &mut self,
        from: &Path,
    ) -> Result<Result<ArchiveSummary, ArchiveRefusal>, VmError> {
        let channel = self.channel.as_mut().ok_or(VmError::NoChannel)?;
        Ok(channel::unpack_from(channel, from).await?)
    }

    /// Does a session's process operation.
    pub async fn process(&mut self, request: ProcessRequest) -> Result<AgentMessage, VmError> {
        let channel = self.channel.as_mut().ok_or(VmError::NoChannel)?;
        Ok(channel::process(channel, request).await?)
    }

    /// Kills the VMM, then removes the VM's cgroup and folder.
    pub async fn destroy(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        let mut leftovers = Leftovers {
            cgroup: self.leftovers.cgroup.take(),
            dir: self.leftovers.dir.take(),
        };
        let id = self.id;
        if let Err(e) = tokio::task::spawn_blocking(move || leftovers.remove()).await {
            tracing::error!(vm = id, error = %e, "VM removal task failed");
        }
    }
}

/// How the VMM's process ended, for an error.
pub(super) fn describe(status: io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(e) => e.to_string(),
    }
}
