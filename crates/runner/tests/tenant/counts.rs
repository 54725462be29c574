//! Per-user kernel counts: pipe buffer pages, queued signals, descriptors in flight,
//! message queues and AIO, inotify and fanotify.

use super::*;

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
