//! [`ProcessError`]: why a process sandbox could not be made or run, typed down to the
//! layer that failed (the jail's own words, a cgroup step, the template, the channel).

use super::deps::DepsMountError;
use super::identity;
use super::rootless::RootlessError;
use super::template::TemplateError;
use crate::backend::cgroup::CgroupError;
use crate::backend::channel::ChannelError;
use std::path::PathBuf;
use std::time::Duration;

/// Why a process sandbox could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The agent binary the operator named cannot serve.
    #[error("--sandbox-agent: {0}")]
    AgentBinary(super::agent_binary::AgentBinaryError),
    /// An ordinary user's runner lacks what stands in for root.
    #[error(transparent)]
    Rootless(#[from] RootlessError),
    /// A cgroup step failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The state folder could not be made.
    #[error("creating state folder {path}: {source}")]
    StateDir {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: std::io::Error,
    },
    /// The state folder's path cannot name an overlay layer.
    #[error("the state folder {0} may not contain ',', ':' or '\\' (it names overlay layers)")]
    StatePath(PathBuf),
    /// Every host identity is held.
    #[error(transparent)]
    Identities(#[from] identity::Exhausted),
    /// The jail could not be started.
    #[error("starting the jail: {0}")]
    Spawn(std::io::Error),
    /// The jail failed to set the sandbox up: its own words, which name the step.
    #[error("sandbox setup failed: {0}")]
    Jail(String),
    /// The task making the cgroup failed.
    #[error("sandbox setup failed: the cgroup task: {0}")]
    CgroupTask(tokio::task::JoinError),
    /// The jail's spec could not be encoded.
    #[error("sandbox setup failed: encoding the jail spec: {0}")]
    Spec(serde_json::Error),
    /// The jail was started without a pipe on its standard error.
    #[error("sandbox setup failed: the jail's standard error is not piped")]
    NoStderr,
    /// The new sandbox's agent did not get ready (said nothing, or failed to start the
    /// interpreter).
    #[error("sandbox setup failed: {0}")]
    NotReady(ChannelError),
    /// The sandbox was not ready in time.
    #[error("sandbox setup took longer than {0:?}")]
    SetupTimeout(Duration),
    /// The exchange with the agent failed.
    #[error(transparent)]
    Channel(#[from] ChannelError),
    /// Inline dependencies could not be mounted.
    #[error(transparent)]
    Deps(#[from] DepsMountError),
    /// The task mounting inline dependencies failed.
    #[error("mounting inline dependencies: the task: {0}")]
    DepsTask(tokio::task::JoinError),
    /// This runner mounts no inline dependencies (an ordinary user's cannot).
    #[error("inline dependencies need a runner started as root")]
    NoDeps,
    /// The template could not make the sandbox.
    #[error("sandbox setup failed: {0}")]
    Template(#[from] TemplateError),
    /// A session's sandbox could not be frozen or thawed.
    #[error("freezing or thawing the session's sandbox: {0}")]
    Freezer(CgroupError),
    /// The task freezing or thawing a session's sandbox failed.
    #[error("freezing or thawing the session's sandbox: the task: {0}")]
    FreezerTask(tokio::task::JoinError),
    /// The listener of the sandbox's way to the proxy could not be made in it.
    #[error("sandbox setup failed: the proxy's listener in the sandbox: {0}")]
    ProxyListener(std::io::Error),
    /// Egress configured on a runner that is not root, where it is not built yet.
    #[error(
        "RUNNER_EGRESS_ALLOW: an ordinary user's runner cannot give sandboxes the proxy yet \
         (it needs a runner started as root); leave RUNNER_EGRESS_ALLOW and \
         RUNNER_EGRESS_ALLOW_CIDRS empty"
    )]
    EgressRootless,
}
