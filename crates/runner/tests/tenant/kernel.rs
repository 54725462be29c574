//! The agent against its program, host identities, locks on shared files, masked host
//! information, and kernel interfaces with a history of bugs.

use super::*;

const SABOTAGE: &str = r#"
import resource, signal, threading
def attempt(name, f):
    try:
        f()
        print("RESULT %s ok" % name)
    except OSError as e:
        print("RESULT %s errno=%d" % (name, e.errno))
def ioprio():
    rc, err = syscall(251, 1, 1, 3 << 13)  # ioprio_set(IOPRIO_WHO_PROCESS, 1, idle)
    if rc == -1:
        raise OSError(err, os.strerror(err))
def agent():
    try:
        fields = open("/proc/1/stat").read().rsplit(")", 1)[1].split()
    except OSError as e:
        return "unreadable errno=%d" % e.errno
    return "nice=%s policy=%s" % (fields[16], fields[38])
print("RESULT agent_before", agent())
attempt("prlimit_as", lambda: resource.prlimit(1, resource.RLIMIT_AS, (4096, 4096)))
attempt("prlimit_nofile", lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3)))
attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, 1, 19))
attempt("sched_idle", lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)))
attempt("affinity", lambda: os.sched_setaffinity(1, {0}))
attempt("ioprio_set", ioprio)
attempt("kill_stop", lambda: os.kill(1, signal.SIGSTOP))
attempt("kill_kill", lambda: os.kill(1, signal.SIGKILL))
attempt("proc_mem", lambda: open("/proc/1/mem", "rb").close())
attempt("prio_pgrp", lambda: os.setpriority(os.PRIO_PGRP, 1, 19))
attempt("prio_user", lambda: os.setpriority(os.PRIO_USER, 0, 19))
attempt("kill_all_stop", lambda: os.kill(-1, signal.SIGSTOP))  # spares the caller
print("RESULT agent_after", agent())
print("MARKER-BEFORE-SPIN", flush=True)
def spin():
    while True:
        pass
for i in range(3):
    threading.Thread(target=spin, daemon=True).start()
