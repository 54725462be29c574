//! What a warm sandbox costs in memory: its cgroup's charge and its processes' RSS,
//! next to the same interpreter started directly and left idle.

use crate::cases::Case;
use crate::procfs;
use anyhow::{bail, Context};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// Where cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// How long an idle interpreter is left to settle before it is measured.
const SETTLE: Duration = Duration::from_millis(500);
/// How long an idle interpreter may take to exit once its stdin closes.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The memory controller's layout on this host.
struct Memory {
    /// The folder that holds top-level cgroups of the memory controller.
    root: PathBuf,
    /// The file with a cgroup's current charge.
    usage_file: &'static str,
}

impl Memory {
    fn detect() -> Memory {
        let root = Path::new(CGROUP_ROOT);
        if root.join("cgroup.controllers").exists() {
            Memory {
                root: root.to_owned(),
                usage_file: "memory.current",
            }
        } else {
            Memory {
                root: root.join("memory"),
                usage_file: "memory.usage_in_bytes",
            }
        }
    }

    fn usage(&self, cgroup: &Path) -> anyhow::Result<u64> {
        read_number(&cgroup.join(self.usage_file))
    }
}

/// One warm sandbox.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxMemory {
    /// `python` or `node` when its interpreter waits for the program, else `bash`.
    pub kind: &'static str,
    /// The charge of its cgroup (anonymous memory, tmpfs files, kernel memory).
    pub cgroup_bytes: u64,
    /// The sum of its processes' RSS (shared library pages counted in each).
    pub rss_bytes: u64,
    /// Its processes, by command name.
    pub processes: Vec<String>,
}

/// Every warm sandbox of the runner `runner_pid`.
pub fn warm_sandboxes(runner_pid: u32) -> anyhow::Result<Vec<SandboxMemory>> {
    sandbox_cgroups(runner_pid)?
        .iter()
        .map(|cgroup| sandbox(cgroup))
        .collect()
}

/// The memory cgroup of every sandbox of the runner `runner_pid` (warm, running, or a
/// session's).
pub fn sandbox_cgroups(runner_pid: u32) -> anyhow::Result<Vec<PathBuf>> {
    let instance = Memory::detect()
        .root
        .join("sandbox-runner")
        .join(format!("r{runner_pid}"));
    let entries =
        std::fs::read_dir(&instance).with_context(|| format!("listing {}", instance.display()))?;
    let mut cgroups = Vec::new();
    for entry in entries {
        let dir = entry.context("listing sandbox cgroups")?.path();
        if dir.is_dir() {
            cgroups.push(dir);
        }
    }
    cgroups.sort();
    Ok(cgroups)
}

/// The memory of the sandbox whose memory cgroup is `cgroup`.
pub fn sandbox(cgroup: &Path) -> anyhow::Result<SandboxMemory> {
    let memory = Memory::detect();
    let pids = procfs::procs(cgroup)?;
    let mut kind = "bash";
    let mut rss_bytes = 0;
    let mut processes = Vec::new();
    for pid in pids {
        let name = procfs::cmdline(pid).into_iter().next().unwrap_or_default();
        match name.rsplit('/').next() {
            Some("python3") => kind = "python",
            Some("node") => kind = "node",
            _ => {}
        }
        rss_bytes += rss(pid).unwrap_or(0);
        processes.push(name);
    }
    Ok(SandboxMemory {
        kind,
        cgroup_bytes: memory.usage(cgroup)?,
        rss_bytes,
        processes,
    })
}

/// An interpreter started directly and left idle.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IdleInterpreter {
    /// The kind of sandbox it compares with.
    pub kind: &'static str,
    /// The charge of a cgroup holding only it.
    pub cgroup_bytes: u64,
    /// Its RSS.
    pub rss_bytes: u64,
}

/// Starts `case`'s interpreter directly, in a cgroup of its own, waiting on stdin;
/// measures it once it has settled, then lets it exit and removes the cgroup.
pub async fn idle_interpreter(case: &Case, kind: &'static str) -> anyhow::Result<IdleInterpreter> {
    let memory = Memory::detect();
    let cgroup = memory
        .root
        .join(format!("bench-idle-{}-{kind}", std::process::id()));
    std::fs::create_dir(&cgroup).with_context(|| format!("creating {}", cgroup.display()))?;
    let measured = measure_idle(&memory, &cgroup, case, kind).await;
    let removed = remove_cgroup(&cgroup).await;
    let measured = measured?;
    removed?;
    Ok(measured)
}

async fn measure_idle(
    memory: &Memory,
    cgroup: &Path,
    case: &Case,
    kind: &'static str,
) -> anyhow::Result<IdleInterpreter> {
    let interpreter = case.interpreter()?;
    // The shell joins the cgroup, then becomes the interpreter: every page the
    // interpreter touches is charged there.
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(r#"echo $$ > "$0" && exec "$1" "$2" "$3""#)
        .arg(cgroup.join("cgroup.procs"))
        .arg(&interpreter)
        .arg(case.inline_flag)
        .arg(case.idle_code)
        .env_clear()
        .envs(Case::clean_env())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting an idle {}", interpreter.display()))?;
    let pid = child.id().context("the idle interpreter exited at once")?;
    tokio::time::sleep(SETTLE).await;
    if child.try_wait()?.is_some() {
        bail!("the idle {} exited early", interpreter.display());
    }
    let cgroup_bytes = memory.usage(cgroup)?;
    let rss_bytes = rss(pid)?;
    drop(child.stdin.take()); // end of input: the interpreter exits
    tokio::time::timeout(EXIT_TIMEOUT, child.wait())
        .await
        .context("the idle interpreter did not exit")?
        .context("waiting for the idle interpreter")?;
    Ok(IdleInterpreter {
        kind,
        cgroup_bytes,
        rss_bytes,
    })
}

/// Removes an emptied cgroup; the kernel may take a moment to release it.
async fn remove_cgroup(cgroup: &Path) -> anyhow::Result<()> {
    let mut last = None;
    for _ in 0..50 {
        match std::fs::remove_dir(cgroup) {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(last
        .map(anyhow::Error::from)
        .unwrap_or_else(|| anyhow::anyhow!("busy")))
    .with_context(|| format!("removing {}", cgroup.display()))
}

/// VmRSS of a process, in bytes.
fn rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

fn read_number(path: &Path) -> anyhow::Result<u64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.trim()
        .parse()
        .with_context(|| format!("{} holds {text:?}, not a number", path.display()))
}
