//! Backends: the ways a sandbox can be made. Each makes sandboxes ready to the point
//! where the agent waits for its job; a sandbox runs one job and is destroyed.
//!
//! Dispatch is by enum, not trait object: there are few backends, and each has its
//! own configuration.

pub use sandbox_jail::cgroup;
pub mod archive;
pub mod channel;
pub mod process;
pub mod vm;

pub use archive::{ArchiveRefusal, ArchiveSummary};

use crate::live::LiveOutput;
use sandbox_protocol::agent::{AgentMessage, FileRequest, Job, JobOutcome};
use sandbox_protocol::process::ProcessRequest;
use sandbox_protocol::Lang;
use std::path::Path;

/// How one job ended: what the agent reported, and what the host saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The agent's report.
    pub job: JobOutcome,
    /// The out-of-memory killer ended a process of the run.
    pub oom_killed: bool,
    /// A session's run that woke it from its pause.
    pub resumed: bool,
    /// What the run did through the runner's proxy, when it did anything there.
    pub egress: Option<sandbox_protocol::api::EgressUsage>,
}

/// A run's use of the proxy since `before` (the sandbox's counters when it began), as
/// its answer says it; `None` when it used none, or the sandbox has no proxy.
pub(crate) fn run_egress(
    handle: Option<&sandbox_egress::SandboxEgress>,
    before: Option<sandbox_egress::Usage>,
) -> Option<sandbox_protocol::api::EgressUsage> {
    let usage = handle
        .zip(before)
        .map(|(e, before)| e.usage().since(&before))?;
    (!usage.is_empty()).then_some(sandbox_protocol::api::EgressUsage {
        connections: usage.connections,
        bytes_in: usage.bytes_in,
        bytes_out: usage.bytes_out,
        refused: usage.refused,
    })
}

/// Why a sandbox could not be made or could not run its job.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The process backend failed.
    #[error(transparent)]
    Process(#[from] process::ProcessError),
    /// The VM backend failed.
    #[error(transparent)]
    Vm(#[from] vm::VmError),
    /// A VM sandbox cannot be given inline dependencies (they are on the runner's host,
    /// which cannot mount into a guest); the runner refuses them before a run.
    #[error("a VM sandbox cannot be given inline dependencies")]
    VmDeps,
    /// The process backend saves no sandbox whole, so it restores none.
    #[error(
        "the process backend cannot restore a saved sandbox (it keeps a session's files only)"
    )]
    NoRestore,
}

/// A resolved set of inline dependencies, for a sandbox to mount before its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepsMount {
    /// The set's key (its folder's name, inside and out).
    pub key: String,
    /// Its folder on the host.
    pub source: std::path::PathBuf,
}

/// A backend in use.
pub enum Backend {
    /// Linux namespaces, cgroups and seccomp around a process tree.
    Process(Box<process::ProcessBackend>),
    /// A microVM per sandbox.
    Vm(Box<vm::VmBackend>),
}

/// A sandbox, ready for its one job.
pub enum Sandbox {
    /// A process-backend sandbox.
    Process(process::ProcessSandbox),
    /// A VM-backend sandbox.
    Vm(vm::VmSandbox),
}

impl Backend {
    /// The name reported by `/health` and in logs.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Process(_) => "process",
            Backend::Vm(_) => "vm",
        }
    }

    /// Makes a sandbox and waits until its agent is ready, with the interpreter of
    /// `prepare` started ahead when one is given; with `warm`, a Python one holds the
    /// warm imports (forked from the template that imported them, or importing them
    /// while it waits), without it is lean (a VM's always imports them: its boot takes
    /// longer).
    pub async fn create(&self, prepare: Option<Lang>, warm: bool) -> Result<Sandbox, BackendError> {
        match self {
            Backend::Process(b) => Ok(Sandbox::Process(b.create(prepare, warm).await?)),
            Backend::Vm(b) => Ok(Sandbox::Vm(b.create(prepare, warm).await?)),
        }
    }

    /// A sandbox restored from what [`Sandbox::save`] wrote in `dir` (a VM; the process
    /// backend saves none).
    pub async fn restore(&self, dir: &Path) -> Result<Sandbox, BackendError> {
        match self {
            Backend::Process(_) => Err(BackendError::NoRestore),
            Backend::Vm(b) => Ok(Sandbox::Vm(b.restore(dir).await?)),
        }
    }

    /// Kills every process of every sandbox of this backend (their runs fail at once).
    pub fn kill_all(&self) {
        match self {
            Backend::Process(b) => b.kill_all(),
            Backend::Vm(b) => b.kill_all(),
        }
    }

    /// Releases what the backend holds on the host (at shutdown, after every
    /// sandbox is destroyed).
    pub fn shutdown(&self) {
        match self {
            Backend::Process(b) => b.shutdown(),
            Backend::Vm(b) => b.shutdown(),
        }
    }
}

