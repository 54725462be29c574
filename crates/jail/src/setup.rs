//! The jail: the single-threaded program that turns itself into a sandbox and then
//! becomes the agent.
//!
//! The runner (process backend) or a VM's init (inside the guest) starts it as
//! `<own binary> __sandbox-jail <spec JSON>` with a clean environment, the agent channel
//! as descriptor 3 and standard error where its failure should be read (a pipe to the
//! runner, the guest's console). Below, "host" is whatever runs the jail: the host, or
//! the guest's root. Its steps, in the order the kernel needs them:
//!
//! outside (host root, in the sandbox's cgroup):
//! 1. [`sanitize`]: close every inherited descriptor above 3, drop supplementary groups;
//! 2. [`join_cgroup`]: move into the sandbox's cgroup (all children inherit it);
//! 3. [`Stage::make`]: a mount namespace of the jail's own, with the staging tmpfs
//!    (this sandbox's device nodes, the sources of the masks);
//! 4. [`clone_as_owner`]: `clone` into new user, PID, mount, network, IPC, UTS and
//!    cgroup namespaces, as the sandbox's own host identity where the kernel lets an
//!    unprivileged user do so (the user namespace's owner is then that identity, and
//!    every per-user count the kernel keeps for what happens inside is charged to it,
//!    never to host root);
//! 5. [`write_id_maps`]: map sandbox root (the agent) and the sandbox user (the
//!    program) to this sandbox's two host ids, then let the child go on, and wait.
//!
//! inside (PID 1 of the new namespaces, root there):
//! 6. [`rootfs::build_root`]: the sandbox's tree (see [`rootfs`]);
//! 7. [`enter_root`]: pivot_root into it, detach the host's tree, make / read-only;
//! 8. the loopback interface up ([`crate::net::loopback_up`]), [`set_rlimits`];
//! 9. [`agent_privileges`]: keep only the capabilities the agent needs to start the
//!    program as the sandbox user and to end it ([`AGENT_CAPS`]), set no_new_privs;
//! 10. install the seccomp filter and `execveat` the agent (this same binary, opened
//!     before the clone) with an empty environment ([`crate::exec`]). The agent stays
//!     sandbox root; it runs each program as the sandbox user, which can neither
//!     signal, trace, re-limit nor re-prioritise it.
//!
//! Any failing step writes `sandbox-jail: <step>: <error>` to standard error and exits
//! 1, so the runner can say exactly which layer could not be set up.

