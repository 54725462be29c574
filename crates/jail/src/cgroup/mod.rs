//! Control groups: one per sandbox (process backend, and inside a VM guest, where the
//! init makes it in the guest kernel's v2 hierarchy) or per VMM process (vm backend, on
//! the host), holding its memory, CPU and process limits.
//!
//! Layout, v1 (one tree per controller) and v2 (one unified tree) alike:
//! `<controller root>/sandbox-runner/<instance>/<sandbox>`, where `<instance>` names one
//! life of one runner (`r<pid>`), so that several runners share a host, and a runner
//! that starts again can tell what a dead one left behind ([`Hierarchy::remove_stale`]).
//! A runner without root puts the same layout below the cgroup v2 subtree delegated to
//! its user ([`Hierarchy::open_delegated`], `delegated.rs`) instead of the root.
//!
//! - `mod.rs`: the API both versions share: [`Hierarchy`] (this runner's place in the
//!   trees, making cgroups, removing what dead runners left), [`Cgroup`] (one cgroup:
//!   joining, its OOM counter, kill and remove), [`CgroupLimits`], [`CgroupError`];
//! - `freezer.rs`: [`Freezer`], which holds a session's sandbox between its calls (v1's
//!   `freezer` controller, v2's `cgroup.freeze`), and thawing in the kill paths;
//! - `delegated.rs`: finding and preparing an ordinary user's delegated subtree;
//! - `container.rs`: a runner in a container, whose layout goes below the container's
//!   own cgroup ([`Hierarchy::open`] does that by itself in a container);
//! - `v1.rs` and `v2.rs`: what differs between the versions (finding the hierarchy,
//!   enabling controllers, the limit files, the OOM counter's file, `cgroup.kill`);
//!   on v1 each sandbox also has a folder in the freezer's tree, joined with the others;
//! - `fs.rs`: every file access goes through [`CgroupFs`], which unit tests replace
//!   with a fake tree in a temporary folder (`tests.rs`).

mod container;
mod delegated;
mod freezer;
mod fs;
#[cfg(test)]
mod tests;
mod v1;
mod v2;

pub use container::in_container;
pub use delegated::{own_path, LEAF};
pub use freezer::{Freezer, FREEZE_LIMIT};
pub use fs::{CgroupFs, HostFs};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The folder below each controller root that holds every runner's cgroups.
const TOP: &str = "sandbox-runner";
/// How long a sandbox's processes may take to die before its cgroup is left behind.
const REMOVE_LIMIT: Duration = Duration::from_secs(5);

