//! Why a VM sandbox could not be made or run: one error type for both VMMs, with a
//! variant per step that can fail.

use super::qmp::QmpError;
use crate::backend::cgroup::CgroupError;
use crate::backend::channel::ChannelError;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a VM sandbox could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// The runner is not root, which the VMM cgroups need.
    #[error("the vm backend needs root (euid 0) to put each VMM in a cgroup")]
    NotRoot,
    /// The VMM binary is not installed.
    #[error("{0} is not on PATH (Debian: apt-get install qemu-system-x86)")]
    NoVmm(&'static str),
    /// A Firecracker binary is missing.
    #[error(
        "{0} not found: install firecracker and jailer from Firecracker's releases \
         (see docs/operations.md), or point --firecracker-bin / --jailer-bin at them"
    )]
    NoFirecracker(PathBuf),
    /// Firecracker runs guests with KVM only.
    #[error("--vmm firecracker needs KVM: --accel tcg is QEMU's alone")]
    FirecrackerTcg,
    /// A file could not be hard-linked into a jail.
    #[error(
        "linking {file} into the jail as {link}: {source} (the jailer needs the image and \
         the state folder on one file system: set RUNNER_STATE_DIR or RUNNER_VM_IMAGE)"
    )]
    HardLink {
        /// The file concerned.
        file: PathBuf,
        /// The link that could not be made.
        link: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// The image could not be leased (see `image prune`).
    #[error(transparent)]
    ImageLease(#[from] sandbox_image::LeaseError),
    /// A request to Firecracker's API failed or was refused.
    #[error("Firecracker API: {0}")]
    Api(#[from] ApiError),
    /// KVM was asked for and /dev/kvm cannot be used.
    #[error("--accel kvm: opening /dev/kvm: {0}")]
    NoKvm(io::Error),
    /// /dev/kvm is not open to a group QEMU can run in.
    #[error(
        "/dev/kvm has mode {0:o} and group {1}: the VMM runs unprivileged and needs a \
         non-root group with read-write access (Debian's udev rule makes it root:kvm \
         0660; or chgrp kvm /dev/kvm && chmod 0660 /dev/kvm)"
    )]
    KvmGroup(u32, u32),
    /// An image file is missing.
    #[error("VM image file {path}: {source} (build it with `sandbox-runner image build`)")]
    Image {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A cgroup step failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// A folder or socket of the VM could not be made or removed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// The VMM could not be started.
    #[error("starting {program}: {source}")]
    Spawn {
        /// The VMM (or jailer) binary.
        program: String,
        /// What failed underneath.
        source: io::Error,
    },
    /// The VM did not reach its agent.
    #[error("the VM did not boot to its agent: {0}")]
    Boot(#[from] BootError),
    /// A VM that failed to boot, with the last words of its VMM and guest console.
    #[error("{source}; the VM said: {said}")]
    Said {
        /// Why the VM failed.
        source: Box<VmError>,
        /// The ends of the VMM's log and of the guest console.
        said: String,
    },
    /// The exchange with the agent failed.
    #[error(transparent)]
    Channel(#[from] ChannelError),
    /// The VM has no channel to its agent (it never became ready).
    #[error("the VM has no channel to its agent")]
    NoChannel,
    /// An exchange with QEMU's machine protocol failed.
    #[error(transparent)]
    Qmp(#[from] QmpError),
    /// The VMM's migration of the VM to or from its saved state failed.
    #[error("the VMM's migration of the VM's state {0}")]
    Migration(String),
    /// Saving the VM took too long.
    #[error("saving the VM took over {0:?}")]
    SaveTimeout(Duration),
    /// A saved folder holds no VM this runner can restore.
    #[error("{dir} cannot be restored here: {why}")]
    NotRestorable {
        /// The saved folder.
        dir: PathBuf,
        /// Why not.
        why: String,
    },
}

/// Maps an `io::Error` of `action` on `path` to [`VmError::Io`].
pub(super) fn io_error<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> VmError + 'a {
    move |source| VmError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Why a VM did not boot to its agent.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The VMM process ended before its agent was ready.
    #[error("the VMM exited ({0})")]
    VmmExited(String),
    /// The VMM's connection to the agent's channel could not be accepted.
    #[error("accepting the VMM: {0}")]
    Accept(io::Error),
    /// The agent's Ready (or the preparation after it) failed.
    #[error(transparent)]
    Handshake(ChannelError),
    /// The agent did not say Ready in time.
    #[error("no Ready from the agent within {0:?}")]
    NoReady(Duration),
    /// The task that makes the VMM's cgroup failed.
    #[error("cgroup task: {0}")]
    CgroupTask(tokio::task::JoinError),
    /// Firecracker did not open its API socket in time.
    #[error("Firecracker's API socket {path} did not open within {waited:?}: {source}")]
    ApiSocket {
        /// The socket's path.
        path: PathBuf,
        /// How long the runner waited.
        waited: Duration,
        /// The last connection error.
        source: io::Error,
    },
}

/// Why a request to Firecracker's API failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The HTTP exchange failed (`connecting` for the handshake).
    #[error("{request}: {source}")]
    Http {
        /// The request, as `METHOD /path`, or `connecting`.
        request: String,
        /// What failed underneath.
        source: hyper::Error,
    },
    /// The request could not be built.
    #[error("{request}: {source}")]
    Request {
        /// The request, as `METHOD /path`.
        request: String,
        /// What failed underneath.
        source: hyper::http::Error,
    },
    /// Firecracker answered with an error status.
    #[error("{request}: {status}: {fault}")]
    Refused {
        /// The request, as `METHOD /path`.
        request: String,
        /// The HTTP status.
        status: hyper::StatusCode,
        /// Firecracker's `fault_message`, or the body.
        fault: String,
    },
}