use crate::error::JailError;
use crate::layout::{HOME, SANDBOX_UID};
use crate::rootfs::{self, prepare, remount, HostView, ShownFolders, Stage};
use crate::seccomp;
use crate::spec::{HostIds, JailSpec, Rootless};
use nix::mount::{umount2, MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{chdir, pivot_root, sethostname, setresgid, setresuid, Gid, Pid, Uid};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// The first argument that selects the jail in a multicall binary.
pub const JAIL_ARG: &str = "__sandbox-jail";
/// The first argument that selects the agent in a multicall binary.
pub const AGENT_ARG: &str = "__sandbox-agent";
/// The descriptor the agent channel is inherited on.
pub const CHANNEL_FD: RawFd = 3;
/// What the agent keeps of sandbox root's capabilities (in the sandbox's user namespace
/// only): to make the program the sandbox user (SETUID, SETGID), to empty the program's
/// bounding set (SETPCAP), and to end it (KILL).
pub const AGENT_CAPS: &[u32] = &[CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP];
/// Capability numbers (linux/capability.h), which the libc crate does not name.
const CAP_KILL: u32 = 5;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const CAP_SETPCAP: u32 = 8;
/// Real-time and queued signals a sandbox user may have pending.
pub const SIGPENDING_MAX: u64 = 256;
/// Bytes of memory a sandbox may lock (Linux's default), whatever its maker's limit.
pub const MEMLOCK_MAX: u64 = 8 * 1024 * 1024;

/// In a forked child before it executes the jail: puts the channel `fd` on
/// [`CHANNEL_FD`], inheritable. Only async-signal-safe calls (`dup2`, `fcntl`), no
/// allocation: fit for `pre_exec`.
pub fn channel_to_fd3(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl and dup2 take plain descriptors and touch no memory of ours.
    let rc = unsafe {
        if fd == CHANNEL_FD {
            // dup2 onto itself would keep close-on-exec set.
            libc::fcntl(CHANNEL_FD, libc::F_SETFD, 0)
        } else {
            libc::dup2(fd, CHANNEL_FD)
        }
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs the jail with the spec given on the command line; never returns on success
/// (the process becomes the agent). Returns the exit code on failure.
pub fn main(spec_json: &str) -> i32 {
    match run(spec_json) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sandbox-jail: {e}");
            1
        }
    }
}

fn run(spec_json: &str) -> Result<i32, JailError> {
    let spec: JailSpec = serde_json::from_str(spec_json)?;
    sanitize(spec.rootless.is_none())?;
    let exe = open_self()?;
    join_cgroup(&spec.cgroup_procs)?;
    // Root stages in a mount namespace of the jail's own, and shows the package set
    // there (see `ShownFolders`); an ordinary user can make one only inside the new user
    // namespace, so the child does it there, and reaches the set by its host path.
    let (stage, sources) = match spec.rootless {
        None => {
            let stage = Stage::make(&spec.stage_dir)?;
            let shown = ShownFolders::show(spec.packages.as_deref(), &stage.packages())?;
            (Some(stage), shown)
        }
        Some(_) => (None, ShownFolders::at_host_path(spec.packages.as_deref())),
    };
    let host = HostView::read()?;
    let (ready_rx, ready_tx) = pipe()?;
    let owner = (spec.unprivileged_owner && spec.rootless.is_none()).then_some(spec.ids.root);
    match clone_as_owner(owner, true)? {
        None => {
            drop(ready_tx);
            Ok(inside(&spec, &host, stage, sources, exe, ready_rx))
        }
        Some(child) => {
            drop(ready_rx);
            match &spec.rootless {
                None => write_id_maps(child, spec.ids, spec.gids)?,
                Some(helpers) => map_ids_with_helpers(child, helpers, spec.ids, spec.gids)?,
            }
            File::from(ready_tx)
                .write_all(b"1")
                .map_err(JailError::Sync)?;
            wait_exit_code(child)
        }
    }
}

/// Step 1: no descriptor but 0-3 survives, and (as root) no supplementary group. An
/// ordinary user cannot drop theirs: the sandbox keeps them, unmapped (documented).
fn sanitize(as_root: bool) -> Result<(), JailError> {
    // SAFETY: close_range only closes descriptors; nothing in this fresh, single-threaded
    // process holds one above 3.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, CHANNEL_FD + 1, u32::MAX, 0) };
    if rc != 0 {
        return Err(JailError::Sanitize(io::Error::last_os_error()));
    }
    if !as_root {
        return Ok(());
    }
    nix::unistd::setgroups(&[]).map_err(JailError::Groups)
}

fn open_self() -> Result<OwnedFd, JailError> {
    let file = File::open("/proc/self/exe").map_err(JailError::OpenSelf)?;
    Ok(OwnedFd::from(file))
}

/// Step 2.
fn join_cgroup(procs: &[PathBuf]) -> Result<(), JailError> {
    let pid = std::process::id().to_string();
    for path in procs {
        fs::write(path, &pid).map_err(|source| JailError::JoinCgroup {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), JailError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| JailError::Sync(e.into()))
}

/// Step 4: [`clone_namespaces`] with the effective ids of `owner` (uid and gid), when
/// given, so that the new user namespace is owned by it; the parent then returns to
/// host root (its real and saved ids never left it) to write the id maps.
pub(crate) fn clone_as_owner(
    owner: Option<u32>,
    cgroup_ns: bool,
) -> Result<Option<Pid>, JailError> {
    let Some(id) = owner else {
        return clone_namespaces(cgroup_ns);
    };
    let keep_uid = Uid::from_raw(u32::MAX);
    let keep_gid = Gid::from_raw(u32::MAX);
    let taken = setresgid(keep_gid, Gid::from_raw(id), keep_gid)
        .and_then(|()| setresuid(keep_uid, Uid::from_raw(id), keep_uid));
    taken.map_err(|source| JailError::Owner { uid: id, source })?;
    // The change of ids made this process not dumpable; the child would inherit that,
    // and its /proc files would be host root's, which only host root may write (a
    // template's root may not). Dumpable, they are its identity's; its own first change
    // of ids (to sandbox root) makes it not dumpable again.
    nix::sys::prctl::set_dumpable(true).map_err(|source| JailError::Owner { uid: id, source })?;
    let cloned = clone_namespaces(cgroup_ns);
    if let Ok(None) = cloned {
        return cloned; // the child: it becomes sandbox root once the maps are written
    }
    let root_uid = Uid::from_raw(0);
    let root_gid = Gid::from_raw(0);
    setresuid(root_uid, root_uid, root_uid)
        .and_then(|()| setresgid(root_gid, root_gid, root_gid))
        .map_err(JailError::Restore)?;
    cloned
}

/// `Some(child)` in the parent, `None` in the child; a cgroup namespace too with
/// `cgroup_ns` (else the child unshares one once it is in its cgroups).
fn clone_namespaces(cgroup_ns: bool) -> Result<Option<Pid>, JailError> {
    let mut flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    if cgroup_ns {
        flags |= CloneFlags::CLONE_NEWCGROUP;
    }
    // SAFETY: a clone without CLONE_VM and with a null stack behaves like fork: the child
    // gets a copy of this single-threaded process's memory and continues on its own copy
    // of the stack. No lock can be held by another thread, since there is none.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags.bits() as libc::c_ulong | libc::SIGCHLD as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    match rc {
        -1 => Err(JailError::Clone(io::Error::last_os_error())),
        0 => Ok(None),
        pid => Ok(Some(Pid::from_raw(pid as i32))),
    }
}

/// Step 5: sandbox root -> `ids.root`, the sandbox user -> `ids.user` (and the same for
/// groups); no other id exists inside, and setgroups is denied.
pub(crate) fn write_id_maps(child: Pid, ids: HostIds, gids: HostIds) -> Result<(), JailError> {
    let map = |ids: HostIds| format!("0 {} 1\n{SANDBOX_UID} {} 1\n", ids.root, ids.user);
    let (uid_map, gid_map) = (map(ids), map(gids));
    let proc_dir = PathBuf::from(format!("/proc/{child}"));
    for (file, content) in [
        ("setgroups", "deny"),
        ("uid_map", uid_map.as_str()),
        ("gid_map", gid_map.as_str()),
    ] {
        let path = proc_dir.join(file);
        fs::write(&path, content).map_err(|source| JailError::IdMap { path, source })?;
    }
    Ok(())
}

/// Step 5 for an ordinary user: the same maps, written by the setuid helpers, which
/// check them against the user's subordinate ids; setgroups is denied first (the
/// helpers leave it so when the map does not hold the caller's own group).
fn map_ids_with_helpers(
    child: Pid,
    helpers: &Rootless,
    ids: HostIds,
    gids: HostIds,
) -> Result<(), JailError> {
    let setgroups = PathBuf::from(format!("/proc/{child}/setgroups"));
    fs::write(&setgroups, "deny").map_err(|source| JailError::IdMap {
        path: setgroups,
        source,
    })?;
    for (helper, ids) in [(&helpers.newuidmap, ids), (&helpers.newgidmap, gids)] {
        let failed = |said: String| JailError::IdHelper {
            helper: helper.clone(),
            said,
        };
        let out = std::process::Command::new(helper)
            .arg(child.to_string())
            .args(["0", &ids.root.to_string(), "1"])
            .args([&SANDBOX_UID.to_string(), &ids.user.to_string(), "1"])
            .env_clear()
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| failed(e.to_string()))?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            return Err(failed(format!("{} ({said})", out.status)));
        }
    }
    Ok(())
}

