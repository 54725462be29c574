//! A runner inside a container (Docker, Kubernetes): its cgroups go below the
//! container's own cgroup, not at the root of the host's trees.
//!
//! Why: a runner names its instance after its pid (`r<pid>`), which is unique only
//! within one PID namespace, while the cgroup trees may be shared by every container of
//! the host (cgroup v1 without cgroup namespaces). Below its own cgroup, a runner's
//! folders cannot meet another container's, and its sandboxes count against the
//! container's limits. A runner is taken to be in a container when its PID namespace
//! is not the host's first one ([`in_container`]).
//!
//! Where its own cgroup is: `/proc/self/cgroup` gives it relative to the root of each
//! hierarchy as the process's cgroup namespace sees it, and `/proc/self/mountinfo`
//! gives the folder of the hierarchy each mount shows (a container's mounts often show
//! only the container's own cgroup): the folder below the mount is the difference
//! ([`own_dirs`]). Then:
//!
//! 1. cgroup v1: `sandbox-runner/<instance>` is made below the own folder of each
//!    controller's tree (the freezer's too); nothing else is needed (v1 lets a cgroup
//!    with processes have children).
//! 2. cgroup v2 (a private cgroup namespace is the engines' default there): a cgroup
//!    may enable controllers for its children only while it holds no process itself, so
//!    the processes of the own cgroup (the runner, the container's init) move to a leaf
//!    of their own, [`LEAF`](super::LEAF), first; then the own cgroup enables memory,
//!    cpu and pids below it.
//!
//! A read-only cgroup mount (an unprivileged container) stops the runner with a
//! message saying how to give it one it may write ([`CgroupError::ReadOnly`]).

use super::{
    delegated, freezer, v1, v2, CgroupError, CgroupFs, Hierarchy, HostFs, Version, LEAF, TOP,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The inode of the host's first PID namespace (`PROC_PID_INIT_INO` in the kernel).
const INITIAL_PID_NAMESPACE: &str = "pid:[4026531836]";

/// Whether this process runs in a PID namespace other than the host's first one: in a
/// container, where pids (and so instance names) are not unique on the host.
pub fn in_container() -> bool {
    match std::fs::read_link("/proc/self/ns/pid") {
        Ok(link) => link.as_os_str() != INITIAL_PID_NAMESPACE,
        // Without /proc/self/ns there is nothing to tell by: as on a host.
        Err(_) => false,
    }
}

/// One mount of a cgroup file system, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CgroupMount {
    /// The folder of the hierarchy the mount shows (`/` for the whole of it).
    root: PathBuf,
    /// Where it is mounted.
    point: PathBuf,
    /// `cgroup2`, or `cgroup` (v1).
    fstype: String,
    /// The mount's super options: for v1, its controllers among them.
    options: Vec<String>,
}

