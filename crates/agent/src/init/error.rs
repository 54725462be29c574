//! Why a VM's init stopped: the step of the boot, of making the sandbox or of serving
//! it that failed.

use crate::agent::AgentError;
use sandbox_jail::cgroup::CgroupError;
use sandbox_protocol::frame::FrameError;
use std::io;
use std::path::PathBuf;

/// A step of the boot that failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A file system could not be mounted (or moved).
    #[error("mounting {what} on {target}: {source}")]
    Mount {
        /// What was being mounted.
        what: &'static str,
        /// The mount point.
        target: PathBuf,
        /// What failed underneath.
        source: nix::Error,
    },
    /// A folder could not be made.
    #[error("creating {path}: {source}")]
    CreateDir {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A control file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A kernel module could not be loaded.
    #[error("loading kernel module {path}: {source}")]
    Module {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A device did not show up in time.
    #[error("{0} did not appear in time")]
    NoDevice(String),
    /// Changing into the new root failed.
    #[error("switching to the root image: {0}")]
    SwitchRoot(nix::Error),
    /// The sandbox's cgroup could not be made.
    #[error("the sandbox's cgroup: {0}")]
    Cgroup(#[from] CgroupError),
    /// The jail could not be started.
    #[error("starting the jail: {0}")]
    Spawn(io::Error),
    /// The jail did not make a sandbox whose agent answered.
    #[error("the jailed sandbox: {0}")]
    Jail(String),
    /// The exchange with the jailed sandbox's agent failed before it was ready.
    #[error("the jailed sandbox's channel: {0}")]
    JailChannel(#[from] FrameError),
    /// Serving the job failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
}