/// A cgroup step that failed, with the path it failed on.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// Neither a v2 hierarchy with the needed controllers nor the v1 controllers exist.
    #[error(
        "no usable cgroup hierarchy under {0}: need cgroup v2 with the memory, cpu and pids \
         controllers, or cgroup v1 with memory, cpu and pids mounted"
    )]
    NoHierarchy(PathBuf),
    /// No cgroup v2 hierarchy, which is the only one an ordinary user can be handed.
    #[error(
        "no cgroup v2 hierarchy at {0}: this host's cgroups are v1 (or hybrid), where only \
         root can limit processes"
    )]
    NoUnified(PathBuf),
    /// This process's cgroup is not delegated to its user.
    #[error(
        "this process's cgroup {0} is not delegated to its user (its cgroup.procs and \
         cgroup.subtree_control are not writable)"
    )]
    NotDelegated(PathBuf),
    /// The cgroup file system is mounted read-only (an unprivileged container).
    #[error(
        "the cgroup file system at {0} is read-only: the runner makes a cgroup per sandbox. \
         In a container, run it privileged (docker run --privileged, Kubernetes \
         securityContext.privileged: true), or mount the host's /sys/fs/cgroup read-write \
         (docker run -v /sys/fs/cgroup:/sys/fs/cgroup:rw)"
    )]
    ReadOnly(PathBuf),
    /// In a container: this process's own cgroup is not in what the mount shows.
    #[error(
        "in a container, the runner puts its cgroups below its own, but its cgroup (from \
         /proc/self/cgroup) is not below what {0} shows (/proc/self/mountinfo): mount the \
         cgroup file system of the container's cgroup namespace there"
    )]
    OwnCgroupNotVisible(PathBuf),
    /// A v2 controller could not be enabled for our subtree.
    #[error("cgroup v2 controller {controller} is not available in {path}")]
    MissingController {
        /// The controller concerned.
        controller: String,
        /// The file or folder concerned.
        path: PathBuf,
    },
    /// A cgroup folder could not be made.
    #[error("creating cgroup {path}: {source}")]
    Create {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A control file could not be written.
    #[error("writing {value:?} to {path}: {source}")]
    Write {
        /// The file or folder concerned.
        path: PathBuf,
        /// The value concerned.
        value: String,
        /// What failed underneath.
        source: io::Error,
    },
    /// A control file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A v1 memory controller without socket-buffer accounting: loopback socket
    /// buffers would be held by the kernel outside every limit.
    #[error(
        "{0} is missing: this kernel's cgroup v1 memory controller cannot limit socket \
         buffers (it needs CONFIG_MEMCG_KMEM, or use cgroup v2)"
    )]
    NoSocketLimit(PathBuf),
    /// A v1 host without the freezer controller mounted.
    #[error(
        "the cgroup v1 freezer is not mounted at {0}: the runner freezes a session's \
         processes between its calls with it (a frozen process takes no signal, so no \
         program can wake itself). Mount it (mount -t cgroup -o freezer freezer {0}), or \
         give up every cgroup limit with --unsafe-no-resource-limits"
    )]
    NoV1Freezer(PathBuf),
    /// A v2 kernel without the freezer (before Linux 5.2).
    #[error(
        "{0} is missing: this kernel's cgroup v2 has no freezer (Linux 5.2 and later \
         have it), with which the runner freezes a session's processes between its calls"
    )]
    NoV2Freezer(PathBuf),
    /// The freezer did not stop every process of a cgroup in time.
    #[error("the processes of cgroup {path} were not all frozen within {limit:?}")]
    FreezeTimeout {
        /// The cgroup's folder.
        path: PathBuf,
        /// The time allowed.
        limit: Duration,
    },
    /// A cgroup still held processes, or could not be removed, after the time allowed.
    #[error("removing cgroup {path}: {source}")]
    Remove {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
}

/// The limits every sandbox's cgroup gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimits {
    /// Memory in bytes, swap not allowed.
    pub memory_bytes: u64,
    /// CPU time allowed per period, in microseconds.
    pub cpu_quota_us: u64,
    /// The CPU accounting period, in microseconds.
    pub cpu_period_us: u64,
    /// The most processes (and threads) at once.
    pub pids_max: u64,
}

impl CgroupLimits {
    /// On cgroup v1 the kernel keeps TCP and UDP buffers in a counter of their own,
    /// outside `memory.limit_in_bytes` (v2 counts them in `memory.max`): a sixteenth of
    /// the memory limit is set aside for them, and the rest is the limit of everything
    /// else, so that the two together stay within `memory_bytes`.
    pub fn v1_socket_bytes(&self) -> u64 {
        self.memory_bytes / v1::SOCKET_SHARE
    }
}

/// Which cgroup version the host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// One hierarchy per controller.
    V1,
    /// The unified hierarchy.
    V2,
}

/// This runner instance's place in the host's cgroup trees.
#[derive(Debug)]
pub struct Hierarchy {
    version: Version,
    /// The `sandbox-runner` folder of each tree (one for v2, one per controller for v1).
    tops: Vec<PathBuf>,
    instance: String,
    fs: Arc<dyn CgroupFs>,
}

