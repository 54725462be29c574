//! The jail: the single-threaded program that turns itself into a sandbox and then
//! becomes the agent.
//!
//! The runner starts it as `<own binary> __sandbox-jail <spec JSON>` with a clean
//! environment, the agent channel as descriptor 3 and a pipe as standard error. Its
//! steps, in the order the kernel needs them:
//!
//! outside (host root, in the sandbox's cgroup):
//! 1. [`sanitize`]: close every inherited descriptor above 3, drop supplementary groups;
//! 2. [`join_cgroup`]: move into the sandbox's cgroup (all children inherit it);
//! 3. `clone` into new user, PID, mount, network, IPC, UTS and cgroup namespaces;
//! 4. [`write_id_maps`]: map sandbox root and the sandbox user to unprivileged host ids,
//!    then let the child go on, and wait for it.
//!
//! inside (PID 1 of the new namespaces):
//! 5. [`build_root`]: a tmpfs root with read-only binds of the system folders, a
//!    generated /etc, a new /proc, a minimal /dev, size-capped /tmp and home;
//! 6. [`enter_root`]: pivot_root into it, detach the host's tree, make / read-only;
//! 7. [`loopback_up`], [`set_rlimits`];
//! 8. [`drop_privileges`]: empty the capability bounding set, become the sandbox
//!    user (which clears every capability), set no_new_privs;
//! 9. install the seccomp filter and `execveat` the agent (this same binary, opened
//!    before the clone) with an empty environment.
//!
//! Any failing step writes `sandbox-jail: <step>: <error>` to standard error and exits
//! 1, so the runner can say exactly which layer could not be set up.

use super::seccomp::{self, SeccompError};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{chdir, pivot_root, sethostname, setresgid, setresuid, Gid, Pid, Uid};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// The first argument that selects the jail in a multicall binary.
pub const JAIL_ARG: &str = "__sandbox-jail";
/// The first argument that selects the agent in a multicall binary.
pub const AGENT_ARG: &str = "__sandbox-agent";
/// The descriptor the agent channel is inherited on.
pub const CHANNEL_FD: RawFd = 3;
/// The sandbox user's id inside the sandbox.
pub const SANDBOX_UID: u32 = 1000;

/// Host folders bound read-only into every sandbox (symlinks are copied as symlinks).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];
/// Host paths under /etc that programs need, bound read-only when present.
const ETC_BINDS: &[&str] = &["/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime"];
/// Host device nodes bound into /dev.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// What the runner tells the jail.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JailSpec {
    /// The `cgroup.procs` files to join.
    pub cgroup_procs: Vec<PathBuf>,
    /// An empty host folder to mount the new root on (in the private mount namespace).
    pub root_mount: PathBuf,
    /// The host uid (and gid) that sandbox root maps to; the sandbox user maps to
    /// `id_base + 1000`.
    pub id_base: u32,
    /// Size of /tmp in bytes.
    pub tmp_bytes: u64,
    /// Size of the home folder in bytes.
    pub home_bytes: u64,
    /// Most open files per process.
    pub nofile: u64,
    /// Largest file a process may write, in bytes.
    pub fsize_bytes: u64,
}

