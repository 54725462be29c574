//! Loopback socket buffers, charged or bounded, and the socket families a program may
//! open.

use super::*;

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