impl Hierarchy {
    /// Finds the hierarchy under `mount` (normally `/sys/fs/cgroup`) and makes this
    /// instance's folders at its root, with the controllers enabled (as root); in a
    /// container ([`in_container`]), below the container's own cgroup instead
    /// (`container.rs`).
    pub fn open(mount: &Path, instance: &str) -> Result<Self, CgroupError> {
        if in_container() {
            return Self::open_in_container(mount, instance);
        }
        Self::open_with(Arc::new(HostFs), mount, instance)
    }

    /// [`open`](Self::open) on the cgroup file systems `fs` gives access to.
    pub fn open_with(
        fs: Arc<dyn CgroupFs>,
        mount: &Path,
        instance: &str,
    ) -> Result<Self, CgroupError> {
        let (version, tops) = if v2::detect(&*fs, mount) {
            v2::enable_controllers(&*fs, mount)?;
            (Version::V2, vec![mount.join(TOP)])
        } else if v1::detect(&*fs, mount) {
            freezer::check_v1(&*fs, mount)?;
            (Version::V1, v1::tops(mount))
        } else {
            return Err(CgroupError::NoHierarchy(mount.to_owned()));
        };
        Self::make(fs, version, tops, instance)
    }

    /// For a runner without root: makes this instance's folders below the cgroup v2
    /// subtree delegated to this process's user, the one it runs in (see `delegated.rs`:
    /// its processes move to a leaf of their own first).
    pub fn open_delegated(mount: &Path, instance: &str) -> Result<Self, CgroupError> {
        let file = Path::new("/proc/self/cgroup");
        let text = std::fs::read_to_string(file).map_err(|source| CgroupError::Read {
            path: file.to_owned(),
            source,
        })?;
        let own = own_path(&text).ok_or_else(|| CgroupError::NoUnified(mount.to_owned()))?;
        Self::open_delegated_with(Arc::new(HostFs), mount, &own, instance)
    }

    /// [`open_delegated`](Self::open_delegated) for a process whose cgroup is `own`
    /// (relative to `mount`), on the cgroup file system `fs` gives access to.
    pub fn open_delegated_with(
        fs: Arc<dyn CgroupFs>,
        mount: &Path,
        own: &Path,
        instance: &str,
    ) -> Result<Self, CgroupError> {
        let base = delegated::prepare(&*fs, mount, own)?;
        Self::make(fs, Version::V2, vec![base.join(TOP)], instance)
    }

    /// Makes the `sandbox-runner` folders in `tops` and this instance's in them, with
    /// the controllers enabled level by level (v2), and checks that v2 cgroups there
    /// can be frozen (v1's freezer is checked with the controllers' mounts).
    fn make(
        fs: Arc<dyn CgroupFs>,
        version: Version,
        tops: Vec<PathBuf>,
        instance: &str,
    ) -> Result<Self, CgroupError> {
        for top in &tops {
            for dir in [top.clone(), top.join(instance)] {
                make_dir(&*fs, &dir)?;
                if version == Version::V2 {
                    v2::enable_controllers(&*fs, &dir)?;
                }
            }
            if version == Version::V2 {
                freezer::check_v2(&*fs, &top.join(instance))?;
            }
        }
        Ok(Hierarchy {
            version,
            tops,
            instance: instance.to_owned(),
            fs,
        })
    }

    /// The cgroup version in use.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Makes the cgroup of one sandbox, with its limits set, ready to be joined.
    pub fn create(&self, name: &str, limits: &CgroupLimits) -> Result<Cgroup, CgroupError> {
        let dirs: Vec<PathBuf> = self
            .tops
            .iter()
            .map(|t| t.join(&self.instance).join(name))
            .collect();
        for dir in &dirs {
            make_dir(&*self.fs, dir)?;
        }
        let cgroup = self.cgroup(dirs);
        if let Err(e) = cgroup.set_limits(limits) {
            let _ = cgroup.kill_and_remove();
            return Err(e);
        }
        Ok(cgroup)
    }

