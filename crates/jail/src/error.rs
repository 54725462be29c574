//! [`JailError`]: the step of the jail that failed, with what failed underneath, so
//! that `sandbox-jail: <step>: <error>` names the layer that could not be set up.

use crate::seccomp::SeccompError;
use nix::sys::resource::Resource;
use std::io;
use std::path::PathBuf;

/// A jail step that failed.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// The jail spec could not be read.
    #[error("bad jail spec: {0}")]
    Spec(#[from] serde_json::Error),
    /// Closing inherited descriptors failed.
    #[error("closing inherited descriptors: {0}")]
    Sanitize(io::Error),
    /// Opening own executable failed.
    #[error("opening own executable: {0}")]
    OpenSelf(io::Error),
    /// Joining the cgroup failed.
    #[error("joining cgroup {path}: {source}")]
    JoinCgroup {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// Clearing supplementary groups failed.
    #[error("clearing supplementary groups: {0}")]
    Groups(nix::Error),
    /// Making the jail's own mount namespace failed.
    #[error("making the jail's own mount namespace: {0}")]
    MountNs(nix::Error),
    /// Taking the sandbox's host identity to create its namespaces failed.
    #[error("taking the sandbox's host identity {uid} to create its namespaces: {source}")]
    Owner {
        /// The uid concerned.
        uid: u32,
        /// What failed underneath.
        source: nix::Error,
    },
    /// Returning to host root after the clone failed.
    #[error("returning to host root after the clone: {0}")]
    Restore(nix::Error),
    /// Creating the namespaces (clone) failed.
    #[error("creating the namespaces (clone): {0}")]
    Clone(io::Error),
    /// A helper that maps ids (`newuidmap`, `newgidmap`) failed.
    #[error("{helper}: {said}")]
    IdHelper {
        /// The helper.
        helper: PathBuf,
        /// What it said, or why it could not run.
        said: String,
    },
    /// Writing an id map of the user namespace failed.
    #[error("writing {path} for the user namespace: {source}")]
    IdMap {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// Waiting for the sandbox's first process failed.
    #[error("waiting for the sandbox's first process: {0}")]
    Wait(nix::Error),
    /// Synchronising with the parent failed.
    #[error("synchronising with the parent: {0}")]
    Sync(io::Error),
    /// Becoming root of the user namespace failed.
    #[error("becoming root of the user namespace: {0}")]
    NsRoot(nix::Error),
    /// Setting the hostname failed.
    #[error("setting the hostname: {0}")]
    Hostname(nix::Error),
    /// A mount failed.
    #[error("mounting {target}: {source}")]
    Mount {
        /// The mount point.
        target: PathBuf,
        /// What failed underneath.
        source: nix::Error,
    },
    /// Preparing a file or folder of the new root failed.
    #[error("preparing {path}: {source}")]
    Prepare {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// pivot_root into the new root failed.
    #[error("pivot_root: {0}")]
    PivotRoot(nix::Error),
    /// Bringing up the loopback interface failed.
    #[error("bringing up the loopback interface: {0}")]
    Loopback(io::Error),
    /// Setting a resource limit failed.
    #[error("setting rlimit {resource:?}: {source}")]
    Rlimit {
        /// The resource limit concerned.
        resource: Resource,
        /// What failed underneath.
        source: nix::Error,
    },
    /// Dropping capability from the bounding set failed.
    #[error("dropping capability {cap} from the bounding set: {source}")]
    CapBound {
        /// The capability number.
        cap: u32,
        /// What failed underneath.
        source: io::Error,
    },
    /// Setting no_new_privs failed.
    #[error("setting no_new_privs: {0}")]
    NoNewPrivs(nix::Error),
    /// The seccomp filter could not be built or installed.
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
    /// Redirecting standard input/output failed.
    #[error("redirecting standard input/output: {0}")]
    StdioRedirect(io::Error),
    /// Executing the agent failed.
    #[error("executing the agent: {0}")]
    Exec(io::Error),
}
