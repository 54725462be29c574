//! Tenants: what one sandbox may take from another sandbox, from the host, or from its
//! own agent. Every test runs a real attack, a Python 3 program, through the real
//! runner API (`POST /run`) and asserts on the marker lines it prints
//! (`RESULT <name> ok`, `RESULT <name> errno=N`, `RESULT <name> count=...`), with the
//! whole answer in the failure message.
//!
//! - Per-user kernel counts (pipe buffer pages, queued real-time signals, descriptors in
//!   flight over unix sockets, POSIX message queues, AIO contexts, inotify and fanotify
//!   instances): sandbox A grabs the resource until the kernel refuses more and holds it
//!   for a few seconds; meanwhile sandbox B, and for some the test process itself (host
//!   root), must still get it. A tells the host it holds by naming its own thread
//!   (`prctl(PR_SET_NAME)`): the test waits until a host process has that name before it
//!   starts B, so B never runs before A holds.
//! - Loopback socket buffers are charged to the sandbox or bounded.
//! - Socket families a program runner never needs cannot be opened.
//! - The program (the sandbox user) can neither re-limit, re-prioritise, stop nor kill
//!   the agent (PID 1), which still ends a spinning program on time.
//! - Sandboxes running at once have distinct host identities, and each owns its user
//!   namespace.
//! - Files shared with the host (`/usr`, `/etc`) cannot be locked against others.
//! - Host information (`/proc/cmdline`, `/proc/kallsyms`, ..., `/sys`) is masked.
//! - Kernel interfaces with a history of bugs are refused (memfd_secret, modify_ldt,
//!   AIO, NUMA policy calls, cachestat, seccomp user notification, ...).
//!
//! Every grab is bounded (a count or a size), every hold ends after a few seconds, and
//! every wait on the Rust side has a deadline.

mod common;

use common::{stdout, Options, Runner, TOKEN};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How long a grabbing sandbox holds what it took, in seconds.
const HOLD_SECONDS: f64 = 3.5;

/// Python put before every program: a line-buffered stdout, raw system calls, and
/// `hold()`, which names the process `MARKER` (so the host sees it holds), sleeps
/// [`HOLD_SECONDS`] and returns.
const PRELUDE: &str = r#"
import ctypes, errno, os, sys, time
sys.stdout.reconfigure(line_buffering=True)
libc = ctypes.CDLL(None, use_errno=True)

def syscall(*args):
    """A raw x86_64 system call: (return value, errno)."""
    ctypes.set_errno(0)
    rc = libc.syscall(*[ctypes.c_long(a) for a in args])
    return rc, ctypes.get_errno()

def outcome(rc, err):
    return "ok" if rc != -1 else "errno=%d" % err

def hold():
    print("HOLDING", flush=True)
    libc.prctl(15, MARKER.encode(), 0, 0, 0)
    time.sleep(HOLD_SECONDS)
    print("RELEASED", flush=True)
"#;

fn runner() -> Runner {
    Runner::with(Options {
        pool_size: 3,
        ..Default::default()
    })
}

/// The program: the prelude, `MARKER` and then `body`.
fn program(marker: &str, body: &str) -> String {
    format!("{PRELUDE}\nMARKER = {marker:?}\nHOLD_SECONDS = {HOLD_SECONDS}\n{body}")
}

/// Posts a Python run on a task of its own; the task's value is the 200 answer.
fn spawn_run(runner: &Runner, code: String, timeout_ms: u64) -> JoinHandle<Value> {
    let url = format!("{}/run", runner.url);
    let client = runner.client.clone();
    tokio::spawn(async move {
        let body = json!({"lang": "python", "code": code, "timeoutMs": timeout_ms});
        let resp = client
            .post(url)
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .expect("POST /run answered");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let value: Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON body, got {text:?}"));
        assert_eq!(status, 200, "run answered {status}: {value}");
        println!("answer: {value}"); // shown for failures, or with --nocapture
        value
    })
}

/// Runs a Python program to its end (at most 60 s on this side).
async fn run(runner: &Runner, body: &str, timeout_ms: u64) -> Value {
    let task = spawn_run(runner, program("", body), timeout_ms);
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the run answered within 60 s")
        .expect("run task")
}