/// The cgroup mounts in the text of `/proc/self/mountinfo`.
fn cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            // id parent major:minor root point options [optional...] - fstype source super
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let mut rest = after.split(' ');
            let fstype = rest.next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let _source = rest.next()?;
            let options = rest.next().unwrap_or("");
            Some(CgroupMount {
                root: PathBuf::from(unescape(fields.get(3)?)),
                point: PathBuf::from(unescape(fields.get(4)?)),
                fstype: fstype.to_owned(),
                options: options.split(',').map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// mountinfo writes a space, tab, newline and backslash in a path as `\ooo`.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.clone().take(3).collect();
            if let Ok(byte) = u8::from_str_radix(&code, 8) {
                out.push(char::from(byte));
                chars.nth(2);
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// This process's cgroup in the hierarchy `controller` names (v1), or in the unified one
/// (`controller` `None`), from the text of `/proc/self/cgroup`: the path as its cgroup
/// namespace sees it.
fn own_path(proc_self_cgroup: &str, controller: Option<&str>) -> Option<PathBuf> {
    proc_self_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = match controller {
            None => id == "0" && controllers.is_empty(),
            Some(wanted) => controllers.split(',').any(|c| c == wanted),
        };
        matches.then(|| PathBuf::from(path))
    })
}

/// The folder of the cgroup `own` (as `/proc/self/cgroup` says it) relative to what
/// `mount` shows: `own` less the mount's root.
fn below_mount(own: &Path, mount: &CgroupMount) -> Option<PathBuf> {
    own.strip_prefix(&mount.root).ok().map(Path::to_path_buf)
}

/// This process's own cgroup folders under `mount` (normally `/sys/fs/cgroup`): one for
/// v2, one per needed controller (in [`v1::CONTROLLERS`]' order) for v1, from the texts
/// of `/proc/self/cgroup` and `/proc/self/mountinfo`. An error names the hierarchy
/// where it could not be found.
pub(super) fn own_dirs(
    v2: bool,
    mount: &Path,
    proc_self_cgroup: &str,
    mountinfo: &str,
) -> Result<Vec<PathBuf>, CgroupError> {
    let mounts = cgroup_mounts(mountinfo);
    let not_found = |hierarchy: &Path| CgroupError::OwnCgroupNotVisible(hierarchy.to_owned());
    if v2 {
        let own = own_path(proc_self_cgroup, None).ok_or_else(|| not_found(mount))?;
        let found = mounts
            .iter()
            .find(|m| m.fstype == "cgroup2" && m.point == mount)
            .and_then(|m| below_mount(&own, m))
            .ok_or_else(|| not_found(mount))?;
        return Ok(vec![mount.join(found)]);
    }
    v1::CONTROLLERS
        .iter()
        .map(|controller| {
            let tree = mount.join(controller);
            let own =
                own_path(proc_self_cgroup, Some(controller)).ok_or_else(|| not_found(&tree))?;
            mounts
                .iter()
                .filter(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == controller))
                // The tree's own mount point, or the one `<mount>/<controller>` links to
                // (`cpu -> cpu,cpuacct`).
                .find(|m| m.point == tree || m.point.parent() == Some(mount))
                .and_then(|m| below_mount(&own, m))
                .map(|rel| tree.join(rel))
                .ok_or_else(|| not_found(&tree))
        })
        .collect()
}

/// Prepares the own cgroup `base` of a runner in a container on cgroup v2: its
/// processes move to [`LEAF`](super::LEAF) and it enables the controllers below it.
/// Its parent must have enabled them for it (the engines do).
pub(super) fn prepare_v2(fs: &dyn CgroupFs, base: &Path) -> Result<(), CgroupError> {
    v2::check_controllers(fs, base)?;
    let leaf = base.join(super::LEAF);
    super::make_dir(fs, &leaf)?;
    delegated::move_processes(fs, base, &leaf)?;
    v2::enable_controllers(fs, base)
}

impl Hierarchy {
    /// [`open`](Self::open) in a container: finds this process's own cgroup from
    /// `/proc/self/cgroup` and `/proc/self/mountinfo`.
    pub(super) fn open_in_container(mount: &Path, instance: &str) -> Result<Self, CgroupError> {
        let read = |file: &str| {
            std::fs::read_to_string(file).map_err(|source| CgroupError::Read {
                path: PathBuf::from(file),
                source,
            })
        };
        let (cgroup, mountinfo) = (read("/proc/self/cgroup")?, read("/proc/self/mountinfo")?);
        let fs: Arc<dyn CgroupFs> = Arc::new(HostFs);
        let v2 = v2::detect(&*fs, mount);
        if !v2 && v1::detect(&*fs, mount) {
            // Named as such, rather than as a cgroup the mounts do not show.
            freezer::check_v1(&*fs, mount)?;
        }
        let own = own_dirs(v2, mount, &cgroup, &mountinfo)?;
        Self::open_below_with(fs, mount, &own, instance)
    }

