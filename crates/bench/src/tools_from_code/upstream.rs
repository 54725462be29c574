//! The upstream of the section: the test suites' issue tracker (an MCP server on the
//! official Python SDK, `tests/mcp-clients/python/tracker_upstream.py`), started with a
//! Python that has the `mcp` package, and the `MCP_UPSTREAMS` file that names it to
//! sandbox-mcp.

use crate::services::Service;
use anyhow::{ensure, Context};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The tracker's program, from the repository's root (where the bench is run).
pub const TRACKER_SCRIPT: &str = "tests/mcp-clients/python/tracker_upstream.py";
/// The server's name in `MCP_UPSTREAMS`: the module `tools.tracker` in a program.
pub const SERVER: &str = "tracker";
/// The tools sandbox-mcp may call for a program (`hang` and `delete_everything` stay out).
pub const ALLOW: [&str; 4] = ["search_*", "get_issue", "list_issues", "status"];
/// The most calls one run may make: the section's runs make 20 at most.
pub const MAX_CALLS_PER_RUN: u32 = 64;
/// How long the check that the Python can serve the tracker may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request to the tracker's `GET /calls` may take.
const CALLS_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the tracker may take from its listening line to accepting connections.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How often its port is tried meanwhile.
const LISTEN_POLL: Duration = Duration::from_millis(20);

/// Why the section cannot run here: a line for the operator, saying how to fix it.
pub fn missing(python: &Path, script: &Path) -> Option<String> {
    if !script.is_file() {
        return Some(format!(
            "{} is missing: run the bench from the repository's root",
            script.display()
        ));
    }
    if !python.is_file() {
        return Some(format!(
            "{} is missing: make it with tests/mcp-clients/run.sh (or `python3 -m venv \
             tests/mcp-clients/.venv && tests/mcp-clients/.venv/bin/pip install -r \
             tests/mcp-clients/python/requirements.txt -c \
             tests/mcp-clients/python/constraints.txt`), or pass --upstream-python with a \
             Python that has the `mcp` package",
            python.display()
        ));
    }
    None
}

/// Why `python` cannot serve the tracker, if it cannot: the imports the tracker needs
/// (the `mcp` package, v2 API, and uvicorn), tried once, bounded in time.
pub async fn cannot_serve(python: &Path) -> anyhow::Result<Option<String>> {
    let probe = tokio::process::Command::new(python)
        .args(["-c", "import mcp.server.mcpserver, uvicorn"])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .with_context(|| format!("{} took over {PROBE_TIMEOUT:?} to import", python.display()))?
        .with_context(|| format!("running {}", python.display()))?;
    if output.status.success() {
        return Ok(None);
    }
    let why = String::from_utf8_lossy(&output.stderr);
    Ok(Some(format!(
        "{} cannot import the `mcp` package (v2 API) and uvicorn ({}): install \
         tests/mcp-clients/python/requirements.txt into it",
        python.display(),
        why.lines().last().unwrap_or("no message")
    )))
}

/// The tracker, running on a loopback port.
pub struct Tracker {
    service: Service,
    /// Its MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// Its base, `http://127.0.0.1:PORT`.
    base: String,
    /// What every request must carry after `Bearer `.
    pub secret: String,
}

impl Tracker {
    /// Starts `script` with `python` on a free loopback port, wanting `secret`.
    pub async fn start(python: &Path, script: &Path, secret: &str) -> anyhow::Result<Tracker> {
        let mut cmd = Command::new(python);
        cmd.arg(script)
            .args(["--port", "0", "--secret", secret])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("PYTHONDONTWRITEBYTECODE", "1");
        let service = Service::start(cmd, "tracker listening on ").await?;
        let port: u16 = service
            .url
            .parse()
            .with_context(|| format!("the tracker announced port {:?}", service.url))?;
        wait_until_listening(port).await?;
        let base = format!("http://127.0.0.1:{port}");
        Ok(Tracker {
            url: format!("{base}/mcp"),
            base,
            secret: secret.to_owned(),
            service,
        })
    }

    /// How many times each tool was called (its `GET /calls`).
    pub async fn calls(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(CALLS_TIMEOUT)
            .build()
            .context("building the HTTP client")?;
        let response = http
            .get(format!("{}/calls", self.base))
            .bearer_auth(&self.secret)
            .send()
            .await
            .context("GET /calls of the tracker")?;
        ensure!(
            response.status().is_success(),
            "GET /calls of the tracker answered {}",
            response.status()
        );
        let counts: Value = response.json().await.context("reading /calls")?;
        counts_of(&counts)
    }

    /// Stops it (SIGTERM, then SIGKILL if it lingers): uvicorn shuts down, then ends by
    /// the SIGTERM it caught.
    pub async fn stop(self) -> anyhow::Result<()> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.service.terminate().await?;
        let clean =
            status.success() || status.signal() == Some(nix::sys::signal::Signal::SIGTERM as i32);
        ensure!(
            clean,
            "the tracker ended with {status} (killed if it lingered)"
        );
        Ok(())
    }
}

