//! [`BuildError`]: why a build failed, by step, with a tool's failure told apart (not
//! found, unreachable, conflict, timeout, ...).

use crate::process::ToolError;
use crate::store::StoreError;
use std::path::PathBuf;
use std::time::Duration;

/// Why a build failed, by step.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The store could not be read or changed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file of the work tree could not be written or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// pip, npm or the interpreter could not be started.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The build ran past its timeout; pip or npm was killed.
    #[error("the build took longer than {}s while {step}", timeout.as_secs())]
    Timeout {
        /// What it was doing.
        step: &'static str,
        /// The spec's timeout.
        timeout: Duration,
    },
    /// A requested package, version or wheel does not exist.
    #[error("{message}")]
    NotFound {
        /// The package pip or npm named.
        package: String,
        /// What is missing, in words.
        message: String,
    },
    /// The index or registry could not be reached.
    #[error("the package index could not be reached while {step}: {detail}")]
    Unreachable {
        /// What it was doing.
        step: &'static str,
        /// The connection error.
        detail: String,
    },
    /// The requirements contradict each other.
    #[error("the requirements conflict: {detail}")]
    Conflict {
        /// pip's or npm's account of it.
        detail: String,
    },
    /// pip's report or npm's lock was not what was expected.
    #[error("{}: {reason}", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// pip or npm failed otherwise.
    #[error("{step} failed: {detail}")]
    Failed {
        /// The step.
        step: &'static str,
        /// The end of its output.
        detail: String,
    },
    /// The spec asks for nothing.
    #[error("nothing to build: no python and no node packages")]
    Empty,
    /// A package's metadata names a dependency by URL: nothing was fetched from it.
    #[error(
        "{package} names its dependency {dependency} by URL ({url}): packages are \
         installed from the package index only, so {package} cannot be in a set"
    )]
    UrlDependency {
        /// The package whose metadata names it.
        package: String,
        /// The dependency.
        dependency: String,
        /// The URL.
        url: String,
    },
}

impl BuildError {
    pub(super) fn from_tool(
        step: &'static str,
        timeout: Duration,
    ) -> impl FnOnce(ToolError) -> BuildError {
        move |e| match e {
            ToolError::Spawn { program, source } => BuildError::Spawn { program, source },
            ToolError::Io { path, source } => BuildError::Io { path, source },
            ToolError::Timeout => BuildError::Timeout { step, timeout },
            ToolError::NotFound { package, message } => BuildError::NotFound { package, message },
            ToolError::Unreachable { detail, .. } => BuildError::Unreachable { step, detail },
            ToolError::Conflict { detail } => BuildError::Conflict { detail },
            ToolError::Output { path, reason } => BuildError::Output { path, reason },
            ToolError::Failed { step, detail } => BuildError::Failed { step, detail },
            ToolError::UrlDependency {
                package,
                dependency,
                url,
                ..
            } => BuildError::UrlDependency {
                package,
                dependency,
                url,
            },
            ToolError::NoSpace => BuildError::Failed {
                step,
                detail: "no space left on the store's device".into(),
            },
            ToolError::OutOfMemory => BuildError::Failed {
                step,
                detail: "pip ran out of memory".into(),
            },
        }
    }
}