pub(crate) fn wait_exit_code(child: Pid) -> Result<i32, JailError> {
    loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(128 + sig as i32),
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(JailError::Wait(e)),
        }
    }
}

/// The child's side: steps 6 to 10. Returns only on failure, with the exit code.
fn inside(
    spec: &JailSpec,
    host: &HostView,
    stage: Option<Stage>,
    sources: ShownFolders,
    exe: OwnedFd,
    ready: OwnedFd,
) -> i32 {
    let entered = wait_for_parent(ready).and_then(|()| enter(spec, host, stage, sources, true));
    let error = match entered {
        Ok(()) => crate::exec::exec_agent(&exe, &[AGENT_ARG]),
        Err(e) => e,
    };
    eprintln!("sandbox-jail: {error}");
    1
}

/// Steps 6 to 10 but the exec, in the new namespaces once the ids are mapped: the
/// process is then the sandbox's agent-to-be, confined as the agent is. Without a
/// `stage` (the jail could not make one as host root), it is made here. With
/// `die_with_parent` the sandbox ends when its parent (the jail) does. `host` is the
/// host as its maker read it before the clone, `sources` where it showed the host
/// folders the tree shows.
pub(crate) fn enter(
    spec: &JailSpec,
    host: &HostView,
    stage: Option<Stage>,
    sources: ShownFolders,
    die_with_parent: bool,
) -> Result<(), JailError> {
    setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0)).map_err(JailError::NsRoot)?;
    setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0)).map_err(JailError::NsRoot)?;
    if die_with_parent {
        // The sandbox ends with the jail (a change of ids cleared any earlier setting):
        // its first process dies, and with it every process of its PID namespace.
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
            .map_err(JailError::NsRoot)?;
    }
    sethostname("sandbox").map_err(JailError::Hostname)?;
    let mut sources = sources;
    let stage = match stage {
        Some(stage) => stage,
        None => {
            sources.hold()?;
            Stage::make_inside(&spec.stage_dir, spec.devices.as_deref())?
        }
    };
    rootfs::build_root(spec, &stage, host, &sources)?;
    drop(sources);
    enter_root(&stage.root())?;
    crate::net::loopback_up().map_err(JailError::Loopback)?;
    set_rlimits(spec)?;
    redirect_stdio()?;
    agent_privileges()?;
    Ok(seccomp::install(&seccomp::program()?)?)
}

