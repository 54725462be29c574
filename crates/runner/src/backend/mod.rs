//! Backends: the ways a sandbox can be made. Each makes sandboxes ready to the point
//! where the agent waits for its job; a sandbox runs one job and is destroyed.
//!
//! Dispatch is by enum, not trait object: there are few backends, and each has its
//! own configuration.

pub mod process;

use sandbox_protocol::agent::{Job, JobOutcome};
use sandbox_protocol::Lang;

/// How one job ended: what the agent reported, and what the host saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The agent's report.
    pub job: JobOutcome,
    /// The out-of-memory killer ended a process of the run.
    pub oom_killed: bool,
}

/// Why a sandbox could not be made or could not run its job.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The process backend failed.
    #[error(transparent)]
    Process(#[from] process::ProcessError),
}

/// A backend in use.
pub enum Backend {
    /// Linux namespaces, cgroups and seccomp around a process tree.
    Process(process::ProcessBackend),
}

/// A sandbox, ready for its one job.
pub enum Sandbox {
    /// A process-backend sandbox.
    Process(process::ProcessSandbox),
}

impl Backend {
    /// The name reported by `/health` and in logs.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Process(_) => "process",
        }
    }

    /// Makes a sandbox and waits until its agent is ready, with the interpreter of
    /// `prepare` started ahead when one is given.
    pub async fn create(&self, prepare: Option<Lang>) -> Result<Sandbox, BackendError> {
        match self {
            Backend::Process(b) => Ok(Sandbox::Process(b.create(prepare).await?)),
        }
    }

    /// Releases what the backend holds on the host (at shutdown, after every
    /// sandbox is destroyed).
    pub fn shutdown(&self) {
        match self {
            Backend::Process(b) => b.shutdown(),
        }
    }
}

impl Sandbox {
    /// Runs the job. The sandbox is spent whatever happened: [`destroy`](Self::destroy)
    /// must follow (it may, after the answer is out).
    pub async fn run(&mut self, job: Job) -> Result<RunOutcome, BackendError> {
        match self {
            Sandbox::Process(s) => Ok(s.run(job).await?),
        }
    }

    /// Kills every process of the sandbox and releases what it holds on the host.
    pub async fn destroy(self) {
        match self {
            Sandbox::Process(s) => s.destroy().await,
        }
    }
}
