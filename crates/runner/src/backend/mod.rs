//! Backends: the ways a sandbox can be made. Each makes sandboxes ready to the point
//! where the agent waits for its job; a sandbox runs one job and is destroyed.
//!
//! Dispatch is by enum, not trait object: there are few backends, and each has its
//! own configuration.

pub mod process;

use sandbox_protocol::agent::{Job, JobOutcome};

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

    /// Makes a sandbox and waits until its agent is ready.
    pub async fn create(&self) -> Result<Sandbox, BackendError> {
        match self {
            Backend::Process(b) => Ok(Sandbox::Process(b.create().await?)),
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
    /// Runs the job and destroys the sandbox, whatever happened.
    pub async fn run(self, job: Job) -> Result<RunOutcome, BackendError> {
        match self {
            Sandbox::Process(s) => Ok(s.run(job).await?),
        }
    }

    /// Destroys the sandbox without running anything.
    pub async fn destroy(self) {
        match self {
            Sandbox::Process(s) => s.destroy().await,
        }
    }
}