/// A sandbox that grabbed something and holds it.
struct Holder {
    answer: JoinHandle<Value>,
}

impl Holder {
    /// Starts `body` (which calls `hold()` once it has grabbed) and returns once it holds.
    async fn start(runner: &Runner, tag: &str, body: &str) -> Holder {
        let marker = format!("tn{tag}{}", std::process::id() % 100_000);
        assert!(marker.len() <= 15, "a thread name has 15 bytes: {marker}");
        let answer = spawn_run(runner, program(&marker, body), 30_000);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !host_process_named(&marker) {
            if answer.is_finished() {
                let out = answer.await.expect("run task");
                panic!("the grabbing sandbox ended before it held anything: {out}");
            }
            assert!(
                Instant::now() < deadline,
                "the grabbing sandbox did not hold within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Holder { answer }
    }

    /// Its answer, once it has released.
    async fn finish(self) -> Value {
        tokio::time::timeout(Duration::from_secs(60), self.answer)
            .await
            .expect("the grabbing sandbox answered within 60 s")
            .expect("run task")
    }
}

/// Whether a host process (or thread group leader) has this name in `/proc/<pid>/comm`.
fn host_process_named(name: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
            && std::fs::read_to_string(entry.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
    })
}

/// What follows `RESULT <name> ` on its line of stdout.
fn result(out: &Value, name: &str) -> String {
    let prefix = format!("RESULT {name} ");
    stdout(out)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no `RESULT {name}` line: {out}"))
        .to_owned()
}

/// The value of `key=` in a result.
fn field(result: &str, key: &str) -> Option<String> {
    let prefix = format!("{key}=");
    result
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
        .map(str::to_owned)
}

/// The number in `key=` of a result, or panic with the answer.
fn count(out: &Value, name: &str, key: &str) -> u64 {
    let r = result(out, name);
    field(&r, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key}= in `RESULT {name}`: {out}"))
}

/// Fails with every problem found at once, and the answers they were found in.
#[track_caller]
fn assert_none(problems: &[String], answers: &[(&str, &Value)]) {
    if !problems.is_empty() {
        let answers: Vec<String> = answers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        panic!("{}\n{}", problems.join("\n"), answers.join("\n"));
    }
}

fn succeeded(result: &str) -> bool {
    result.split_whitespace().next() == Some("ok")
}

fn failed(result: &str) -> bool {
    result.starts_with("errno=")
}

/// Runs Python on the host, as host root (the test process), for at most 10 s.
async fn host_python(code: &str) -> String {
    let child = tokio::process::Command::new("/usr/bin/python3")
        .args(["-c", code])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(10), child)
        .await
        .expect("host python ended within 10 s")
        .expect("host python ran");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn errno_text() -> String {
    let e = std::io::Error::last_os_error();
    format!("errno={} ({e})", e.raw_os_error().unwrap_or(0))
}

// ---------------------------------------------------------------------------------------
// 1. Per-user kernel counts
// ---------------------------------------------------------------------------------------

const PIPE_GRAB: &str = r#"
import fcntl
pipes, grown, stop = [], 0, "none"
for i in range(400):
    r, w = os.pipe()
    pipes.append((r, w))
    try:
        fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
        grown += 1
    except OSError as e:
        stop = "errno=%d" % e.errno
        break
print("RESULT grab pipes=%d grown=%d stop=%s" % (len(pipes), grown, stop))
hold()
"#;

const PIPE_USE: &str = r#"
import fcntl
r, w = os.pipe()
print("RESULT getsz size=%d" % fcntl.fcntl(w, 1032))  # F_GETPIPE_SZ
try:
    fcntl.fcntl(w, 1031, 1 << 20)
    print("RESULT setsz ok")
except OSError as e:
    print("RESULT setsz errno=%d" % e.errno)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipe_buffers_of_one_sandbox_do_not_shrink_anothers() {
    let runner = runner();
    let a = Holder::start(&runner, "pipe", PIPE_GRAB).await;
    let b = run(&runner, PIPE_USE, 10_000).await;
    let a = a.finish().await;
    let grab = result(&a, "grab");
    assert!(
        count(&a, "grab", "grown") > 0 && field(&grab, "stop").is_some_and(|s| s != "none"),
        "A must grow pipes until the kernel refuses: {a}"
    );
    assert_eq!(
        count(&b, "getsz", "size"),
        65536,
        "B's new pipe was shrunk by A's pipes.\nB: {b}\nA: {a}"
    );
    assert!(
        succeeded(&result(&b, "setsz")),
        "B could not grow a pipe while A held its pipes.\nB: {b}\nA: {a}"
    );
}

const SIGNAL_QUEUE: &str = r#"
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
def queue_one():
    ctypes.set_errno(0)
    if libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), None) == 0:
        return "ok"
    return "errno=%d" % ctypes.get_errno()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_signals_of_one_sandbox_leave_others_and_the_host_theirs() {
    let runner = runner();
    let grab = format!(
        "{SIGNAL_QUEUE}\n\
         queued, stop = 0, 'none'\n\
         for i in range(200000):\n\
         \x20   r = queue_one()\n\
         \x20   if r != 'ok':\n\
         \x20       stop = r\n\
         \x20       break\n\
         \x20   queued += 1\n\
         print('RESULT grab queued=%d stop=%s' % (queued, stop))\n\
         hold()\n"
    );
    let a = Holder::start(&runner, "sig", &grab).await;
    let b = run(
        &runner,
        &format!("{SIGNAL_QUEUE}\nprint('RESULT sigqueue', queue_one())\n"),
        10_000,
    )
    .await;
    let host = host_python(&format!(
        "{SIGNAL_QUEUE}\nprint('RESULT host_sigqueue', queue_one())\n"
    ))
    .await;
    let a = a.finish().await;
    println!("host: {}", host.trim());
    assert!(
        count(&a, "grab", "queued") > 0
            && field(&result(&a, "grab"), "stop") == Some("errno=11".into()),
        "A must queue signals until EAGAIN: {a}"
    );
    let mut problems = Vec::new();
    if !succeeded(&result(&b, "sigqueue")) {
        problems.push("B could not queue one signal while A held its queue".to_owned());
    }
    if !host.contains("RESULT host_sigqueue ok") {
        problems.push(format!(
            "host root could not queue one signal while A held its queue: {}",
            host.trim()
        ));
    }
    assert_none(&problems, &[("B", &b), ("A", &a)]);
}