    /// Removes what runner instances that are no longer alive left behind: their
    /// sandboxes' processes are killed and their cgroups removed. Returns how many
    /// sandbox cgroup folders were removed.
    pub fn remove_stale(&self) -> Result<usize, CgroupError> {
        let fs = &*self.fs;
        let mut instances = Vec::new();
        let mut sandboxes = Vec::new();
        for top in &self.tops {
            for instance in list_dirs(fs, top)? {
                let name = file_name(&instance);
                if name == self.instance || instance_alive(&name) {
                    continue;
                }
                sandboxes.extend(list_dirs(fs, &instance)?);
                instances.push(instance);
            }
        }
        self.remove_all(&sandboxes, &instances)?;
        Ok(sandboxes.len())
    }

    /// Kills what is in the `sandboxes` folders and removes them, then the `instances`
    /// folders that held them. A session may be frozen, and on v1 its freezer folder is
    /// in a tree of its own: every process is killed and thawed before any folder waits
    /// for its processes to go.
    fn remove_all(&self, sandboxes: &[PathBuf], instances: &[PathBuf]) -> Result<(), CgroupError> {
        let fs = &*self.fs;
        release(fs, sandboxes);
        for sandbox in sandboxes {
            self.cgroup(vec![sandbox.clone()]).kill_and_remove()?;
        }
        for instance in instances {
            remove_dir(fs, instance)?;
        }
        Ok(())
    }

    /// Kills every process in this instance's sandbox cgroups, frozen or not (they stay,
    /// to be removed by their sandboxes' destruction).
    pub fn kill_all(&self) {
        let fs = &*self.fs;
        let sandboxes: Vec<PathBuf> = self
            .tops
            .iter()
            .flat_map(|top| list_dirs(fs, &top.join(&self.instance)).unwrap_or_default())
            .collect();
        release(fs, &sandboxes);
    }

    /// Removes this instance's folders, at shutdown, once every sandbox was destroyed:
    /// a sandbox's folder its destruction left (its processes slower to go than
    /// [`Cgroup::kill_and_remove`] waits, on a host too busy to end them in time) is
    /// killed and removed first.
    pub fn remove_instance(&self) -> Result<(), CgroupError> {
        let fs = &*self.fs;
        let instances: Vec<PathBuf> = self.tops.iter().map(|t| t.join(&self.instance)).collect();
        let left: Vec<PathBuf> = instances
            .iter()
            .flat_map(|instance| list_dirs(fs, instance).unwrap_or_default())
            .collect();
        self.remove_all(&left, &instances)
    }

    fn cgroup(&self, dirs: Vec<PathBuf>) -> Cgroup {
        Cgroup {
            version: self.version,
            dirs,
            fs: self.fs.clone(),
        }
    }
}

/// The name of this runner's instance folder.
pub fn instance_name() -> String {
    format!("r{}", std::process::id())
}

/// Whether the runner that owns an instance's folders (`r<pid>`: its cgroups, its VM
/// folders) still runs; a name of another form is not ours, and counts as alive.
pub fn instance_alive(name: &str) -> bool {
    match name.strip_prefix('r').and_then(|p| p.parse::<i32>().ok()) {
        Some(pid) => Path::new(&format!("/proc/{pid}")).exists(),
        None => true, // not ours to remove
    }
}

/// One sandbox's cgroup (one folder per tree).
#[derive(Debug)]
pub struct Cgroup {
    version: Version,
    /// One folder for v2; for v1, one per controller, in [`v1::CONTROLLERS`]'s order.
    dirs: Vec<PathBuf>,
    fs: Arc<dyn CgroupFs>,
}

impl Cgroup {
    fn set_limits(&self, limits: &CgroupLimits) -> Result<(), CgroupError> {
        match self.version {
            Version::V1 => v1::set_limits(&*self.fs, &self.dirs, limits),
            Version::V2 => v2::set_limits(&*self.fs, &self.dirs[0], limits),
        }
    }

