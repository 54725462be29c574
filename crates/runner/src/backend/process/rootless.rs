//! Sandboxes made by an ordinary user, without root.
//!
//! The jail is the same; what root would hand out comes from elsewhere:
//! - the user namespaces are the user's own (the kernel must let an ordinary user make
//!   them: a probe at start);
//! - each sandbox's two ids (its root, the agent, and its user, the program) are
//!   subordinate ids of the user, from `/etc/subuid` and `/etc/subgid`, mapped by the
//!   `uidmap` package's setuid helpers, so that the program is never the agent's user
//!   nor the runner's;
//! - memory and CPU limits need a cgroup, which an ordinary user can only have through
//!   a cgroup v2 subtree delegated to them, the one the runner runs in (systemd's
//!   `Delegate=yes`, or a folder an admin hands over: see
//!   [`Hierarchy::open_delegated`](sandbox_jail::cgroup::Hierarchy::open_delegated)).
//!   Where there is none (cgroup v1 hosts, or v2 without delegation) the runner refuses
//!   to start, unless the operator passes the
//!   loudly named `--unsafe-no-resource-limits`: sandboxes then have no memory or CPU
//!   limit (the process cap stays, as an rlimit of the sandbox's own user), and
//!   `/health`, sandbox-mcp's banner and its tool descriptions say so.

use sandbox_jail::cgroup::CgroupError;
use sandbox_jail::Rootless;
use std::path::{Path, PathBuf};

/// Where a rootless jail mounts its stage, in its own mount namespace (see
/// [`sandbox_jail::rootfs::Stage::make_inside`]).
pub const STAGE_DIR: &str = "/tmp";
/// Where the `uidmap` helpers are looked for (the jail runs with an empty environment).
const HELPER_DIRS: [&str; 3] = ["/usr/bin", "/bin", "/usr/sbin"];

/// Why an ordinary user cannot make sandboxes here.
#[derive(Debug, thiserror::Error)]
pub enum RootlessError {
    /// A helper of the `uidmap` package is missing.
    #[error(
        "{0} is not installed: as an ordinary user, sandboxes' ids are mapped by the \
         uidmap package's helpers (Debian: sudo apt-get install uidmap)"
    )]
    NoHelper(&'static str),
    /// The user has no (or too small a) subordinate id range.
    #[error(
        "user {user} has no range of at least {need} ids in {file}: each sandbox needs two \
         subordinate ids (as root: usermod --add-subuids 100000-165535 --add-subgids \
         100000-165535 {user})"
    )]
    NoSubordinateIds {
        /// The user's name.
        user: String,
        /// `/etc/subuid` or `/etc/subgid`.
        file: &'static str,
        /// How many ids the pool needs.
        need: u64,
    },
    /// The runner's user has no name in the user database.
    #[error("uid {0} has no entry in the user database (needed to find its subordinate ids)")]
    NoUser(u32),
    /// The kernel refuses user namespaces to ordinary users.
    #[error("this kernel does not let an ordinary user make a user namespace: {0}")]
    NoUserNamespaces(String),
    /// No cgroup can limit the sandboxes, and the operator did not opt out.
    #[error(
        "as an ordinary user, memory and CPU limits need a cgroup v2 subtree delegated to \
         you, and the runner must run inside it: {0}. Run the runner as root; or, on a \
         host with cgroup v2 and systemd, start it in a delegated scope (systemd-run --user \
         --scope -p Delegate=yes <command>); or pass --unsafe-no-resource-limits \
         (RUNNER_UNSAFE_NO_RESOURCE_LIMITS=true) to run sandboxes without memory and CPU \
         limits (their processes stay capped)"
    )]
    NoLimits(CgroupError),
}

/// What an ordinary user's runner uses in place of root: the helpers, and the first
/// subordinate uid and gid with how many follow.
#[derive(Debug, Clone)]
pub struct RootlessSetup {
    /// The id-mapping helpers, for the jail.
    pub helpers: Rootless,
    /// First subordinate uid and count.
    pub uids: (u32, u32),
    /// First subordinate gid and count.
    pub gids: (u32, u32),
}

/// Checks everything an ordinary user's runner needs for `sandboxes` at once; the
/// probe is `probe`, which runs in a process of its own.
pub fn check(
    sandboxes: u64,
    probe: impl FnOnce() -> Result<(), String>,
) -> Result<RootlessSetup, RootlessError> {
    let helpers = Rootless {
        newuidmap: helper("newuidmap")?,
        newgidmap: helper("newgidmap")?,
    };
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .ok_or(RootlessError::NoUser(uid.as_raw()))?;
    let need = sandboxes * 2;
    let range = |file: &'static str| {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        subordinate_range(&text, &user.name, uid.as_raw(), need).ok_or_else(|| {
            RootlessError::NoSubordinateIds {
                user: user.name.clone(),
                file,
                need,
            }
        })
    };
    let (uids, gids) = (range("/etc/subuid")?, range("/etc/subgid")?);
    probe().map_err(RootlessError::NoUserNamespaces)?;
    Ok(RootlessSetup {
        helpers,
        uids,
        gids,
    })
}

fn helper(name: &'static str) -> Result<PathBuf, RootlessError> {
    HELPER_DIRS
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.is_file())
        .ok_or(RootlessError::NoHelper(name))
}

/// The first `name:start:count` (or `uid:start:count`) line of a subordinate id file
/// with at least `need` ids.
fn subordinate_range(text: &str, name: &str, uid: u32, need: u64) -> Option<(u32, u32)> {
    text.lines().find_map(|line| {
        let mut fields = line.trim().split(':');
        let owner = fields.next()?;
        let start: u32 = fields.next()?.parse().ok()?;
        let count: u32 = fields.next()?.parse().ok()?;
        let ours = owner == name || owner.parse::<u32>().ok() == Some(uid);
        (ours && u64::from(count) >= need && start.checked_add(count).is_some())
            .then_some((start, count))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_s_first_large_enough_range_is_found_by_name_or_uid() {
        let text = "other:100000:65536\nme:165536:3\nme:200000:65536\n1001:300000:100\n";
        assert_eq!(
            subordinate_range(text, "me", 1000, 8),
            Some((200_000, 65_536))
        );
        assert_eq!(subordinate_range(text, "me", 1000, 2), Some((165_536, 3)));
        assert_eq!(
            subordinate_range(text, "you", 1001, 8),
            Some((300_000, 100))
        );
        assert_eq!(subordinate_range(text, "nobody", 65534, 2), None);
        assert_eq!(subordinate_range("me:4294967295:10\n", "me", 1, 2), None);
    }
}
