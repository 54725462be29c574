//! The network by operator policy (issue 33), end to end on the process backend: a real
//! runner in a network namespace of the test's own, whose hosts file names the test's
//! hosts, and a web server in another namespace on an address of 198.18.0.0/15 (a
//! reserved range the proxy lets through), serving a page and a package index.
//!
//! From a sandbox: the granted name works from curl, Python's urllib and pip; another
//! name gets the proxy's 403 naming it; an IP literal is refused; UDP and raw DNS find
//! no route; the sandbox still has loopback only. A session narrowed with PATCH loses
//! its host. Needs root (network namespaces), iproute2, util-linux (`unshare`) and the
//! host's Python with pip. Every namespace and process is removed at the end, also on
//! failure.

mod common;

use common::{exit_code, stdout, Options, Runner};
use serde_json::{json, Value};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The name the runner opens to its sandboxes, and one it does not.
const ALLOWED: &str = "allowed.test";
const OTHER: &str = "other.test";
/// What the test's web server answers at `/`.
const PAGE: &str = "hello from the allowed host";

/// The size of the web server's `/big.bin`.
const BIG: usize = 150_000;

/// The namespaces, web server and files of one test; all removed on drop.
struct Net {
    runner_ns: String,
    web_ns: String,
    /// The web server's address, 198.18.<octet>.2 (the runner's side is .1).
    web_ip: String,
    servers: Vec<Child>,
    dir: PathBuf,
}

/// What a test is told of its web server: its address, and the certificate of its HTTPS
/// side (for `ALLOWED`), in PEM.
#[derive(Clone)]
struct Site {
    ip: String,
    cert: String,
}

impl Net {
    /// Two namespaces joined by a veth pair, a web server in one, and the files the
    /// runner's mount namespace shows at /etc/hosts and /etc/resolv.conf.
    fn new(tag: &str) -> Net {
        let pid = std::process::id();
        let octet = pid % 250;
        let prefix = format!("eg{tag}{}", pid % 100_000);
        let dir = std::env::temp_dir().join(format!("{prefix}-files"));
        let mut net = Net {
            runner_ns: format!("{prefix}r"),
            web_ns: format!("{prefix}w"),
            web_ip: format!("198.18.{octet}.2"),
            servers: Vec::new(),
            dir,
        };
        net.link(octet, &prefix);
        net.write_files();
        net.serve();
        net
    }