const FDS_GRAB: &str = r#"
import socket
spare, _other = socket.socketpair()
pairs, inflight, messages, stop, cur = [], 0, 0, "none", None
for i in range(5000):
    if cur is None:
        if len(pairs) >= 64:
            stop = "pairs"
            break
        cur = socket.socketpair()
        cur[0].setblocking(False)
        pairs.append(cur)
    try:
        socket.send_fds(cur[0], [b"x"], [spare.fileno()] * 64)
        inflight += 64
        messages += 1
    except BlockingIOError:
        cur = None
    except OSError as e:
        stop = "errno=%d" % e.errno
        break
print("RESULT grab inflight=%d messages=%d pairs=%d stop=%s" % (inflight, messages, len(pairs), stop))
hold()
"#;

const FDS_USE: &str = r#"
import socket
a, b = socket.socketpair()
try:
    socket.send_fds(a, [b"x"], [b.fileno()])
    print("RESULT send_fds ok")
except OSError as e:
    print("RESULT send_fds errno=%d" % e.errno)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptors_in_flight_of_one_sandbox_do_not_block_anothers() {
    let runner = runner();
    let a = Holder::start(&runner, "fds", FDS_GRAB).await;
    let b = run(&runner, FDS_USE, 10_000).await;
    let a = a.finish().await;
    assert!(
        count(&a, "grab", "inflight") > 0
            && field(&result(&a, "grab"), "stop") == Some("errno=109".into()),
        "A must send descriptors until ETOOMANYREFS: {a}"
    );
    assert!(
        succeeded(&result(&b, "send_fds")),
        "B could not pass one descriptor while A held its in flight.\nB: {b}\nA: {a}"
    );
}