    /// Raises the memory limit to `memory_bytes` (a language whose row asks for more
    /// than every sandbox gets). Never lowers it: a value at or below the current limit
    /// is the caller's mistake, refused by the kernel when usage is above it.
    pub fn raise_memory(&self, memory_bytes: u64) -> Result<(), CgroupError> {
        match self.version {
            Version::V1 => v1::raise_memory(&*self.fs, &self.dirs, memory_bytes),
            Version::V2 => write(&*self.fs, &self.dirs[0].join("memory.max"), memory_bytes),
        }
    }

    /// The freezer of this cgroup.
    pub fn freezer(&self) -> Freezer {
        let dir = match self.version {
            Version::V1 => v1::dir(&self.dirs, freezer::V1_CONTROLLER),
            Version::V2 => &self.dirs[0],
        };
        Freezer::new(self.version, dir.to_owned(), self.fs.clone())
    }

    /// The `cgroup.procs` files a process writes its pid to, to join this cgroup.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// How many processes the out-of-memory killer has killed in this cgroup.
    pub fn oom_kills(&self) -> Result<u64, CgroupError> {
        let path = match self.version {
            Version::V1 => v1::oom_control(&self.dirs),
            Version::V2 => v2::memory_events(&self.dirs[0]),
        };
        let text = self.fs.read(&path).map_err(|source| CgroupError::Read {
            path: path.clone(),
            source,
        })?;
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0))
    }

    /// Kills every process in the cgroup, frozen or not, and removes it. Blocks
    /// (briefly) until the processes are gone.
    pub fn kill_and_remove(&self) -> Result<(), CgroupError> {
        let deadline = Instant::now() + REMOVE_LIMIT;
        if self.version == Version::V2 {
            v2::kill(&*self.fs, &self.dirs[0]);
        }
        release(&*self.fs, &self.dirs);
        for dir in &self.dirs {
            remove_when_empty(&*self.fs, dir, deadline)?;
        }
        Ok(())
    }
}

/// Kills what is in `dir` until it is empty, then removes it.
fn remove_when_empty(fs: &dyn CgroupFs, dir: &Path, deadline: Instant) -> Result<(), CgroupError> {
    loop {
        if !fs.exists(dir) {
            return Ok(());
        }
        kill_procs(fs, dir);
        match fs.remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(source) if Instant::now() >= deadline => {
                return Err(CgroupError::Remove {
                    path: dir.to_owned(),
                    source,
                })
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Sends SIGKILL to every process of the cgroup folders `dirs`, then thaws those that
/// are a freezer's: a process the v1 freezer holds takes its SIGKILL only once thawed,
/// and is thawed only once it has it, so that it never runs again.
fn release(fs: &dyn CgroupFs, dirs: &[PathBuf]) {
    for dir in dirs {
        kill_procs(fs, dir);
    }
    for dir in dirs {
        freezer::thaw_dir(fs, dir);
    }
}

/// Sends SIGKILL to every process listed in a cgroup.
fn kill_procs(fs: &dyn CgroupFs, dir: &Path) {
    let procs = fs.read(&dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        // ESRCH: it died between the read and the kill.
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

fn write(fs: &dyn CgroupFs, path: &Path, value: impl ToString) -> Result<(), CgroupError> {
    let value = value.to_string();
    fs.write(path, &value).map_err(|source| CgroupError::Write {
        path: path.to_owned(),
        value,
        source,
    })
}

fn make_dir(fs: &dyn CgroupFs, path: &Path) -> Result<(), CgroupError> {
    match fs.create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {
            Err(CgroupError::ReadOnly(path.to_owned()))
        }
        Err(source) => Err(CgroupError::Create {
            path: path.to_owned(),
            source,
        }),
    }
}

fn remove_dir(fs: &dyn CgroupFs, path: &Path) -> Result<(), CgroupError> {
    match fs.remove_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(CgroupError::Remove {
            path: path.to_owned(),
            source,
        }),
    }
}

fn list_dirs(fs: &dyn CgroupFs, path: &Path) -> Result<Vec<PathBuf>, CgroupError> {
    match fs.list_dirs(path) {
        Ok(dirs) => Ok(dirs),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(CgroupError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