    /// Makes this instance's folders below `own`, the own cgroup folders of a runner in
    /// a container (one for v2; for v1, one per controller: memory, cpu, pids, freezer,
    /// in that order), on the cgroup file systems `fs` gives access to. On v2 the own cgroup's
    /// processes move to [`LEAF`] first, so that it may enable the controllers.
    pub fn open_below_with(
        fs: Arc<dyn CgroupFs>,
        mount: &Path,
        own: &[PathBuf],
        instance: &str,
    ) -> Result<Self, CgroupError> {
        if v2::detect(&*fs, mount) {
            let own = own
                .first()
                .ok_or_else(|| CgroupError::NoHierarchy(mount.to_owned()))?;
            // A runner started again in the same container is in the leaf already.
            let base = match own.parent() {
                Some(parent) if own.ends_with(LEAF) => parent,
                _ => own.as_path(),
            };
            prepare_v2(&*fs, base)?;
            Self::make(fs, Version::V2, vec![base.join(TOP)], instance)
        } else if v1::detect(&*fs, mount) && own.len() == v1::CONTROLLERS.len() {
            freezer::check_v1(&*fs, mount)?;
            let tops = own.iter().map(|dir| dir.join(TOP)).collect();
            Self::make(fs, Version::V1, tops, instance)
        } else {
            Err(CgroupError::NoHierarchy(mount.to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a Docker container on a cgroup v1 host shows (this project's CI machines):
    /// each controller's mount is the container's own cgroup.
    const V1_CGROUP: &str = "9:name=systemd:/docker/abc\n8:pids:/docker/abc\n\
        6:freezer:/docker/abc\n4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n";
    const V1_MOUNTINFO: &str = "\
80 79 0:47 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755
81 80 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
84 80 0:32 /docker/abc /sys/fs/cgroup/memory rw,nosuid shared:9 - cgroup cgroup rw,memory
88 80 0:36 /docker/abc /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
86 80 0:34 /docker/abc /sys/fs/cgroup/freezer rw,nosuid - cgroup cgroup rw,freezer
";

    #[test]
    fn v1_in_a_container_is_the_root_of_each_mount() {
        let mount = Path::new("/sys/fs/cgroup");
        let dirs = own_dirs(false, mount, V1_CGROUP, V1_MOUNTINFO).unwrap();
        assert_eq!(
            dirs,
            ["memory", "cpu", "pids", "freezer"].map(|c| mount.join(c)),
            "`cpu` is the link to cpu,cpuacct"
        );
    }

    #[test]
    fn v1_with_the_hosts_whole_tree_mounted_is_the_containers_folder_in_it() {
        // docker run -v /sys/fs/cgroup:/sys/fs/cgroup:rw: the mounts show the roots.
        let mountinfo = V1_MOUNTINFO.replace(" /docker/abc ", " / ");
        let dirs = own_dirs(
            false,
            Path::new("/c"),
            V1_CGROUP,
            &mountinfo.replace("/sys/fs/cgroup", "/c"),
        )
        .unwrap();
        assert_eq!(
            dirs,
            ["memory", "cpu", "pids", "freezer"]
                .map(|c| Path::new("/c").join(c).join("docker/abc"))
        );
    }

    #[test]
    fn v2_in_a_private_or_the_hosts_cgroup_namespace() {
        let mount = Path::new("/sys/fs/cgroup");
        let private = "30 20 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            own_dirs(true, mount, "0::/\n", private).unwrap(),
            [mount.to_owned()]
        );
        let host = "0::/system.slice/docker-abc.scope\n";
        assert_eq!(
            own_dirs(true, mount, host, private).unwrap(),
            [mount.join("system.slice/docker-abc.scope")]
        );
    }

    #[test]
    fn a_cgroup_the_mount_does_not_show_is_named() {
        let mount = Path::new("/sys/fs/cgroup");
        let other = "30 20 0:26 /kubepods/x /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        match own_dirs(true, mount, "0::/docker/abc\n", other) {
            Err(CgroupError::OwnCgroupNotVisible(path)) => assert_eq!(path, mount),
            other => panic!("{other:?}"),
        }
        match own_dirs(false, mount, "4:memory:/docker/abc\n", V1_MOUNTINFO) {
            Err(e @ CgroupError::OwnCgroupNotVisible(_)) => {
                assert!(e.to_string().contains("/sys/fs/cgroup/cpu"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b\134c"), r"/a b\c");
        assert_eq!(unescape(r"/plain"), "/plain");
    }
}