/// A jail step that failed.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error("bad jail spec: {0}")]
    Spec(#[from] serde_json::Error),
    #[error("closing inherited descriptors: {0}")]
    Sanitize(io::Error),
    #[error("opening own executable: {0}")]
    OpenSelf(io::Error),
    #[error("joining cgroup {path}: {source}")]
    JoinCgroup { path: PathBuf, source: io::Error },
    #[error("clearing supplementary groups: {0}")]
    Groups(nix::Error),
    #[error("creating the namespaces (clone): {0}")]
    Clone(io::Error),
    #[error("writing {path} for the user namespace: {source}")]
    IdMap { path: PathBuf, source: io::Error },
    #[error("waiting for the sandbox's first process: {0}")]
    Wait(nix::Error),
    #[error("synchronising with the parent: {0}")]
    Sync(io::Error),
    #[error("becoming root of the user namespace: {0}")]
    NsRoot(nix::Error),
    #[error("setting the hostname: {0}")]
    Hostname(nix::Error),
    #[error("mounting {target}: {source}")]
    Mount { target: PathBuf, source: nix::Error },
    #[error("preparing {path}: {source}")]
    Prepare { path: PathBuf, source: io::Error },
    #[error("pivot_root: {0}")]
    PivotRoot(nix::Error),
    #[error("bringing up the loopback interface: {0}")]
    Loopback(io::Error),
    #[error("setting rlimit {resource:?}: {source}")]
    Rlimit {
        resource: Resource,
        source: nix::Error,
    },
    #[error("dropping capability {cap} from the bounding set: {source}")]
    CapBound { cap: u32, source: io::Error },
    #[error("becoming the sandbox user: {0}")]
    SetUser(nix::Error),
    #[error("setting no_new_privs: {0}")]
    NoNewPrivs(nix::Error),
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
    #[error("redirecting standard input/output: {0}")]
    StdioRedirect(io::Error),
    #[error("executing the agent: {0}")]
    Exec(io::Error),
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
    sanitize()?;
    let exe = open_self()?;
    join_cgroup(&spec.cgroup_procs)?;
    let (ready_rx, ready_tx) = pipe()?;
    match clone_namespaces()? {
        None => {
            drop(ready_tx);
            Ok(inside(&spec, exe, ready_rx))
        }
        Some(child) => {
            drop(ready_rx);
            write_id_maps(child, spec.id_base)?;
            File::from(ready_tx)
                .write_all(b"1")
                .map_err(JailError::Sync)?;
            wait_exit_code(child)
        }
    }
}

/// Step 1: no descriptor but 0-3 survives, and no supplementary group.
fn sanitize() -> Result<(), JailError> {
    // SAFETY: close_range only closes descriptors; nothing in this fresh, single-threaded
    // process holds one above 3.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, CHANNEL_FD + 1, u32::MAX, 0) };
    if rc != 0 {
        return Err(JailError::Sanitize(io::Error::last_os_error()));
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

fn pipe() -> Result<(OwnedFd, OwnedFd), JailError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| JailError::Sync(e.into()))
}

/// Step 3: `Some(child)` in the parent, `None` in the child.
fn clone_namespaces() -> Result<Option<Pid>, JailError> {
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
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

/// Step 4: sandbox root -> `base`, the sandbox user -> `base + 1000`; no other id exists
/// inside, and setgroups is denied.
fn write_id_maps(child: Pid, base: u32) -> Result<(), JailError> {
    let map = format!("0 {base} 1\n{SANDBOX_UID} {} 1\n", base + SANDBOX_UID);
    let proc_dir = PathBuf::from(format!("/proc/{child}"));
    for (file, content) in [("setgroups", "deny"), ("uid_map", &map), ("gid_map", &map)] {
        let path = proc_dir.join(file);
        fs::write(&path, content).map_err(|source| JailError::IdMap { path, source })?;
    }
    Ok(())
}

fn wait_exit_code(child: Pid) -> Result<i32, JailError> {
    loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(128 + sig as i32),
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(JailError::Wait(e)),
        }
    }
}

/// The child's side: steps 5 to 9. Returns only on failure, with the exit code.
fn inside(spec: &JailSpec, exe: OwnedFd, ready: OwnedFd) -> i32 {
    let result = (|| -> Result<(), JailError> {
        wait_for_parent(ready)?;
        setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0))
            .map_err(JailError::NsRoot)?;
        setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0))
            .map_err(JailError::NsRoot)?;
        sethostname("sandbox").map_err(JailError::Hostname)?;
        build_root(spec)?;
        enter_root(&spec.root_mount)?;
        loopback_up()?;
        set_rlimits(spec)?;
        redirect_stdio()?;
        drop_privileges()?;
        let programs = seccomp::programs()?;
        seccomp::install(&programs)?;
        exec_agent(&exe)
    })();
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sandbox-jail: {e}");
            1
        }
    }
}

fn wait_for_parent(ready: OwnedFd) -> Result<(), JailError> {
    let mut byte = [0u8; 1];
    File::from(ready)
        .read_exact(&mut byte)
        .map_err(JailError::Sync)
}