spin()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_program_cannot_limit_slow_or_stop_the_agent() {
    let runner = runner();
    let started = Instant::now();
    let task = spawn_run(&runner, program("", SABOTAGE), 1_500);
    let out = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the sabotaged agent answered within 30 s")
        .expect("run task");
    let took = started.elapsed();
    println!("answered after {took:?}");
    assert!(stdout(&out).contains("MARKER-BEFORE-SPIN"), "{out}");
    let succeeded_attempts: Vec<String> = [
        "prlimit_as",
        "prlimit_nofile",
        "setpriority",
        "sched_idle",
        "affinity",
        "ioprio_set",
        "kill_stop",
        "kill_kill",
        "proc_mem",
        "prio_pgrp",
        "kill_all_stop",
    ]
    .into_iter()
    .map(|name| (name, result(&out, name)))
    .filter(|(_, r)| !["errno=1", "errno=3", "errno=13"].contains(&r.as_str()))
    .map(|(name, r)| format!("{name}: {r}"))
    .collect();
    assert!(
        succeeded_attempts.is_empty(),
        "the program reached the agent: {succeeded_attempts:?}: {out}"
    );
    let _ = result(&out, "prio_user"); // may succeed: it renices the program's own user only
    let after = result(&out, "agent_after");
    assert!(
        after == "nice=0 policy=0" || after.starts_with("unreadable"),
        "the agent's priority changed: {out}"
    );
    assert_eq!(out["timedOut"].as_bool(), Some(true), "{out}");
    assert!(
        took < Duration::from_secs(4),
        "the answer took {took:?} for a 1.5 s timeout: {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_is_not_the_programs_user() {
    let runner = runner();
    let body = r#"
def uid_line(path):
    return next(l for l in open(path) if l.startswith("Uid:")).split(None, 1)[1].split()
print("RESULT agent uid=%s" % ",".join(uid_line("/proc/1/status")))
print("RESULT program uid=%s" % ",".join(uid_line("/proc/self/status")))
print("RESULT getuid uid=%d" % os.getuid())
"#;
    let out = run(&runner, body, 10_000).await;
    assert_eq!(count(&out, "getuid", "uid"), 1000, "{out}");
    assert_ne!(
        result(&out, "agent"),
        result(&out, "program"),
        "the agent runs as the program's user: {out}"
    );
}

// ---------------------------------------------------------------------------------------
// 5. Identity
// ---------------------------------------------------------------------------------------

const IDENTITY: &str = r#"
import fcntl, struct
ranges = []
for line in open("/proc/self/uid_map"):
    inside, host, n = line.split()
    ranges.append("%s-%d" % (host, int(host) + int(n) - 1))
print("RESULT uid_map hosts=%s" % ",".join(ranges))
fd = os.open("/proc/self/ns/user", os.O_RDONLY)
buf = bytearray(4)
try:
    fcntl.ioctl(fd, 0xb704, buf, True)  # NS_GET_OWNER_UID
    print("RESULT owner uid=%d" % struct.unpack("I", buf)[0])
except OSError as e:
    print("RESULT owner errno=%d" % e.errno)
"#;

/// Host id ranges `first-last` of a `RESULT uid_map hosts=` line.
fn host_ranges(out: &Value) -> Vec<(u64, u64)> {
    let hosts = field(&result(out, "uid_map"), "hosts")
        .unwrap_or_else(|| panic!("no hosts= in the uid_map line: {out}"));
    hosts
        .split(',')
        .map(|r| {
            let (first, last) = r.split_once('-').expect("first-last");
            (first.parse().expect("id"), last.parse().expect("id"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_at_once_have_distinct_host_ids_and_own_their_user_namespace() {
    let runner = runner();
    let a = Holder::start(&runner, "ids", &format!("{IDENTITY}\nhold()\n")).await;
    let b = run(&runner, IDENTITY, 10_000).await;
    let a = a.finish().await;
    for out in [&a, &b] {
        let owner = result(out, "owner");
        assert!(
            !failed(&owner),
            "NS_GET_OWNER_UID is not supported by this kernel, so the owner of the \
             sandbox's user namespace cannot be checked: {out}"
        );
        assert_eq!(
            owner, "uid=0",
            "the user namespace is not owned by the sandbox's own identity (65534: host root): {out}"
        );
        assert!(
            host_ranges(out).iter().all(|&(first, _)| first != 0),
            "a sandbox id maps to host root: {out}"
        );
    }
    for &(a_first, a_last) in &host_ranges(&a) {
        for &(b_first, b_last) in &host_ranges(&b) {
            assert!(
                a_last < b_first || b_last < a_first,
                "two sandboxes at once share host ids.\nA: {a}\nB: {b}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// 6. Shared files
// ---------------------------------------------------------------------------------------

const LOCKS: &str = r#"
import fcntl
release = "/usr/lib/os-release" if os.path.exists("/usr/lib/os-release") else "/etc/os-release"
fds = []
for path in ["/usr/bin/python3", release, "/etc/ld.so.cache", "/usr/lib"]:
    try:
        fd = os.open(path, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fds.append(fd)
        print("RESULT %s ok" % path)
    except OSError as e:
        print("RESULT %s errno=%d" % (path, e.errno))
print("RESULT locked count=%d" % len(fds))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_shared_with_the_host_cannot_be_locked_against_others() {
    let runner = runner();
    let a = Holder::start(&runner, "lock", &format!("{LOCKS}\nhold()\n")).await;
    let b = run(&runner, LOCKS, 10_000).await;
    let host = {
        let file = std::fs::File::open("/usr/bin/python3").expect("host python3");
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor the File owns for the duration of the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            "ok".to_owned()
        } else {
            errno_text()
        }
    };
    let a = a.finish().await;
    println!("host: flock /usr/bin/python3 {host}");
    let text = stdout(&b).to_owned();
    let paths: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT /"))
        .collect();
    assert_eq!(paths.len(), 4, "{b}");
    for line in paths {
        assert!(
            line.ends_with(" ok"),
            "B could not lock /{line} while A held it.\nB: {b}\nA: {a}"
        );
    }
    assert_eq!(
        host, "ok",
        "the host could not lock /usr/bin/python3 while a sandbox held it: {a}"
    );
}

// ---------------------------------------------------------------------------------------
// 7. Masked host information
// ---------------------------------------------------------------------------------------

const MASKED: &[&str] = &[
    "/proc/cmdline",
    "/proc/config.gz",
    "/proc/kallsyms",
    "/proc/keys",
    "/proc/key-users",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/modules",
    "/proc/kcore",
    "/proc/sysrq-trigger",
];

const READ_MASKED: &str = r#"
for path in PATHS:
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
        print("RESULT %s %s bytes=%d" % (path, "empty" if not data else "read", len(data)))
        if path == "/proc/cmdline":
            print("CMDLINE", data.decode(errors="replace").strip())
    except OSError as e:
        print("RESULT %s errno=%d" % (path, e.errno))
print("RESULT sys exists=%s entries=%d"
      % (os.path.exists("/sys"), len(os.listdir("/sys")) if os.path.isdir("/sys") else 0))
try:
    with open("/proc/sysrq-trigger", "w") as f:
        f.write("h")  # help: harmless if it ever went through
    print("RESULT sysrq-write ok")
except OSError as e:
    print("RESULT sysrq-write errno=%d" % e.errno)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_information_in_proc_and_sys_is_masked() {
    let runner = runner();
    let body = format!("PATHS = {MASKED:?}\n{READ_MASKED}");
    let out = run(&runner, &body, 10_000).await;
    let readable: Vec<String> = MASKED
        .iter()
        .map(|path| (path, result(&out, path)))
        .filter(|(_, r)| !failed(r) && !r.starts_with("empty"))
        .map(|(path, r)| format!("{path}: {r}"))
        .collect();
    assert!(
        readable.is_empty(),
        "host information is readable: {readable:?}: {out}"
    );
    let host_cmdline = std::fs::read_to_string("/proc/cmdline").expect("host /proc/cmdline");
    assert!(
        !stdout(&out).contains(host_cmdline.trim()),
        "the host's kernel command line leaked: {out}"
    );
    let sys = result(&out, "sys");
    assert!(
        sys.contains("exists=False") || sys.contains("entries=0"),
        "/sys is visible: {out}"
    );
    assert!(failed(&result(&out, "sysrq-write")), "{out}");
}

// ---------------------------------------------------------------------------------------
// 8. Kernel surface
// ---------------------------------------------------------------------------------------

const KERNEL_SURFACE: &str = r#"
def call(name, *args):
    rc, err = syscall(*args)
    print("RESULT %s %s rc=%d" % (name, outcome(rc, err), rc))
    return rc
buf = ctypes.create_string_buffer(64)
call("memfd_secret", 447, 0)
call("modify_ldt", 154, 0, ctypes.addressof(buf), 16)
call("fanotify_init", 300, 0, 0)
call("fanotify_init_fid", 300, 0x200, 0)  # FAN_REPORT_FID: allowed without privilege
ctx = ctypes.c_ulong(0)
call("io_setup", 206, 1, ctypes.addressof(ctx))
call("io_submit", 209, ctx.value, 0, 0)
call("move_pages", 279, 0, 0, 0, 0, 0, 0)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
page = libc.mmap(None, 4096, 3, 0x22, -1, 0)  # PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS
mask = ctypes.c_ulong(1)  # node 0
call("mbind", 237, page, 4096, 2, ctypes.addressof(mask), 64, 0)  # MPOL_BIND
call("set_mempolicy", 238, 2, ctypes.addressof(mask), 64)
fd = os.open("/usr/bin/python3", os.O_RDONLY)
rng = (ctypes.c_uint64 * 2)(0, 4096)
stat = (ctypes.c_uint64 * 5)()
call("cachestat", 451, fd, ctypes.addressof(rng), ctypes.addressof(stat), 0)
own = os.open("/tmp/cachestat", os.O_RDWR | os.O_CREAT, 0o600)  # a file it may write
os.write(own, b"x" * 4096)
call("cachestat_own", 451, own, ctypes.addressof(rng), ctypes.addressof(stat), 0)
class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint)]
class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]
allow = SockFilter(0x06, 0, 0, 0x7FFF0000)  # BPF_RET|BPF_K, SECCOMP_RET_ALLOW
prog = SockFprog(1, ctypes.pointer(allow))
call("no_new_privs", 157, 38, 1, 0, 0, 0)  # prctl(PR_SET_NO_NEW_PRIVS)
call("seccomp_listener", 317, 1, 8, ctypes.addressof(prog))  # NEW_LISTENER
call("seccomp_plain", 317, 1, 0, ctypes.addressof(prog))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interfaces_with_a_history_of_bugs_are_refused() {
    let runner = runner();
    let out = run(&runner, KERNEL_SURFACE, 10_000).await;
    assert!(
        succeeded(&result(&out, "no_new_privs")),
        "setting no_new_privs must work: {out}"
    );
    let _ = result(&out, "seccomp_plain"); // a plain filter may be installed
    let allowed: Vec<String> = [
        "memfd_secret",
        "modify_ldt",
        "fanotify_init",
        "fanotify_init_fid",
        "io_setup",
        "io_submit",
        "move_pages",
        "mbind",
        "set_mempolicy",
        "cachestat",
        "cachestat_own",
        "seccomp_listener",
    ]
    .into_iter()
    .map(|name| (name, result(&out, name)))
    .filter(|(_, r)| !failed(r))
    .map(|(name, r)| format!("{name}: {r}"))
    .collect();
    assert!(allowed.is_empty(), "a sandbox reached {allowed:?}: {out}");
}