const MQ_AIO_GRAB: &str = r#"
class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long),
                ("msgsize", ctypes.c_long), ("curmsgs", ctypes.c_long),
                ("reserved", ctypes.c_long * 4)]
libc.mq_open.restype = ctypes.c_int
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
attr = MqAttr(0, 10, 8192, 0)
queues, first, stop = 0, None, "none"
for i in range(256):
    ctypes.set_errno(0)
    fd = libc.mq_open(b"/q%d" % i, os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr))
    r = "ok" if fd >= 0 else "errno=%d" % ctypes.get_errno()
    first = first or r
    if fd < 0:
        stop = r
        break
    queues += 1
print("RESULT mq_open %s count=%d stop=%s" % (first, queues, stop))

contexts, events, nr, first, stop = [], 0, 8192, None, "none"
for i in range(2000):
    ctx = ctypes.c_ulong(0)
    rc, err = syscall(206, nr, ctypes.addressof(ctx))  # io_setup
    first = first or outcome(rc, err)
    if rc == 0:
        contexts.append(ctx)
        events += nr
        continue
    stop = "errno=%d" % err
    if err != errno.EAGAIN or nr == 1:
        break
    nr //= 2
print("RESULT io_setup %s contexts=%d events=%d stop=%s" % (first, len(contexts), events, stop))
hold()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_queues_and_aio_are_refused_and_leave_the_host_its_share() {
    let runner = runner();
    let a = Holder::start(&runner, "mqaio", MQ_AIO_GRAB).await;
    let mut ctx: libc::c_ulong = 0;
    // SAFETY: io_setup writes one context id into ctx, which outlives the call.
    let host_aio = if unsafe { libc::syscall(libc::SYS_io_setup, 1 as libc::c_long, &mut ctx) } == 0
    {
        // SAFETY: ctx is the context io_setup just made.
        unsafe { libc::syscall(libc::SYS_io_destroy, ctx) };
        "ok".to_owned()
    } else {
        errno_text()
    };
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let host_mq = if mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("mqueue"))
    {
        let name = std::ffi::CString::new(format!("/tenant-{}", std::process::id())).unwrap();
        // SAFETY: name is a NUL-terminated string; a null attr asks for the defaults.
        let q = unsafe {
            libc::mq_open(
                name.as_ptr(),
                libc::O_CREAT | libc::O_RDWR,
                0o600 as libc::mode_t,
                std::ptr::null_mut::<libc::mq_attr>(),
            )
        };
        if q >= 0 {
            // SAFETY: q is the queue just opened, name the one just made.
            unsafe {
                libc::mq_close(q);
                libc::mq_unlink(name.as_ptr());
            }
            Some("ok".to_owned())
        } else {
            Some(errno_text())
        }
    } else {
        println!("skipping the host's mq_open: /dev/mqueue is not mounted on this host");
        None
    };
    let a = a.finish().await;
    println!("host: io_setup {host_aio}, mq_open {host_mq:?}");
    let mut problems = Vec::new();
    if !failed(&result(&a, "mq_open")) {
        problems.push("a sandbox created POSIX message queues".to_owned());
    }
    if !failed(&result(&a, "io_setup")) {
        problems.push("a sandbox made AIO contexts".to_owned());
    }
    if host_aio != "ok" {
        problems.push(format!(
            "host root could not io_setup(1) while a sandbox grabbed AIO contexts: {host_aio}"
        ));
    }
    if let Some(host_mq) = host_mq.filter(|r| r != "ok") {
        problems.push(format!(
            "host root could not create a message queue while a sandbox grabbed them: {host_mq}"
        ));
    }
    assert_none(&problems, &[("A", &a)]);
}

const NOTIFY_GRAB: &str = r#"
fds, first, stop = [], None, "none"
for i in range(10000):
    rc, err = syscall(294, 0)  # inotify_init1
    first = first or outcome(rc, err)
    if rc == -1:
        stop = "errno=%d" % err
        break
    fds.append(rc)