/// Step 5, on `spec.root_mount` in the private mount namespace.
fn build_root(spec: &JailSpec) -> Result<(), JailError> {
    let root = spec.root_mount.as_path();
    mount_at(
        None::<&str>,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )?;
    mount_tmpfs(root, "size=4m,nr_inodes=4096,mode=0755", MsFlags::empty())?;
    for dir in SYSTEM_DIRS {
        bind_system_path(root, Path::new(dir))?;
    }
    make_dir(&root.join("etc"), 0o755)?;
    write_etc(root)?;
    for path in ETC_BINDS {
        bind_system_path(root, Path::new(path))?;
    }
    bind_python_etc(root)?;
    let proc_dir = root.join("proc");
    make_dir(&proc_dir, 0o555)?;
    let noexec = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_at(Some("proc"), &proc_dir, Some("proc"), noexec, None)?;
    build_dev(root)?;
    let tmp = format!("size={},nr_inodes=16384,mode=1777", spec.tmp_bytes);
    mount_tmpfs(
        &root.join("tmp"),
        &tmp,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
    )?;
    let home = root.join(sandbox_agent::HOME.trim_start_matches('/'));
    let home_opts = format!(
        "size={},nr_inodes=16384,mode=0700,uid={SANDBOX_UID},gid={SANDBOX_UID}",
        spec.home_bytes
    );
    mount_tmpfs(&home, &home_opts, MsFlags::MS_NOSUID | MsFlags::MS_NODEV)
}

/// A host system folder or file, bound read-only (nosuid, nodev); a symlink is copied.
fn bind_system_path(root: &Path, host: &Path) -> Result<(), JailError> {
    let Ok(meta) = fs::symlink_metadata(host) else {
        return Ok(()); // this host does not have it
    };
    let target = root.join(host.strip_prefix("/").unwrap_or(host));
    if meta.file_type().is_symlink() {
        let link = fs::read_link(host).map_err(|source| prepare(host, source))?;
        return symlink(&link, &target).map_err(|source| prepare(&target, source));
    }
    if meta.is_dir() {
        make_dir(&target, 0o755)?;
    } else {
        File::create(&target).map_err(|source| prepare(&target, source))?;
    }
    bind_read_only(host, &target, MsFlags::MS_NOSUID | MsFlags::MS_NODEV)
}

/// Debian's Python reads its site configuration from /etc/python3.X.
fn bind_python_etc(root: &Path) -> Result<(), JailError> {
    let entries = fs::read_dir("/etc").map_err(|source| prepare(Path::new("/etc"), source))?;
    for entry in entries.filter_map(Result::ok) {
        if entry.file_name().to_string_lossy().starts_with("python3") {
            bind_system_path(root, &entry.path())?;
        }
    }
    Ok(())
}

fn write_etc(root: &Path) -> Result<(), JailError> {
    let uid = SANDBOX_UID;
    let files = [
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\n\
                 sandbox:x:{uid}:{uid}:sandbox:{}:/bin/bash\n\
                 nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                sandbox_agent::HOME
            ),
        ),
        (
            "group",
            format!("root:x:0:\nsandbox:x:{uid}:\nnogroup:x:65534:\n"),
        ),
        (
            "hosts",
            "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n".to_owned(),
        ),
        ("hostname", "sandbox\n".to_owned()),
        (
            "nsswitch.conf",
            "passwd: files\ngroup: files\nhosts: files\n".to_owned(),
        ),
        ("resolv.conf", String::new()),
    ];
    for (name, content) in files {
        let path = root.join("etc").join(name);
        fs::write(&path, content).map_err(|source| prepare(&path, source))?;
    }
    Ok(())
}

/// A tmpfs /dev with the harmless host devices bound in, the usual links, and /dev/shm.
fn build_dev(root: &Path) -> Result<(), JailError> {
    let dev = root.join("dev");
    mount_tmpfs(
        &dev,
        "size=64k,nr_inodes=64,mode=0755",
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
    )?;
    for name in DEVICES {
        let target = dev.join(name);
        File::create(&target).map_err(|source| prepare(&target, source))?;
        let host = Path::new("/dev").join(name);
        let flags = MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
        mount_at(Some(&host), &target, None, flags, None)?;
    }
    let links = [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ];
    for (name, to) in links {
        let link = dev.join(name);
        symlink(to, &link).map_err(|source| prepare(&link, source))?;
    }
    let shm_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_tmpfs(
        &dev.join("shm"),
        "size=16m,nr_inodes=1024,mode=1777",
        shm_flags,
    )?;
    remount(
        &dev,
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
    )
}

