//! Real parts for the proxy's tests: origins on loopback (a plain HTTP server in tokio, a
//! TLS server in Python with a certificate made by openssl), a resolver the test answers
//! for, the proxy itself on a loopback listener, and real clients (curl, Python, openssl).

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_egress::{
    Dial, Dialing, Egress, Limits, Lookup, Options, Policy, Resolve, SandboxEgress, Timeouts,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// How long any client in a test may take.
pub const CLIENT_TIME: Duration = Duration::from_secs(30);

/// A resolver whose answers the test sets: each lookup of a name takes its next answer
/// (the last one stays).
#[derive(Debug, Default)]
pub struct Names {
    answers: Mutex<HashMap<String, VecDeque<Vec<IpAddr>>>>,
    lookups: AtomicUsize,
}

impl Names {
    /// Answers `name` with `answers`, one per lookup.
    pub fn set(&self, name: &str, answers: &[&[&str]]) {
        let answers = answers
            .iter()
            .map(|answer| answer.iter().map(|ip| ip.parse().unwrap()).collect())
            .collect();
        self.answers
            .lock()
            .unwrap()
            .insert(name.to_string(), answers);
    }

    /// How many lookups the proxy made.
    pub fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }
}

impl Resolve for Names {
    fn lookup<'a>(&'a self, name: &'a str) -> Lookup<'a> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let mut answers = self.answers.lock().unwrap();
        let answer = match answers.get_mut(name) {
            Some(queue) if queue.len() > 1 => queue.pop_front(),
            Some(queue) => queue.front().cloned(),
            None => None,
        };
        Box::pin(async move {
            answer.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such name"))
        })
    }
}

/// A dialer that connects on loopback only and keeps every address asked for: a test never
/// sends a packet elsewhere, even when the proxy under test is wrong, and says so.
#[derive(Debug, Default)]
pub struct LoopbackOnly {
    outside: Mutex<Vec<SocketAddr>>,
}

impl LoopbackOnly {
    /// The addresses off loopback the proxy tried to connect to.
    pub fn outside(&self) -> Vec<SocketAddr> {
        self.outside.lock().unwrap().clone()
    }
}

impl Dial for LoopbackOnly {
    fn dial(&self, address: SocketAddr) -> Dialing<'_> {
        Box::pin(async move {
            if !address.ip().is_loopback() {
                self.outside.lock().unwrap().push(address);
                let refused = "the test dials loopback only";
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, refused));
            }
            TcpStream::connect(address).await
        })
    }
}

/// A proxy serving one sandbox on a loopback listener.
pub struct Proxy {
    pub egress: Egress,
    pub sandbox: SandboxEgress,
    pub address: SocketAddr,
    pub names: Arc<Names>,
    pub dialer: Arc<LoopbackOnly>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// A proxy for `allow`/`cidrs`, the sandbox granted all of it; `pass_loopback` lets the
    /// loopback origins through.
    pub async fn start(allow: &str, cidrs: &str, limits: Limits, pass_loopback: bool) -> Proxy {
        Proxy::start_with(allow, cidrs, limits, pass_loopback, Timeouts::default()).await
    }

    pub async fn start_with(
        allow: &str,
        cidrs: &str,
        limits: Limits,
        pass_loopback: bool,
        timeouts: Timeouts,
    ) -> Proxy {
        let policy = Policy::parse(allow, cidrs).unwrap();
        let names = Arc::new(Names::default());
        let dialer = Arc::new(LoopbackOnly::default());
        let options = Options {
            resolver: names.clone(),
            dialer: dialer.clone(),
            pass_loopback,
            timeouts,
        };
        let egress = Egress::with_options(policy.clone(), limits, options);
        let sandbox = egress.sandbox();
        sandbox.set_grant(policy.grant_all());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let task = egress.serve(listener, sandbox.clone());
        Proxy {
            egress,
            sandbox,
            address,
            names,
            dialer,
            task,
        }
    }

