//! The section's own HTTPS host: a network namespace joined to the host's by a veth pair,
//! an address of 198.18.0.0/15 (a reserved range the proxy lets through) on its side, a
//! certificate of the bench's own for [`HOST`], a Python HTTPS server answering a small
//! page, and the hosts file that names it for the runner (in a mount namespace of the
//! runner's own: the machine's /etc/hosts is left alone). Everything is removed on drop.

use super::HOST;
use anyhow::{bail, ensure, Context};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use test_support::https_server::PYTHON_TLS_SERVER;

/// What the server answers at `/`.
pub const PAGE: &str = "egress bench\n";
/// How long the server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The host, its namespace and files; removed on drop.
pub struct Site {
    ns: String,
    /// The host's side of the veth pair.
    outer: String,
    /// The server's address (the host's side of the link is `.1`).
    pub ip: String,
    server: Option<Child>,
    dir: tempfile::TempDir,
}

impl Site {
    /// Makes the namespace, its link, the certificate and the page, and starts the
    /// server; whatever was made is removed if a step fails.
    pub fn start() -> anyhow::Result<Site> {
        let pid = std::process::id();
        let octet = pid % 250;
        let mut site = Site {
            ns: format!("bench-egress-{pid}"),
            outer: format!("beg{pid}h"),
            ip: format!("198.19.{octet}.2"),
            server: None,
            dir: tempfile::tempdir().context("a folder for the HTTPS host")?,
        };
        site.link(pid, octet)?;
        site.write_files()?;
        site.serve()?;
        Ok(site)
    }

    /// The namespace, with the veth pair's one side in it and the other in the host's.
    fn link(&self, pid: u32, octet: u32) -> anyhow::Result<()> {
        let (outer, inner) = (&self.outer, format!("beg{pid}s"));
        ip(&["netns", "add", &self.ns])?;
        ip(&["link", "add", outer, "type", "veth", "peer", "name", &inner])?;
        ip(&["link", "set", &inner, "netns", &self.ns])?;
        ip(&["addr", "add", &format!("198.19.{octet}.1/24"), "dev", outer])?;
        ip(&["link", "set", outer, "up"])?;
        let ns = self.ns.as_str();
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/24", self.ip),
            "dev",
            &inner,
        ])?;
        ip(&["-n", ns, "link", "set", &inner, "up"])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])
    }

    /// The page, the certificate (its own CA: self-signed, for [`HOST`], an ECDSA P-256
    /// key as most sites have) and the hosts file the runner sees.
    fn write_files(&self) -> anyhow::Result<()> {
        let web = self.dir.path().join("web");
        std::fs::create_dir(&web).context("the page's folder")?;
        std::fs::write(web.join("index.html"), PAGE).context("the page")?;
        let hosts = format!("127.0.0.1 localhost\n{} {HOST}\n", self.ip);
        std::fs::write(self.path("hosts"), hosts).context("the hosts file")?;
        let made = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
            .args(["-subj", &format!("/CN={HOST}")])
            .args(["-addext", &format!("subjectAltName=DNS:{HOST}")])
            .arg("-keyout")
            .arg(self.path("key.pem"))
            .arg("-out")
            .arg(self.path("cert.pem"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("openssl")?;
        ensure!(made.success(), "openssl did not make the certificate");
        Ok(())
    }

    /// Starts the server in the namespace and waits until it accepts a connection.
    fn serve(&mut self) -> anyhow::Result<()> {
        let server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "python3",
                "-c",
                PYTHON_TLS_SERVER,
            ])
            .arg(self.path("web"))
            .args([&self.ip, "443"])
            .arg(self.path("cert.pem"))
            .arg(self.path("key.pem"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the HTTPS server")?;
        self.server = Some(server);
        let addr = format!("{}:443", self.ip);
        let deadline = Instant::now() + START_TIMEOUT;
        while std::net::TcpStream::connect(&addr).is_err() {
            if Instant::now() >= deadline {
                bail!("the HTTPS server at {addr} did not listen within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// A file of the site's folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The certificate clients verify the server with, in PEM.
    pub fn cert(&self) -> anyhow::Result<String> {
        std::fs::read_to_string(self.path("cert.pem")).context("reading the certificate")
    }

    /// The runner's wrapper: a mount namespace of its own where the site's hosts file is
    /// /etc/hosts (the runner resolves names as the host does, so its proxy finds
    /// [`HOST`] there).
    pub fn wrapper(&self) -> Vec<String> {
        let script = format!(
            "mount --bind {} /etc/hosts && exec \"$0\" \"$@\"",
            self.path("hosts").display()
        );
        ["unshare", "--mount", "--propagation", "slave", "sh", "-c"]
            .into_iter()
            .map(String::from)
            .chain([script])
            .collect()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        if let Some(server) = &mut self.server {
            let _ = server.kill();
            let _ = server.wait();
        }
        // Deleting the namespace deletes the veth pair, the host's side with it; the
        // host's side goes on its own if a step failed before its peer moved.
        for args in [["netns", "del", &self.ns], ["link", "del", &self.outer]] {
            let _ = Command::new("ip").args(args).stderr(Stdio::null()).status();
        }
    }
}

/// `ip ARGS`, which must succeed.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("ip")?;
    ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Why the section cannot run here: not root, or a program it needs is missing.
pub fn missing() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (a network namespace for its HTTPS host)".into());
    }
    ["ip", "unshare", "openssl", "curl", "python3"]
        .into_iter()
        .find(|tool| !on_path(tool))
        .map(|tool| format!("needs `{tool}` on PATH"))
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}