/// Step 6: the new root becomes `/`; the host's tree is detached; `/` is read-only.
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
    chdir(sandbox_agent::HOME).map_err(|e| prepare(Path::new(sandbox_agent::HOME), e.into()))
}

/// Step 7a: the network namespace has only `lo`; bring it up so programs can use
/// localhost among their own processes.
fn loopback_up() -> Result<(), JailError> {
    // SAFETY: socket() takes plain integers and returns a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(JailError::Loopback(io::Error::last_os_error()));
    }
    // SAFETY: fd was just returned by socket() and is owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the flags of the interface named in req into req, which
    // is a valid, writable ifreq for the duration of the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(JailError::Loopback(io::Error::last_os_error()));
    }
    // SAFETY: the flags member of the union is the one SIOCGIFFLAGS just filled.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads req, a valid ifreq naming lo with its new flags.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(JailError::Loopback(io::Error::last_os_error()));
    }
    Ok(())
}

/// Step 7b.
fn set_rlimits(spec: &JailSpec) -> Result<(), JailError> {
    let limits = [
        (Resource::RLIMIT_CORE, 0),
        (Resource::RLIMIT_NOFILE, spec.nofile),
        (Resource::RLIMIT_FSIZE, spec.fsize_bytes),
    ];
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

/// Step 8: nothing privileged remains, and nothing can be regained.
fn drop_privileges() -> Result<(), JailError> {
    let last_cap: u32 = fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63);
    for cap in 0..=last_cap {
        // SAFETY: PR_CAPBSET_DROP takes a capability number and touches no memory.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(JailError::CapBound {
                cap,
                source: io::Error::last_os_error(),
            });
        }
    }
    let gid = Gid::from_raw(SANDBOX_UID);
    setresgid(gid, gid, gid).map_err(JailError::SetUser)?;
    let uid = Uid::from_raw(SANDBOX_UID);
    // Leaving uid 0 for a non-zero uid clears the permitted, effective and ambient sets.
    setresuid(uid, uid, uid).map_err(JailError::SetUser)?;
    nix::sys::prctl::set_no_new_privs().map_err(JailError::NoNewPrivs)
}

/// Step 9: this same binary, opened before the clone, as the agent.
fn exec_agent(exe: &OwnedFd) -> Result<(), JailError> {
    let argv0 = CString::new("sandbox-agent").map_err(|e| JailError::Exec(e.into()))?;
    let argv1 = CString::new(AGENT_ARG).map_err(|e| JailError::Exec(e.into()))?;
    let argv = [argv0.as_ptr(), argv1.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    let empty = c"";
    // SAFETY: execveat reads argv and envp, both null-terminated arrays of pointers to
    // NUL-terminated strings that outlive the call; on success it does not return.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            exe.as_raw_fd(),
            empty.as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        );
    }
    Err(JailError::Exec(io::Error::last_os_error()))
}

fn mount_tmpfs(target: &Path, options: &str, flags: MsFlags) -> Result<(), JailError> {
    make_dir(target, 0o755)?;
    mount_at(Some("tmpfs"), target, Some("tmpfs"), flags, Some(options))
}

fn bind_read_only(source: &Path, target: &Path, flags: MsFlags) -> Result<(), JailError> {
    mount_at(
        Some(source),
        target,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    remount(target, MsFlags::MS_RDONLY | flags)
}

fn remount(target: &Path, flags: MsFlags) -> Result<(), JailError> {
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | flags;
    mount_at(None::<&Path>, target, None, flags, None)
}

fn mount_at<S: nix::NixPath + ?Sized>(
    source: Option<&S>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), JailError> {
    mount(source, target, fstype, flags, data).map_err(|source| JailError::Mount {
        target: target.to_owned(),
        source,
    })
}

fn make_dir(path: &Path, mode: u32) -> Result<(), JailError> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
    {
        Ok(()) => Ok(()),
        Err(source) => Err(prepare(path, source)),
    }
}

fn prepare(path: &Path, source: io::Error) -> JailError {
    JailError::Prepare {
        path: path.to_owned(),
        source,
    }
}