    /// The proxy's URL, as programs get it.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The variables of `sandbox_egress::proxy_env`, the proxy's URL in place of the
    /// in-sandbox address.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let inside = format!("http://{}", sandbox_egress::PROXY_ADDR);
        sandbox_egress::proxy_env()
            .into_iter()
            .map(|(name, value)| (name, value.replace(&inside, &self.url())))
            .collect()
    }

    /// Sends `request` raw and reads the whole answer (until the proxy closes).
    pub async fn raw(&self, request: &str) -> String {
        let mut stream = TcpStream::connect(self.address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let reading = stream.read_to_end(&mut answer);
        tokio::time::timeout(CLIENT_TIME, reading)
            .await
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// Aborts the serving task as the runner does; returns whether it ended cancelled.
    pub async fn stop(&mut self) -> bool {
        self.task.abort();
        let ended = tokio::time::timeout(CLIENT_TIME, &mut self.task).await;
        matches!(ended, Ok(Err(error)) if error.is_cancelled())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        if !std::thread::panicking() {
            let outside = self.dialer.outside();
            assert!(
                outside.is_empty(),
                "the proxy dialed off loopback: {outside:?}"
            );
        }
    }
}

/// A plain HTTP origin on loopback: answers every request with `body`, keeping the heads
/// it received.
pub struct HttpOrigin {
    pub port: u16,
    pub heads: Arc<Mutex<Vec<String>>>,
    pub accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl HttpOrigin {
    pub async fn start(ip: &str, body: Vec<u8>) -> HttpOrigin {
        HttpOrigin::start_on(ip, 0, body).await
    }

    pub async fn start_on(ip: &str, port: u16, body: Vec<u8>) -> HttpOrigin {
        let listener = TcpListener::bind((ip, port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (kept, counted) = (heads.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            let body = Arc::new(body);
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(answer(stream, body.clone(), kept.clone()));
            }
        });
        HttpOrigin {
            port,
            heads,
            accepted,
            task,
        }
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

async fn answer(stream: TcpStream, body: Arc<Vec<u8>>, heads: Arc<Mutex<Vec<String>>>) {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    heads.lock().unwrap().push(head);
    let mut stream = reader.into_inner();
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.write_all(&body).await;
}

impl Drop for HttpOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A certificate for `names` and its key, made by openssl.
pub struct Certificate {
    pub dir: tempfile::TempDir,
}

impl Certificate {
    pub async fn make(names: &[&str]) -> Certificate {
        let dir = tempfile::tempdir().unwrap();
        let san = names
            .iter()
            .map(|n| format!("DNS:{n}"))
            .collect::<Vec<_>>()
            .join(",");
        let status = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ])
            .args([
                "-nodes",
                "-days",
                "1",
                "-subj",
                &format!("/CN={}", names[0]),
            ])
            .args(["-addext", &format!("subjectAltName={san}")])
            .arg("-keyout")
            .arg(dir.path().join("key.pem"))
            .arg("-out")
            .arg(dir.path().join("cert.pem"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .unwrap();
        assert!(status.success(), "openssl req failed");
        Certificate { dir }
    }

    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    pub fn key(&self) -> PathBuf {
        self.dir.path().join("key.pem")
    }
}

const TLS_SERVER: &str = r#"
import http.server, ssl, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello over tls\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// An HTTPS origin on 127.0.0.1 (Python's http.server behind its ssl module).
pub struct TlsOrigin {
    pub port: u16,
    pub certificate: Certificate,
    child: Child,
}

impl TlsOrigin {
    pub async fn start(names: &[&str]) -> TlsOrigin {
        let certificate = Certificate::make(names).await;
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(TLS_SERVER)
            .arg(certificate.cert())
            .arg(certificate.key())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        let reading = reader.read_line(&mut line);
        tokio::time::timeout(CLIENT_TIME, reading)
            .await
            .unwrap()
            .unwrap();
        let port = line.trim().parse().unwrap();
        TlsOrigin {
            port,
            certificate,
            child,
        }
    }
}

/// What a client program did.
#[derive(Debug)]
pub struct Outcome {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a client with a clean environment plus `env`, bounded in time.
pub async fn client(program: &str, args: &[&str], env: &[(&'static str, String)]) -> Outcome {
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (name, value) in env {
        command.env(name, value);
    }
    command.stdin(Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(CLIENT_TIME, command.output())
        .await
        .unwrap()
        .unwrap();
    Outcome {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// curl with the proxy variables (no `-x`: it finds the proxy as programs do).
pub async fn curl(proxy: &Proxy, url: &str, extra: &[&str]) -> Outcome {
    let mut args = vec!["-sS", "--max-time", "20"];
    args.extend(extra);
    args.push(url);
    client("curl", &args, &proxy.env()).await
}

const URLLIB: &str = r#"
import ssl, sys, urllib.error, urllib.request
context = ssl.create_default_context(cafile=sys.argv[2]) if len(sys.argv) > 2 else None
try:
    with urllib.request.urlopen(sys.argv[1], context=context, timeout=20) as answer:
        sys.stdout.write(answer.read().decode())
except urllib.error.HTTPError as error:
    sys.stdout.write(f"{error.code}\n{error.read().decode()}")
    sys.exit(3)
"#;

/// Python's urllib with the proxy variables; a CA file for https.
pub async fn urllib(proxy: &Proxy, url: &str, ca: Option<&Path>) -> Outcome {
    let ca = ca.map(|path| path.display().to_string());
    let mut args = vec!["-c", URLLIB, url];
    if let Some(ca) = &ca {
        args.push(ca);
    }
    client("python3", &args, &proxy.env()).await
}

/// The host's first address that is not loopback (`hostname -I`), if any.
pub async fn host_address() -> Option<String> {
    let output = Command::new("hostname").arg("-I").output().await.ok()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.split_whitespace()
        .find(|a| !a.starts_with("127."))
        .map(str::to_string)
}

/// Limits with this many bytes and connections.
pub fn limits(max_bytes: u64, max_connections: usize) -> Limits {
    Limits {
        max_bytes,
        max_connections,
    }
}