    fn link(&self, octet: u32, prefix: &str) {
        let (r, w) = (&self.runner_ns, &self.web_ns);
        ip(&["netns", "add", r]);
        ip(&["netns", "add", w]);
        let (a, b) = (format!("{prefix}a"), format!("{prefix}b"));
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        ip(&["link", "set", &a, "netns", r]);
        ip(&["link", "set", &b, "netns", w]);
        for (ns, dev, addr) in [
            (r, &a, format!("198.18.{octet}.1/24")),
            (w, &b, format!("198.18.{octet}.2/24")),
        ] {
            ip(&["-n", ns, "addr", "add", &addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
    }

    /// The page, a one-package index with its wheel, and the runner's hosts file.
    fn write_files(&self) {
        let web = self.dir.join("web");
        std::fs::create_dir_all(web.join("simple/tinypkg")).expect("index folder");
        std::fs::create_dir_all(web.join("files")).expect("files folder");
        std::fs::write(web.join("index.html"), PAGE).expect("page");
        std::fs::write(web.join("big.bin"), vec![b'x'; BIG]).expect("a big file");
        let wheel = "tinypkg-0.1-py3-none-any.whl";
        std::fs::write(
            web.join("simple/tinypkg/index.html"),
            format!("<a href=\"/files/{wheel}\">{wheel}</a>\n"),
        )
        .expect("index page");
        let made = Command::new("python3")
            .args(["-c", WHEEL_MAKER])
            .arg(web.join("files").join(wheel))
            .status()
            .expect("python3");
        assert!(made.success(), "the test's wheel was not made");
        let hosts = format!(
            "127.0.0.1 localhost\n{ip} {ALLOWED} {OTHER}\n127.0.0.1 loopback.test\n",
            ip = self.web_ip
        );
        std::fs::write(self.dir.join("hosts"), hosts).expect("hosts");
        std::fs::write(self.dir.join("resolv.conf"), "nameserver 127.0.0.1\n").expect("resolv");
        let made = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", &format!("/CN={ALLOWED}")])
            .args(["-addext", &format!("subjectAltName=DNS:{ALLOWED}")])
            .arg("-keyout")
            .arg(self.dir.join("key.pem"))
            .arg("-out")
            .arg(self.dir.join("cert.pem"))
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(made.success(), "the test's certificate was not made");
    }

    fn site(&self) -> Site {
        let cert = std::fs::read_to_string(self.dir.join("cert.pem")).expect("the certificate");
        Site {
            ip: self.web_ip.clone(),
            cert,
        }
    }

    /// The web server, plain on port 80 and HTTPS on 443.
    fn serve(&mut self) {
        let web = self.dir.join("web");
        for (port, script) in [("80", PLAIN_SERVER), ("443", TLS_SERVER)] {
            let server = Command::new("ip")
                .args(["netns", "exec", &self.web_ns, "python3", "-c", script])
                .arg(&web)
                .args([&self.web_ip, port])
                .arg(self.dir.join("cert.pem"))
                .arg(self.dir.join("key.pem"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the web server");
            self.servers.push(server);
        }
    }

    /// The runner's wrapper: a mount namespace of its own where the test's hosts file and
    /// resolver configuration are the host's (the runner is started from a thread in the
    /// runner's network namespace, which it inherits).
    fn wrapper(&self) -> Vec<String> {
        let script = format!(
            "mount --bind {hosts} /etc/hosts && mount --bind {resolv} /etc/resolv.conf \
             && exec \"$0\" \"$@\"",
            hosts = self.dir.join("hosts").display(),
            resolv = self.dir.join("resolv.conf").display(),
        );
        ["unshare", "--mount", "--propagation", "slave", "sh", "-c"]
            .into_iter()
            .map(String::from)
            .chain([script])
            .collect()
    }

    /// Runs `test` on a thread of its own in the runner's network namespace (so that its
    /// HTTP client reaches the runner's loopback address), on a runtime of that thread.
    fn within<T: Send>(&self, test: impl FnOnce() -> T + Send) -> T {
        let ns = Path::new("/run/netns").join(&self.runner_ns);
        std::thread::scope(|scope| {
            let joined = scope
                .spawn(move || {
                    let file = File::open(&ns).expect("the runner's namespace");
                    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
                        .expect("entering the runner's namespace");
                    test()
                })
                .join();
            joined.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Waits until the web server answers on both ports (from the runner's namespace).
    fn wait_for_server(&self) {
        self.within(|| {
            for port in [80, 443] {
                let addr = format!("{}:{port}", self.web_ip);
                let deadline = Instant::now() + Duration::from_secs(20);
                while std::net::TcpStream::connect(&addr).is_err() {
                    assert!(Instant::now() < deadline, "the web server did not start");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        for ns in [&self.runner_ns, &self.web_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The plain web server: `python3 -c PLAIN_SERVER FOLDER ADDRESS PORT` (the certificate's
/// arguments unused).
const PLAIN_SERVER: &str = r#"
import functools, http.server, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
http.server.ThreadingHTTPServer((sys.argv[2], int(sys.argv[3])), handler).serve_forever()
"#;

/// The HTTPS web server: `python3 -c TLS_SERVER FOLDER ADDRESS PORT CERT KEY`.
const TLS_SERVER: &str = r#"
import functools, http.server, ssl, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
server = http.server.ThreadingHTTPServer((sys.argv[2], int(sys.argv[3])), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[4], sys.argv[5])
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

/// Writes a wheel of one module, `tinypkg` (`VALUE = 42`), at the path given.
const WHEEL_MAKER: &str = r#"
import base64, hashlib, sys, zipfile
files = {
    "tinypkg/__init__.py": "VALUE = 42\n",
    "tinypkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
    "tinypkg-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    for path, text in files.items():
        wheel.writestr(path, text)
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(text)}\n"
    record += "tinypkg-0.1.dist-info/RECORD,,\n"
    wheel.writestr("tinypkg-0.1.dist-info/RECORD", record)
"#;

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("ip");
    assert!(status.success(), "ip {args:?} failed");
}

/// Whether this host can run these tests: root, the runner's own battery (not the
/// rootless one, whose runner refuses egress), and the tools.
fn can_run(test: &str) -> bool {
    if !nix::unistd::geteuid().is_root() || common::test_uid().is_some() {
        eprintln!("SKIPPED {test}: needs a root runner (network namespaces)");
        return false;
    }
    true
}

/// A runner in `net`'s namespace that opens `allow`.
fn runner_in(net: &Net, allow: &str) -> Runner {
    runner_with(net, allow, true)
}

/// [`runner_in`], its sandboxes forked from templates or not (each made by a jail).
fn runner_with(net: &Net, allow: &str, templates: bool) -> Runner {
    runner_env(net, allow, &[("RUNNER_TEMPLATES", &templates.to_string())])
}

/// [`runner_in`] with more variables.
fn runner_env(net: &Net, allow: &str, more: &[(&str, &str)]) -> Runner {
    // Its own data folder: the sessions it pauses at its stop go with the test's files.
    let data = net.dir.join("data").display().to_string();
    let mut env = vec![
        ("RUNNER_EGRESS_ALLOW".to_owned(), allow.to_owned()),
        ("RUNNER_DATA_DIR".to_owned(), data),
    ];
    env.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Runner::with(Options {
        pool_size: 2,
        env,
        wrapper: net.wrapper(),
        ..Options::default()
    })
}

/// Runs `test` with the runner `make` starts in a test network of its own (`tag` names
/// its namespaces and links), on a thread in the runner's namespace, and the web server's
/// address; skips, saying why, where it cannot run.
fn in_test_net<Fut: std::future::Future<Output = ()>>(
    tag: &str,
    make: impl FnOnce(&Net) -> Runner + Send,
    test: impl FnOnce(Runner, Site) -> Fut + Send,
) {
    if !can_run(&format!("egress ({tag})")) {
        return;
    }
    let net = Net::new(tag);
    net.wait_for_server();
    let site = net.site();
    net.within(|| block_on(test(make(&net), site)));
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}

/// POST /run of a bash program with `egress`: its 200 answer.
async fn run_bash(runner: &Runner, code: &str, egress: Value) -> Value {
    let (status, out) = runner
        .post(&json!({"lang": "bash", "code": code, "egress": egress}))
        .await;
    assert_eq!(status, 200, "{out}");
    out
}

#[test]
fn a_granted_host_works_from_curl_python_and_pip_and_nothing_else_leaves() {
    in_test_net(
        "a",
        |net| runner_in(net, ALLOWED),
        |runner, site| async move {
            let health = runner.health().await;
            assert_eq!(health["limits"]["network"], true, "{health}");
            assert_eq!(
                health["limits"]["networkHosts"],
                json!([ALLOWED]),
                "{health}"
            );
            granted_host_works(&runner).await;
            everything_else_is_refused(&runner, &site.ip).await;
            let (status, refused) = runner
                .post(&json!({"lang": "bash", "code": "true", "egress": [OTHER]}))
                .await;
            assert_eq!(status, 400, "{refused}");
            assert_eq!(refused["error"]["code"], "egress_not_allowed", "{refused}");
            assert!(refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains(OTHER));
            let (_, metrics) = runner.get("/metrics").await;
            assert!(
                metrics.contains(ALLOWED),
                "/metrics names no host:\n{metrics}"
            );
        },
    );
}

/// curl, urllib and pip reach the granted host; the run's answer counts it.
async fn granted_host_works(runner: &Runner) {
    let curl = run_bash(
        runner,
        &format!("curl -sS -m 10 http://{ALLOWED}/"),
        json!([ALLOWED]),
    )
    .await;
    assert_eq!(stdout(&curl), PAGE, "{curl}");
    let usage = &curl["egress"];
    assert_eq!(usage["connections"], 1, "{curl}");
    assert!(
        usage["bytesIn"].as_u64().unwrap() > PAGE.len() as u64,
        "{curl}"
    );
    assert!(usage["bytesOut"].as_u64().unwrap() > 0, "{curl}");
    let python = format!(
        "import urllib.request\nprint(urllib.request.urlopen('http://{ALLOWED}/', timeout=10).read().decode())"
    );
    let (status, out) = runner
        .post(&json!({"lang": "python", "code": python, "egress": [ALLOWED]}))
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(stdout(&out).trim(), PAGE, "{out}");
    let pip = format!(
        "python3 -m pip install -q --no-cache-dir --disable-pip-version-check --target /tmp/t \
         --index-url http://{ALLOWED}/simple/ --trusted-host {ALLOWED} tinypkg 2>&1 && \
         PYTHONPATH=/tmp/t python3 -c 'import tinypkg; print(tinypkg.VALUE)'"
    );
    let pip = run_bash(runner, &pip, json!([ALLOWED])).await;
    assert_eq!(stdout(&pip).trim(), "42", "{pip}");
    let certs = run_bash(
        runner,
        "python3 -c 'import ssl; print(len(ssl.create_default_context().get_ca_certs()) > 0)'; \
         test -e /etc/ssl/private && echo private shown; true",
        json!([ALLOWED]),
    )
    .await;
    assert_eq!(
        stdout(&certs).trim(),
        "True",
        "the host's CA certificates: {certs}"
    );
    let quiet = run_bash(runner, "echo nothing", json!([ALLOWED])).await;
    assert!(
        quiet.get("egress").is_none(),
        "a run without traffic: {quiet}"
    );
}

/// Another name, an IP literal, a run granted nothing, UDP and raw DNS: all refused;
/// the sandbox has loopback only and no route.
async fn everything_else_is_refused(runner: &Runner, web_ip: &str) {
    let other = run_bash(
        runner,
        &format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{OTHER}/"),
        json!([ALLOWED]),
    )
    .await;
    assert!(stdout(&other).ends_with("\n403"), "{other}");
    assert!(
        stdout(&other).contains(OTHER),
        "the 403 names the host: {other}"
    );
    assert!(!stdout(&other).contains(PAGE), "{other}");
    assert_eq!(other["egress"]["refused"], 1, "{other}");
    let literal = run_bash(
        runner,
        &format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{web_ip}/"),
        json!([ALLOWED]),
    )
    .await;
    assert!(stdout(&literal).ends_with("\n403"), "{literal}");
    let ungranted = run_bash(
        runner,
        &format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{ALLOWED}/"),
        json!([]),
    )
    .await;
    assert!(stdout(&ungranted).ends_with("\n403"), "{ungranted}");
    let direct = format!(
        "import socket\n\
         for kind, port in [(socket.SOCK_DGRAM, 53), (socket.SOCK_DGRAM, 9), (socket.SOCK_STREAM, 80)]:\n\
         \x20   s = socket.socket(socket.AF_INET, kind); s.settimeout(3)\n\
         \x20   try:\n\
         \x20       s.connect(('{web_ip}', port)); s.send(b'x'); print('SENT', kind, port)\n\
         \x20   except OSError as e:\n\
         \x20       print('refused', kind, port, e.errno)\n"
    );
    let (status, out) = runner
        .post(&json!({"lang": "python", "code": direct, "egress": [ALLOWED]}))
        .await;
    assert_eq!(status, 200, "{out}");
    assert!(!stdout(&out).contains("SENT"), "{out}");
    assert_eq!(stdout(&out).matches("refused").count(), 3, "{out}");
    let ifaces = run_bash(
        runner,
        "tail -n +3 /proc/net/dev | cut -d: -f1; tail -n +2 /proc/net/route | wc -l",
        json!([ALLOWED]),
    )
    .await;
    assert_eq!(
        stdout(&ifaces).split_whitespace().collect::<Vec<_>>(),
        ["lo", "0"],
        "{ifaces}"
    );
}

/// Over CONNECT, a sandbox's TLS client verifies the host's certificate (the test's own
/// CA: given, it works; the host's CAs alone do not know it), and the proxy closes a
/// tunnel whose ClientHello names another host than the CONNECT's.
#[test]
fn tls_goes_through_connect_and_another_server_name_is_refused() {
    in_test_net(
        "t",
        |net| runner_in(net, ALLOWED),
        |runner, site| async move {
            let cert = site.cert;
            let code = format!(
                "cat > /tmp/ca.pem <<'END'\n{cert}END\n\
                 curl -sS -m 10 --cacert /tmp/ca.pem https://{ALLOWED}/"
            );
            let verified = run_bash(&runner, &code, json!([ALLOWED])).await;
            assert_eq!(stdout(&verified), PAGE, "{verified}");
            let code = format!("curl -s -m 10 https://{ALLOWED}/; echo $?");
            let unknown = run_bash(&runner, &code, json!([ALLOWED])).await;
            assert_eq!(stdout(&unknown).trim(), "60", "not verified: {unknown}");
            let (status, fronted) = runner
                .post(&json!({"lang": "python", "code": FRONTING, "egress": [ALLOWED]}))
                .await;
            assert_eq!(status, 200, "{fronted}");
            let lines: Vec<&str> = stdout(&fronted).lines().collect();
            assert!(
                lines[0].contains(" 200"),
                "the CONNECT is answered: {fronted}"
            );
            assert!(
                lines[1].starts_with("closed"),
                "the tunnel is closed: {fronted}"
            );
        },
    );
}

/// A CONNECT to the granted host whose ClientHello names the other: prints the proxy's
/// status line, then `closed ...` or `ANSWERED ...`.
const FRONTING: &str = r#"
import socket, ssl
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
print(s.recv(4096).decode().split("\r\n")[0])
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
try:
    tls = context.wrap_socket(s, server_hostname="other.test")
    tls.sendall(b"GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
    print("ANSWERED", tls.recv(4096)[:40])
except (OSError, ssl.SSLError) as e:
    print("closed", type(e).__name__)
"#;

#[test]
fn a_session_narrowed_with_patch_loses_its_host() {
    in_test_net(
        "s",
        |net| runner_in(net, &format!("{ALLOWED},*.example.test")),
        |runner, _site| async move {
            let (status, info) = runner
                .request("POST", "/sessions", Some(&json!({"egress": [ALLOWED]})))
                .await;
            assert_eq!(status, 201, "{info}");
            assert_eq!(info["egress"], json!([ALLOWED]), "{info}");
            let id = info["id"].as_str().unwrap().to_owned();
            let fetch = format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{ALLOWED}/");
            let before = runner.ok_in(&id, "bash", &fetch).await;
            assert_eq!(stdout(&before), format!("{PAGE}\n200"), "{before}");
            assert_eq!(before["egress"]["connections"], 1, "{before}");
            let python = format!(
                "import urllib.request\nprint(urllib.request.urlopen('http://{ALLOWED}/', timeout=10).read().decode(), end='')"
            );
            let resident = runner.ok_in(&id, "python", &python).await;
            assert_eq!(
                stdout(&resident),
                PAGE,
                "a session's interpreter: {resident}"
            );
            paused_and_forked_keep_their_host(&runner, &id, &fetch).await;
            let (status, started) = runner
                .request(
                    "POST",
                    &format!("/sessions/{id}/processes"),
                    Some(&json!({"command": format!("{fetch} > /tmp/by-process")})),
                )
                .await;
            assert_eq!(status, 201, "{started}");
            let by_process = runner
                .ok_in(&id, "bash", "for i in $(seq 100); do grep -q 200 /tmp/by-process 2>/dev/null && break; sleep 0.1; done; cat /tmp/by-process")
                .await;
            assert_eq!(
                stdout(&by_process),
                format!("{PAGE}\n200"),
                "a process: {by_process}"
            );
            let path = format!("/sessions/{id}");
            let (status, refused) = runner
                .request("PATCH", &path, Some(&json!({"egress": [OTHER]})))
                .await;
            assert_eq!(status, 400, "{refused}");
            assert_eq!(refused["error"]["code"], "egress_not_allowed", "{refused}");
            let (status, narrowed) = runner
                .request("PATCH", &path, Some(&json!({"egress": []})))
                .await;
            assert_eq!(status, 200, "{narrowed}");
            assert_eq!(narrowed["egress"], json!([]), "{narrowed}");
            let (_, shown) = runner.request("GET", &path, None).await;
            assert_eq!(shown["egress"], json!([]), "{shown}");
            let after = runner.ok_in(&id, "bash", &fetch).await;
            assert!(stdout(&after).ends_with("\n403"), "{after}");
            assert_eq!(after["egress"]["refused"], 1, "{after}");
            let (status, run_egress) = runner
                .request(
                    "POST",
                    &format!("/sessions/{id}/run"),
                    Some(&json!({"lang": "bash", "code": "true", "egress": [ALLOWED]})),
                )
                .await;
            assert_eq!(status, 400, "a session's run takes no egress: {run_egress}");
            let (status, _) = runner.request("DELETE", &path, None).await;
            assert_eq!(status, 204);
        },
    );
}

/// A session woken from its pause, in a new sandbox, and a fork of it keep its grant.
async fn paused_and_forked_keep_their_host(runner: &Runner, id: &str, fetch: &str) {
    let (status, paused) = runner
        .request("POST", &format!("/sessions/{id}/pause"), None)
        .await;
    assert_eq!(status, 200, "{paused}");
    let woken = runner.ok_in(id, "bash", fetch).await;
    assert_eq!(woken["resumed"], true, "{woken}");
    assert_eq!(stdout(&woken), format!("{PAGE}\n200"), "{woken}");
    let (status, forked) = runner
        .request(
            "POST",
            &format!("/sessions/{id}/fork"),
            Some(&json!({"count": 1})),
        )
        .await;
    assert_eq!(status, 201, "{forked}");
    let fork = forked["sessions"][0]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let (_, info) = runner
        .request("GET", &format!("/sessions/{fork}"), None)
        .await;
    assert_eq!(info["egress"], json!([ALLOWED]), "{info}");
    let in_fork = runner.ok_in(&fork, "bash", fetch).await;
    assert_eq!(stdout(&in_fork), format!("{PAGE}\n200"), "{in_fork}");
    let (status, _) = runner
        .request("DELETE", &format!("/sessions/{fork}"), None)
        .await;
    assert_eq!(status, 204);
}

#[test]
fn a_sandbox_made_by_a_jail_reaches_the_proxy_too() {
    in_test_net(
        "j",
        |net| runner_with(net, ALLOWED, false),
        |runner, _site| async move {
            let fetch = format!("curl -sS -m 10 http://{ALLOWED}/");
            for lang_code in [
                ("bash", fetch.clone()),
                (
                    "python",
                    format!("import urllib.request\nprint(urllib.request.urlopen('http://{ALLOWED}/', timeout=10).read().decode(), end='')"),
                ),
            ] {
                let (lang, code) = lang_code;
                let body = json!({"lang": lang, "code": code, "egress": [ALLOWED]});
                let (status, out) = runner.post(&body).await;
                assert_eq!(status, 200, "{out}");
                assert_eq!(stdout(&out), PAGE, "{lang}: {out}");
            }
        },
    );
}

#[test]
fn a_sessions_bytes_are_capped_over_its_whole_life() {
    let cap = 100_000;
    in_test_net(
        "b",
        |net| {
            runner_env(
                net,
                ALLOWED,
                &[("RUNNER_EGRESS_MAX_BYTES", &cap.to_string())],
            )
        },
        |runner, _site| async move {
            let id = runner.open_session(json!({"egress": [ALLOWED]})).await;
            let big = format!("curl -s -m 10 http://{ALLOWED}/big.bin | wc -c");
            let first = runner.ok_in(&id, "bash", &big).await;
            let got: usize = stdout(&first).trim().parse().expect("a count");
            assert!(
                got < BIG,
                "{got} bytes of {BIG} through a cap of {cap}: {first}"
            );
            let moved = &first["egress"];
            let total = moved["bytesIn"].as_u64().unwrap() + moved["bytesOut"].as_u64().unwrap();
            assert!(total <= cap, "{first}");
            let fetch = format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{ALLOWED}/");
            let next = runner.ok_in(&id, "bash", &fetch).await;
            assert!(
                stdout(&next).ends_with("\n403"),
                "the cap holds across runs: {next}"
            );
            assert!(!stdout(&next).contains(PAGE), "{next}");
        },
    );
}

#[tokio::test]
async fn with_egress_off_a_sandbox_has_no_proxy() {
    let runner = Runner::start();
    let health = runner.health().await;
    assert_eq!(health["limits"]["network"], false, "{health}");
    assert!(health["limits"].get("networkHosts").is_none(), "{health}");
    let code = "env | grep -ci proxy; grep -c ':0C38 ' /proc/net/tcp; true";
    let out = runner.run("bash", code).await;
    assert_eq!(exit_code(&out), 0, "{out}");
    assert_eq!(
        stdout(&out).split_whitespace().collect::<Vec<_>>(),
        ["0", "0"],
        "proxy variables or a listener on 3128: {out}"
    );
    assert!(out.get("egress").is_none(), "{out}");
    let (status, refused) = runner
        .post(&json!({"lang": "bash", "code": "true", "egress": ["example.com"]}))
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "egress_not_allowed", "{refused}");
    let (status, session) = runner.request("POST", "/sessions", Some(&json!({}))).await;
    assert_eq!(status, 201, "{session}");
    assert!(session.get("egress").is_none(), "{session}");
}
