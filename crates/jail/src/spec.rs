//! What the jail is told: [`JailSpec`], written as JSON by the runner or a VM's init (on
//! the jail's command line, or to a template), and read by the steps that set the
//! sandbox up.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The host identities of one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostIds {
    /// The host uid (and gid) of sandbox root: the agent's, and the user namespace's
    /// owner when [`JailSpec::unprivileged_owner`] is set.
    pub root: u32,
    /// The host uid (and gid) of the sandbox user, which programs run as.
    pub user: u32,
}

/// How a jail started by an ordinary user (not root) maps its ids: through the setuid
/// helpers of the `uidmap` package, which map the subordinate ids `/etc/subuid` and
/// `/etc/subgid` grant that user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rootless {
    /// `newuidmap`.
    pub newuidmap: PathBuf,
    /// `newgidmap`.
    pub newgidmap: PathBuf,
}

/// What the jail is told (by the runner, or by a VM's init).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JailSpec {
    /// The `cgroup.procs` files to join (none: the sandbox has no cgroup, and its
    /// memory and CPU are not limited).
    pub cgroup_procs: Vec<PathBuf>,
    /// An empty host folder for the stage (mounted on in the jail's mount namespace).
    pub stage_dir: PathBuf,
    /// This sandbox's host uids (no other sandbox running at the same time has them).
    pub ids: HostIds,
    /// This sandbox's host gids (the same numbers as `ids` where root runs the jail).
    pub gids: HostIds,
    /// Create the user namespace as `ids.root` rather than as host root.
    pub unprivileged_owner: bool,
    /// Set when an ordinary user runs the jail: the user namespace is the user's, its
    /// ids are mapped by the helpers, the stage is made inside it and the device nodes
    /// are the host's, bound in (an unprivileged user cannot make any).
    pub rootless: Option<Rootless>,
    /// The most processes the sandbox user may have at once, as an rlimit: the process
    /// cap of a sandbox without a cgroup (the user is the sandbox's own).
    pub nproc: Option<u64>,
    /// Size of /tmp in bytes.
    pub tmp_bytes: u64,
    /// Size of the home folder in bytes.
    pub home_bytes: u64,
    /// Most open files per process.
    pub nofile: u64,
    /// Largest file a process may write, in bytes.
    pub fsize_bytes: u64,
    /// A host folder of installed packages (a package set), shown read-only at
    /// [`PACKAGES`](crate::layout::PACKAGES) through an overlay of its own.
    #[serde(default)]
    pub packages: Option<PathBuf>,
    /// A host folder, below a shared mount, bound at [`DEPS`](crate::layout::DEPS) as a
    /// slave of that mount: what the runner mounts in it later (a program's inline
    /// dependencies, read-only) appears in the sandbox, and nothing goes the other way.
    #[serde(default)]
    pub deps: Option<PathBuf>,
    /// A host folder of this sandbox's device nodes, made for it by the runner and bound
    /// in, for a jail that cannot make them (one forked from a template); none: the jail
    /// makes them as host root, or (an ordinary user's) binds the host's.
    #[serde(default)]
    pub devices: Option<PathBuf>,
    /// Bytes of memory the sandbox may lock (none: Linux's default, 8 MiB): less where its
    /// maker's own ceiling is shared by many sandboxes (a template's, see [`crate::forked`]).
    #[serde(default)]
    pub memlock_bytes: Option<u64>,
    /// Queued signals the sandbox user may have pending (none: 256); less, as above.
    #[serde(default)]
    pub sigpending: Option<u64>,
    /// More host paths shown read-only at the same place, as the system folders are (a
    /// toolchain's configuration under /etc, say); a missing one is skipped.
    #[serde(default)]
    pub shared: Vec<PathBuf>,
}
