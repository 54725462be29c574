//! The resolver's confinement on a runner: where pip runs while a program's inline
//! dependencies are resolved and installed ([`sandbox_packages::Confinement`]).
//!
//! Each resolution gets a scratch of its own, made in this order:
//! 1. a folder `<state>/deps/<instance>/resolve/<n>` (below a private bind mount, so
//!    nothing mounted there propagates anywhere), with a tmpfs of the size asked for
//!    (the policy's limit and a margin): everything the resolution writes (pip's
//!    temporary files, downloads, the installed tree) is there, and nothing more fits;
//! 2. a cgroup of this runner's instance (`deps<n>`, beside the sandboxes'): memory (the
//!    tmpfs and 512 MiB for pip), one CPU, 64 processes;
//! 3. each process it starts (pip, the interpreter) joins that cgroup, leaves the
//!    runner's session, drops to the resolver's own host user (`RUNNER_ID_BASE + 3`, no
//!    groups), takes no_new_privs, dies with the runner (parent-death signal), closes
//!    every descriptor it inherited, and runs with an environment built from nothing:
//!    pip's own settings ([`sandbox_packages::pip_environment`]) and its folders.
//!
//! Dropping the scratch kills whatever still runs in the cgroup, removes the cgroup,
//! and unmounts and removes the folder: whatever ended the resolution (done, refused,
//! timed out, the caller gone, the runner stopping), nothing of it stays on the host.
//! What a killed runner leaves is removed by the next one (the folder by the deps
//! mounts' start-up, the cgroup with the dead instance's).

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use sandbox_jail::cgroup::{Cgroup, CgroupLimits, Hierarchy};
use sandbox_packages::{ConfineError, Confinement, Scratch};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::process::Command;

/// The resolver's host id: `RUNNER_ID_BASE + 3`, after the templates' two.
pub const RESOLVER_ID_OFFSET: u32 = 3;
/// Memory for pip itself, beyond its scratch's tmpfs (charged to the same cgroup).
const PIP_MEMORY: u64 = 512 << 20;
/// A scratch's inodes: more than a set within the size limit has files.
const SCRATCH_INODES: u64 = 262_144;
/// The variables a confined process gets besides pip's settings.
const PATH: &str = "/usr/bin:/bin";

/// Makes scratches for the resolver (see the module documentation).
#[derive(Debug)]
pub struct ResolverJail {
    /// `<state>/deps/<instance>/resolve`.
    root: PathBuf,
    uid: u32,
    /// `None`: the operator turned resource limits off (`--unsafe-no-resource-limits`).
    hierarchy: Option<Arc<Hierarchy>>,
    /// pip's settings, read from the runner's environment at start.
    env: BTreeMap<String, String>,
    next: AtomicU64,
}

impl ResolverJail {
    /// Prepares `<state_dir>/deps/<instance>/resolve` and this runner's cgroups (none
    /// with `hierarchy` `None`), for scratches of host user `uid`.
    pub fn new(
        state_dir: &Path,
        instance: &str,
        uid: u32,
        hierarchy: Option<Arc<Hierarchy>>,
    ) -> Result<ResolverJail, ConfineError> {
        let root = state_dir.join("deps").join(instance).join("resolve");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(&root)
            .map_err(|source| confine_error("making", &root, source))?;
        searchable_by_all(&root)?;
        mount_step(Some(&root), &root, None, MsFlags::MS_BIND, None)?;
        mount_step(None, &root, None, MsFlags::MS_PRIVATE, None)?;
        Ok(ResolverJail {
            root,
            uid,
            hierarchy,
            env: sandbox_packages::pip_environment(std::env::vars()),
            next: AtomicU64::new(0),
        })
    }

    fn make(&self, space: u64) -> Result<JailedScratch, ConfineError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.root.join(n.to_string());
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|source| confine_error("making", &dir, source))?;
        let mut scratch = JailedScratch {
            dir,
            mounted: false,
            cgroup: None,
            procs: Arc::new(Vec::new()),
            uid: self.uid,
            env: self.env.clone(),
        };
        let options = format!(
            "size={space},nr_inodes={SCRATCH_INODES},mode=0700,uid={uid},gid={uid}",
            uid = self.uid
        );
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        mount_step(
            Some(Path::new("tmpfs")),
            &scratch.dir,
            Some("tmpfs"),
            flags,
            Some(&options),
        )?;
        scratch.mounted = true;
        if let Some(hierarchy) = &self.hierarchy {
            let limits = CgroupLimits {
                memory_bytes: space + PIP_MEMORY,
                cpu_quota_us: 100_000,
                cpu_period_us: 100_000,
                pids_max: 64,
            };
            let cgroup = hierarchy
                .create(&format!("deps{n}"), &limits)
                .map_err(|e| {
                    confine_error("making the cgroup of", &scratch.dir, io::Error::other(e))
                })?;
            let procs = cgroup
                .procs_files()
                .iter()
                .map(|file| open_procs(file))
                .collect::<Result<Vec<OwnedFd>, ConfineError>>();
            scratch.cgroup = Some(cgroup);
            scratch.procs = Arc::new(procs?);
        }
        Ok(scratch)
    }
}

