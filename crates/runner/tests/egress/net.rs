//! The test's network: two network namespaces joined by a veth pair, the runner's (whose
//! mount namespace shows the test's hosts file and resolver configuration) and the web
//! server's, on an address of 198.18.0.0/15 (a reserved range the proxy lets through),
//! serving a page, a big file and a one-package index over HTTP and HTTPS.

use crate::{ALLOWED, BIG, OTHER, PAGE};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use test_support::https_server::PYTHON_TLS_SERVER;

/// The namespaces, web server and files of one test; all removed on drop.
pub(crate) struct Net {
    runner_ns: String,
    web_ns: String,
    /// The web server's address, 198.18.<octet>.2 (the runner's side is .1).
    web_ip: String,
    servers: Vec<Child>,
    /// The test's files: the web server's folder, certificate, hosts file, runner data.
    pub(crate) dir: PathBuf,
}

/// What a test is told of its web server: its address, and the certificate of its HTTPS
/// side (for `ALLOWED`), in PEM.
#[derive(Clone)]
pub(crate) struct Site {
    pub(crate) ip: String,
    pub(crate) cert: String,
}

impl Net {
    /// Two namespaces joined by a veth pair, a web server in one, and the files the
    /// runner's mount namespace shows at /etc/hosts and /etc/resolv.conf.
    pub(crate) fn new(tag: &str) -> Net {
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

    pub(crate) fn site(&self) -> Site {
        let cert = std::fs::read_to_string(self.dir.join("cert.pem")).expect("the certificate");
        Site {
            ip: self.web_ip.clone(),
            cert,
        }
    }

    /// The web server, plain on port 80 and HTTPS on 443.
    fn serve(&mut self) {
        let web = self.dir.join("web");
        for (port, script) in [("80", PLAIN_SERVER), ("443", PYTHON_TLS_SERVER)] {
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
    pub(crate) fn wrapper(&self) -> Vec<String> {
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
    pub(crate) fn within<T: Send>(&self, test: impl FnOnce() -> T + Send) -> T {
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
    pub(crate) fn wait_for_server(&self) {
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