print("RESULT inotify_init1 %s count=%d stop=%s" % (first, len(fds), stop))
rc, err = syscall(300, 0, 0)  # fanotify_init(0, O_RDONLY)
print("RESULT fanotify_init", outcome(rc, err))
rc, err = syscall(300, 0x200, 0)  # FAN_REPORT_FID: the unprivileged mode
print("RESULT fanotify_init_fid", outcome(rc, err))
hold()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inotify_and_fanotify_are_refused_and_leave_the_host_its_share() {
    let runner = runner();
    let a = Holder::start(&runner, "inot", NOTIFY_GRAB).await;
    // SAFETY: inotify_init1 takes flags and returns a new descriptor or -1.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    let host = if fd >= 0 {
        // SAFETY: fd was just returned and is owned by nothing else.
        unsafe { libc::close(fd) };
        "ok".to_owned()
    } else {
        errno_text()
    };
    let a = a.finish().await;
    println!("host: inotify_init1 {host}");
    let mut problems = Vec::new();
    if !failed(&result(&a, "inotify_init1")) {
        problems.push("a sandbox made inotify instances".to_owned());
    }
    for name in ["fanotify_init", "fanotify_init_fid"] {
        if !failed(&result(&a, name)) {
            problems.push(format!("a sandbox made a fanotify group ({name})"));
        }
    }
    if host != "ok" {
        problems.push(format!(
            "host root could not inotify_init1 while a sandbox grabbed instances: {host}"
        ));
    }
    assert_none(&problems, &[("A", &a)]);
}

// ---------------------------------------------------------------------------------------
// 2. Loopback socket buffers
// ---------------------------------------------------------------------------------------

/// The two memory tests measure the host's free memory: one at a time.
static MEMORY_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .expect("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemAvailable in /proc/meminfo")
}

/// Runs `body` and returns its answer and the largest drop of the host's MemAvailable
/// (MiB) seen while it ran.
async fn run_watching_memory(runner: &Runner, body: &str) -> (Value, u64) {
    let before = mem_available_kib();
    let mut lowest = before;
    let task = spawn_run(runner, program("", body), 30_000);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !task.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the run did not answer within 90 s"
        );
        lowest = lowest.min(mem_available_kib());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (
        task.await.expect("run task"),
        (before - lowest.min(before)) / 1024,
    )
}

const TCP_FILL: &str = r#"
import socket
N = 300
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(N)
port = srv.getsockname()[1]
clients, servers = [], []
for i in range(N):
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    s, _ = srv.accept()
    c.setblocking(False)
    clients.append(c)
    servers.append(s)
print("RESULT connected count=%d" % len(clients))
chunk = b"x" * (1 << 20)
total = 0
for c in clients:
    for j in range(256):  # at most 256 MiB per connection
        try:
            total += c.send(chunk)
        except BlockingIOError:
            break
print("RESULT queued mib=%d bytes=%d" % (total >> 20, total))
time.sleep(1)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_tcp_buffers_are_charged_or_bounded() {
    let _one_at_a_time = MEMORY_TESTS.lock().await;
    let runner = runner();
    let (out, drop_mib) = run_watching_memory(&runner, TCP_FILL).await;
    println!("host MemAvailable fell by {drop_mib} MiB at most");
    let oom = out["oomKilled"].as_bool() == Some(true);
    if !oom {
        assert_eq!(count(&out, "connected", "count"), 300, "{out}");
        let queued = count(&out, "queued", "mib");
        assert!(
            queued < 96,
            "a sandbox queued {queued} MiB in loopback TCP buffers, not charged to it \
             (host MemAvailable fell by {drop_mib} MiB): {out}"
        );
    }
}

const UDP_FILL: &str = r#"
import socket
N, payload = 300, b"x" * 65000
pairs = []
for i in range(N):
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)  # clamped to rmem_max
    r.bind(("127.0.0.1", 0))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)
    s.setblocking(False)
    pairs.append((r, s))
sent, errors = 0, {}
for r, s in pairs:
    addr = r.getsockname()
    # enough datagrams to fill the receiver, and a few more
    for j in range(r.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // len(payload) + 8):
        try:
            sent += s.sendto(payload, addr)
        except OSError as e:
            errors[e.errno] = errors.get(e.errno, 0) + 1
            break
held = 0
for line in open("/proc/net/udp").readlines()[1:]:
    held += int(line.split()[4].split(":")[1], 16)
print("RESULT udp pairs=%d sent_mib=%d held_mib=%d rcvbuf=%d errors=%s"
      % (len(pairs), sent >> 20, held >> 20,
         pairs[0][0].getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), errors))