impl Confinement for ResolverJail {
    fn scratch(&self, space: u64) -> Result<Box<dyn Scratch>, ConfineError> {
        Ok(Box::new(self.make(space)?))
    }
}

/// One resolution's scratch (see the module documentation).
struct JailedScratch {
    dir: PathBuf,
    mounted: bool,
    cgroup: Option<Cgroup>,
    /// The cgroup's `cgroup.procs` files, opened by the runner: a child writes to them
    /// before it drops to the resolver's user.
    procs: Arc<Vec<OwnedFd>>,
    uid: u32,
    env: BTreeMap<String, String>,
}

impl Scratch for JailedScratch {
    fn dir(&self) -> &Path {
        &self.dir
    }

    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .envs(&self.env)
            .env("HOME", &self.dir)
            .env("TMPDIR", &self.dir)
            .env("PATH", PATH)
            .env("LANG", "C.UTF-8")
            .env("PIP_NO_CACHE_DIR", "1")
            .current_dir(&self.dir);
        let procs = self.procs.clone();
        let uid = self.uid;
        // SAFETY: the closure runs in the child between fork and exec, and makes only
        // async-signal-safe system calls on values prepared before the fork (the
        // descriptors stay open: the closure holds their Arc).
        unsafe {
            cmd.pre_exec(move || confine_child(procs.iter().map(AsRawFd::as_raw_fd), uid));
        }
        cmd
    }

    fn out_of_memory(&self) -> bool {
        self.cgroup
            .as_ref()
            .and_then(|cgroup| cgroup.oom_kills().ok())
            .is_some_and(|kills| kills > 0)
    }
}

impl Drop for JailedScratch {
    fn drop(&mut self) {
        if let Some(cgroup) = &self.cgroup {
            if let Err(e) = cgroup.kill_and_remove() {
                tracing::warn!(error = %e, "the resolver's cgroup was left behind");
            }
        }
        if self.mounted {
            if let Err(e) = umount2(&self.dir, MntFlags::MNT_DETACH) {
                tracing::warn!(dir = %self.dir.display(), error = %e, "the resolver's scratch stays mounted");
            }
        }
        if let Err(e) = fs::remove_dir(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "the resolver's scratch was left behind");
        }
    }
}

/// In the child, between fork and exec: joins the cgroup (as root, through the
/// descriptors the runner opened), leaves the runner's session, drops every privilege
/// for good, and marks every other descriptor close-on-exec. Only async-signal-safe
/// calls: no allocation, no lock.
fn confine_child(procs: impl Iterator<Item = RawFd>, uid: u32) -> io::Result<()> {
    let check = |ret: libc::c_int| {
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: plain system calls on integers and pointers to locals, valid for the call.
    unsafe {
        check(libc::setsid())?;
        for fd in procs {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        let core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        check(libc::setrlimit(libc::RLIMIT_CORE, &core))?;
        let files = libc::rlimit {
            rlim_cur: 1024,
            rlim_max: 1024,
        };
        check(libc::setrlimit(libc::RLIMIT_NOFILE, &files))?;
        check(libc::setgroups(0, std::ptr::null()))?;
        check(libc::setresgid(uid, uid, uid))?;
        check(libc::setresuid(uid, uid, uid))?;
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        // After the change of user, which clears it.
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        libc::umask(0o077);
        let from: libc::c_uint = 3;
        check(libc::syscall(
            libc::SYS_close_range,
            from,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) as libc::c_int)?;
    }
    Ok(())
}

/// Every folder from `/` to `dir` must let other users through: the resolver's user
/// reaches its scratch by path.
fn searchable_by_all(dir: &Path) -> Result<(), ConfineError> {
    for ancestor in dir.ancestors() {
        let meta =
            fs::metadata(ancestor).map_err(|source| confine_error("reading", ancestor, source))?;
        if meta.mode() & 0o001 == 0 {
            return Err(confine_error(
                "checking",
                ancestor,
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "other users may not pass through it, and the resolver runs as a user of \
                     its own: make it searchable (chmod o+x), or choose another RUNNER_STATE_DIR",
                ),
            ));
        }
    }
    Ok(())
}

fn open_procs(file: &Path) -> Result<OwnedFd, ConfineError> {
    fs::OpenOptions::new()
        .write(true)
        .open(file)
        .map(OwnedFd::from)
        .map_err(|source| confine_error("opening", file, source))
}

fn mount_step(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), ConfineError> {
    mount(source, target, fstype, flags, data)
        .map_err(|e| confine_error("mounting", target, e.into()))
}

fn confine_error(step: &'static str, path: &Path, source: io::Error) -> ConfineError {
    ConfineError {
        step,
        path: path.to_owned(),
        source,
    }
}