impl Sandbox {
    /// Runs the job, its output sent to `live` as it comes (a VM's too: its init relays
    /// the agent's frames while the job runs). The sandbox is spent
    /// whatever happened: [`destroy`](Self::destroy) must follow (it may, after the
    /// answer is out).
    pub async fn run(
        &mut self,
        job: Job,
        live: Option<LiveOutput>,
    ) -> Result<RunOutcome, BackendError> {
        match self {
            Sandbox::Process(s) => Ok(s.run(job, live.as_ref()).await?),
            Sandbox::Vm(s) => Ok(s.run(job, live.as_ref()).await?),
        }
    }

    /// Mounts a set of inline dependencies read-only in the sandbox; the folder it
    /// shows at inside.
    pub async fn add_deps(&mut self, deps: &DepsMount) -> Result<String, BackendError> {
        match self {
            Sandbox::Process(s) => Ok(s.add_deps(&deps.key, &deps.source).await?),
            Sandbox::Vm(_) => Err(BackendError::VmDeps),
        }
    }

    /// Does a session's file operation in the sandbox.
    pub async fn file(&mut self, request: FileRequest) -> Result<AgentMessage, BackendError> {
        match self {
            Sandbox::Process(s) => Ok(s.file(request).await?),
            Sandbox::Vm(s) => Ok(s.file(request).await?),
        }
    }

    /// Writes the session's files as a session archive to the file `to` (see
    /// [`PooledSandbox::pack`](crate::pool::PooledSandbox::pack)).
    pub async fn pack(
        &mut self,
        to: &Path,
        max_bytes: u64,
    ) -> Result<Result<ArchiveSummary, ArchiveRefusal>, BackendError> {
        match self {
            Sandbox::Process(s) => Ok(s.pack(to, max_bytes).await?),
            Sandbox::Vm(s) => Ok(s.pack(to, max_bytes).await?),
        }
    }

    /// Restores a session archive into the sandbox (see
    /// [`PooledSandbox::unpack`](crate::pool::PooledSandbox::unpack)).
    pub async fn unpack(
        &mut self,
        from: &Path,
    ) -> Result<Result<ArchiveSummary, ArchiveRefusal>, BackendError> {
        match self {
            Sandbox::Process(s) => Ok(s.unpack(from).await?),
            Sandbox::Vm(s) => Ok(s.unpack(from).await?),
        }
    }

    /// Does a session's process operation in the sandbox.
    pub async fn process(&mut self, request: ProcessRequest) -> Result<AgentMessage, BackendError> {
        match self {
            Sandbox::Process(s) => Ok(s.process(request).await?),
            Sandbox::Vm(s) => Ok(s.process(request).await?),
        }
    }

    /// Freezes every process of the sandbox with the cgroup freezer until
    /// [`thaw`](Self::thaw) (a session between its calls). A VM's init freezes the
    /// guest's sandbox itself after each call it relays (and thaws it before the next):
    /// nothing to do here for one.
    pub async fn freeze(&mut self) -> Result<(), BackendError> {
        match self {
            Sandbox::Process(s) => Ok(s.freeze().await?),
            Sandbox::Vm(_) => Ok(()),
        }
    }

    /// Lets the processes [`freeze`](Self::freeze) froze run again.
    pub async fn thaw(&mut self) -> Result<(), BackendError> {
        match self {
            Sandbox::Process(s) => Ok(s.thaw().await?),
            Sandbox::Vm(_) => Ok(()),
        }
    }

    /// Saves the whole sandbox into `dir` (see
    /// [`PooledSandbox::save`](crate::pool::PooledSandbox::save)): a VM's memory and
    /// devices; `None` for a process sandbox, which is left as it was.
    pub async fn save(&mut self, dir: &Path) -> Result<Option<u64>, BackendError> {
        match self {
            Sandbox::Process(_) => Ok(None),
            Sandbox::Vm(s) => Ok(s.save(dir).await?),
        }
    }

    /// Kills every process of the sandbox and releases what it holds on the host.
    pub async fn destroy(self) {
        match self {
            Sandbox::Process(s) => s.destroy().await,
            Sandbox::Vm(s) => s.destroy().await,
        }
    }
}