time.sleep(2)
print("RESULT done ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_udp_buffers_do_not_drain_host_memory() {
    let _one_at_a_time = MEMORY_TESTS.lock().await;
    let runner = runner();
    let (out, drop_mib) = run_watching_memory(&runner, UDP_FILL).await;
    println!("host MemAvailable fell by {drop_mib} MiB at most");
    assert!(
        out["timedOut"].as_bool() == Some(false),
        "the UDP run did not finish: {out}"
    );
    if out["oomKilled"].as_bool() != Some(true) {
        assert_eq!(count(&out, "udp", "pairs"), 300, "{out}");
    }
    assert!(
        drop_mib <= 400,
        "host MemAvailable fell by {drop_mib} MiB while a sandbox filled UDP buffers: {out}"
    );
}

// ---------------------------------------------------------------------------------------
// 3. Socket families
// ---------------------------------------------------------------------------------------

const SOCKETS: &str = r#"
import socket
S = socket
def attempt(name, family, kind, proto=0):
    try:
        socket.socket(family, kind, proto).close()
        print("RESULT %s ok" % name)
    except OSError as e:
        print("RESULT %s errno=%d" % (name, e.errno))
attempt("vsock", 40, S.SOCK_STREAM)
for p in range(23):
    attempt("netlink%d" % p, 16, S.SOCK_RAW, p)
attempt("netlink0_dgram", 16, S.SOCK_DGRAM, 0)
attempt("packet_raw", 17, S.SOCK_RAW, S.htons(3))
attempt("packet_dgram", 17, S.SOCK_DGRAM, S.htons(3))
attempt("alg", 38, S.SOCK_SEQPACKET)
attempt("key", 15, S.SOCK_RAW, 2)
attempt("bluetooth", 31, S.SOCK_RAW, 1)
attempt("xdp", 44, S.SOCK_RAW)
attempt("tipc", 30, S.SOCK_RDM)
attempt("can", 29, S.SOCK_RAW, 1)
attempt("rds", 21, S.SOCK_SEQPACKET)
attempt("unix_stream", S.AF_UNIX, S.SOCK_STREAM)
attempt("unix_dgram", S.AF_UNIX, S.SOCK_DGRAM)
attempt("inet_tcp", S.AF_INET, S.SOCK_STREAM)
attempt("inet_udp", S.AF_INET, S.SOCK_DGRAM)
attempt("inet6_tcp", S.AF_INET6, S.SOCK_STREAM)
try:
    a, b = socket.socketpair()
    a.send(b"x")
    print("RESULT socketpair", "ok" if b.recv(1) == b"x" else "errno=0")
except OSError as e:
    print("RESULT socketpair errno=%d" % e.errno)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_unix_and_inet_sockets_can_be_opened() {
    let runner = runner();
    let out = run(&runner, SOCKETS, 10_000).await;
    let mut denied: Vec<String> = ["vsock", "netlink0_dgram", "packet_raw", "packet_dgram"]
        .into_iter()
        .map(String::from)
        .collect();
    denied.extend((0..=22).map(|p| format!("netlink{p}")));
    denied.extend(
        ["alg", "key", "bluetooth", "xdp", "tipc", "can", "rds"]
            .into_iter()
            .map(String::from),
    );
    let opened: Vec<&String> = denied
        .iter()
        .filter(|name| !failed(&result(&out, name)))
        .collect();
    assert!(opened.is_empty(), "a sandbox opened {opened:?}: {out}");
    for name in [
        "unix_stream",
        "unix_dgram",
        "inet_tcp",
        "inet_udp",
        "inet6_tcp",
        "socketpair",
    ] {
        assert!(succeeded(&result(&out, name)), "{name} must work: {out}");
    }
}

// ---------------------------------------------------------------------------------------
// 4. The agent
// ---------------------------------------------------------------------------------------

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