pub(crate) fn wait_for_parent(ready: OwnedFd) -> Result<(), JailError> {
    let mut byte = [0u8; 1];
    File::from(ready)
        .read_exact(&mut byte)
        .map_err(JailError::Sync)
}

/// Step 7: the new root becomes `/`; the host's tree is detached; `/` is read-only.
fn enter_root(root: &Path) -> Result<(), JailError> {
    chdir(root).map_err(|e| prepare(root, e.into()))?;
    pivot_root(".", ".").map_err(JailError::PivotRoot)?;
    // After pivot_root(".", ".") the old root is stacked on top of the new one at ".".
    umount2(".", MntFlags::MNT_DETACH).map_err(|source| JailError::Mount {
        target: PathBuf::from("/ (old root)"),
        source,
    })?;
    chdir("/").map_err(|e| prepare(Path::new("/"), e.into()))?;
    remount(
        Path::new("/"),
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
    )?;
    chdir(HOME).map_err(|e| prepare(Path::new(HOME), e.into()))
}

/// Step 8b. No POSIX message queue (their bytes are a per-user kernel count), a small
/// budget of queued signals and of locked memory, and where the sandbox has no cgroup
/// its process cap.
fn set_rlimits(spec: &JailSpec) -> Result<(), JailError> {
    let mut limits = vec![
        (Resource::RLIMIT_CORE, 0),
        (Resource::RLIMIT_NOFILE, spec.nofile),
        (Resource::RLIMIT_FSIZE, spec.fsize_bytes),
        (Resource::RLIMIT_MSGQUEUE, 0),
        (
            Resource::RLIMIT_SIGPENDING,
            spec.sigpending.unwrap_or(SIGPENDING_MAX),
        ),
        (
            Resource::RLIMIT_MEMLOCK,
            spec.memlock_bytes.unwrap_or(MEMLOCK_MAX),
        ),
    ];
    if let Some(nproc) = spec.nproc {
        limits.push((Resource::RLIMIT_NPROC, nproc));
    }
    for (resource, value) in limits {
        setrlimit(resource, value, value)
            .map_err(|source| JailError::Rlimit { resource, source })?;
    }
    Ok(())
}

fn redirect_stdio() -> Result<(), JailError> {
    let null = File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(JailError::StdioRedirect)?;
    for fd in [0, 1] {
        // SAFETY: dup2 onto 0 and 1, which this process owns; null stays open meanwhile.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
            return Err(JailError::StdioRedirect(io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Step 9: of sandbox root's capabilities only [`AGENT_CAPS`] stay (every other one
/// leaves the bounding set, so the agent's exec cannot bring it back), and nothing can
/// be gained by an exec from here on.
fn agent_privileges() -> Result<(), JailError> {
    let last_cap: u32 = fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63);
    for cap in (0..=last_cap).filter(|c| !AGENT_CAPS.contains(c)) {
        // SAFETY: PR_CAPBSET_DROP takes a capability number and touches no memory.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(JailError::CapBound {
                cap,
                source: io::Error::last_os_error(),
            });
        }
    }
    nix::sys::prctl::set_no_new_privs().map_err(JailError::NoNewPrivs)
}