/// Waits until the tracker's port takes connections: it announces its port once bound,
/// before its server starts (and listens once its app has started).
async fn wait_until_listening(port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + LISTEN_TIMEOUT;
    loop {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(e).with_context(|| {
                    format!("the tracker did not listen on port {port} within {LISTEN_TIMEOUT:?}")
                })
            }
            Err(_) => tokio::time::sleep(LISTEN_POLL).await,
        }
    }
}

/// The counts of a `GET /calls` answer: `{tool: count}`.
fn counts_of(answer: &Value) -> anyhow::Result<BTreeMap<String, u64>> {
    let object = answer
        .as_object()
        .with_context(|| format!("GET /calls answered {answer}, not an object"))?;
    object
        .iter()
        .map(|(tool, count)| {
            let count = count
                .as_u64()
                .with_context(|| format!("GET /calls: {tool} counted {count}"))?;
            Ok((tool.clone(), count))
        })
        .collect()
}

/// `MCP_UPSTREAMS`' file: the tracker at `url`, with its header, its allowlist and its
/// budget.
pub fn upstreams_toml(url: &str, secret: &str) -> anyhow::Result<String> {
    #[derive(Serialize)]
    struct File<'a> {
        server: [Upstream<'a>; 1],
    }
    #[derive(Serialize)]
    struct Upstream<'a> {
        name: &'a str,
        url: &'a str,
        headers: BTreeMap<&'a str, String>,
        allow: [&'a str; 4],
        max_calls_per_run: u32,
    }
    let file = File {
        server: [Upstream {
            name: SERVER,
            url,
            headers: BTreeMap::from([("Authorization", format!("Bearer {secret}"))]),
            allow: ALLOW,
            max_calls_per_run: MAX_CALLS_PER_RUN,
        }],
    };
    toml::to_string(&file).context("writing the upstreams file")
}

/// The upstreams file, written to a temporary folder removed when dropped.
pub struct UpstreamsFile {
    dir: tempfile::TempDir,
}

impl UpstreamsFile {
    /// Writes `text` as `upstreams.toml`, readable by its owner only (it holds a secret).
    pub fn write(text: &str) -> anyhow::Result<UpstreamsFile> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::Builder::new()
            .prefix("bench-upstreams-")
            .tempdir()
            .context("making a folder for the upstreams file")?;
        let path = dir.path().join("upstreams.toml");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        file.write_all(text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(UpstreamsFile { dir })
    }

    /// Its path, for `MCP_UPSTREAMS`.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("upstreams.toml")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstreams_file_names_the_tracker_with_its_header_allowlist_and_budget() {
        let text = upstreams_toml("http://127.0.0.1:5/mcp", "s3cret").unwrap();
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        let servers = parsed["server"].as_array().unwrap();
        assert_eq!(servers.len(), 1);
        let server = &servers[0];
        assert_eq!(server["name"].as_str(), Some("tracker"));
        assert_eq!(server["url"].as_str(), Some("http://127.0.0.1:5/mcp"));
        assert_eq!(
            server["headers"]["Authorization"].as_str(),
            Some("Bearer s3cret")
        );
        let allow: Vec<&str> = server["allow"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(toml::Value::as_str)
            .collect();
        assert_eq!(allow, ["search_*", "get_issue", "list_issues", "status"]);
        assert_eq!(server["max_calls_per_run"].as_integer(), Some(64));
        let keys: Vec<&String> = server.as_table().unwrap().keys().collect();
        assert_eq!(keys.len(), 5, "no key the contract does not name: {keys:?}");
    }

    #[test]
    fn the_file_is_its_owner_s_only() {
        use std::os::unix::fs::PermissionsExt;
        let file = UpstreamsFile::write("x = 1\n").unwrap();
        let meta = std::fs::metadata(file.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(file.path()).unwrap(), "x = 1\n");
        let dir = file.path().parent().unwrap().to_owned();
        drop(file);
        assert!(!dir.exists(), "removed when dropped");
    }

    #[test]
    fn a_missing_python_or_script_says_how_to_get_it() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let script = here.join("../..").join(TRACKER_SCRIPT);
        let why = missing(Path::new("/nonexistent/python"), &script).unwrap();
        assert!(why.contains("tests/mcp-clients/run.sh"), "{why}");
        assert!(why.contains("--upstream-python"), "{why}");
        let why = missing(Path::new("/bin/sh"), Path::new("/nonexistent.py")).unwrap();
        assert!(why.contains("repository's root"), "{why}");
        assert_eq!(missing(Path::new("/bin/sh"), &script), None);
    }

    #[test]
    fn call_counts_are_read_from_the_tracker_s_answer() {
        let counts = counts_of(&serde_json::json!({"list_issues": 20, "get_issue": 3})).unwrap();
        assert_eq!(counts.get("list_issues"), Some(&20));
        assert!(counts_of(&serde_json::json!([1])).is_err());
        assert!(counts_of(&serde_json::json!({"x": "y"})).is_err());
    }
}
