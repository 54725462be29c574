//! What `/proc` and a sandbox's cgroups say about its processes: their state (running,
//! sleeping or stopped), their CPU time, their pid inside the sandbox and their command
//! line, and whether the cgroup freezer holds them (a resting session).

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The unit of `utime` and `stime` in `/proc/PID/stat` (`USER_HZ`): part of Linux's
/// user ABI, 100 on every architecture this runs on.
pub const TICKS_PER_SECOND: u64 = 100;
/// How often a process's state is polled while waiting for it to change.
const POLL_EVERY: Duration = Duration::from_millis(5);

/// The fields of `/proc/PID/stat` the bench reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `D`, `T` (stopped by a signal), `Z`, ...
    pub state: char,
    /// CPU time so far, user plus system, in [`TICKS_PER_SECOND`] ticks.
    pub cpu_ticks: u64,
}

/// Parses the text of `/proc/PID/stat`. The command name (in parentheses) may hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> anyhow::Result<Stat> {
    let rest = text
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("no ')' after the command name")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state, ppid, pgrp, session, tty_nr, tpgid, flags, minflt,
    // cminflt, majflt, cmajflt, utime, stime.
    let number = |i: usize| -> anyhow::Result<u64> {
        let field = fields.get(i).with_context(|| format!("no field {i}"))?;
        field
            .parse()
            .with_context(|| format!("field {i} is {field:?}"))
    };
    let state = fields
        .first()
        .and_then(|s| s.chars().next())
        .context("no state")?;
    Ok(Stat {
        state,
        cpu_ticks: number(11)? + number(12)?,
    })
}

/// `/proc/PID/stat` of `pid`.
pub fn stat(pid: u32) -> anyhow::Result<Stat> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_stat(&text).with_context(|| format!("parsing {path}: {text:?}"))
}

/// The process ids in a cgroup (`cgroup.procs`).
pub fn procs(cgroup: &Path) -> anyhow::Result<Vec<u32>> {
    let path = cgroup.join("cgroup.procs");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// The arguments of `pid` (empty for a process that has exited).
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The pid of `pid` in its innermost PID namespace (the last of `NSpid:`), the one
/// a program in the sandbox sees (`$!`).
pub fn inner_pid(pid: u32) -> anyhow::Result<u32> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|ids| ids.split_whitespace().last())
        .and_then(|id| id.parse().ok())
        .with_context(|| format!("no NSpid in {path}"))
}

/// Where the cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Whether the cgroup freezer holds the sandbox whose memory cgroup is `cgroup`: on v1
/// the `freezer.state` of its folder in the freezer's tree, on v2 the `frozen` line of
/// its `cgroup.events`.
pub fn frozen(cgroup: &Path) -> bool {
    let v1_memory = Path::new(CGROUP_ROOT).join("memory");
    match cgroup.strip_prefix(&v1_memory) {
        Ok(rel) => {
            let state = Path::new(CGROUP_ROOT)
                .join("freezer")
                .join(rel)
                .join("freezer.state");
            std::fs::read_to_string(state).is_ok_and(|s| s.trim() == "FROZEN")
        }
        Err(_) => std::fs::read_to_string(cgroup.join("cgroup.events"))
            .is_ok_and(|events| events.lines().any(|l| l.trim() == "frozen 1")),
    }
}

/// Whether any process of `cgroup` is stopped (state `T`).
pub fn holds_stopped(cgroup: &Path) -> anyhow::Result<bool> {
    for pid in procs(cgroup)? {
        // A process that exited between the listing and the read is not stopped.
        if stat(pid).is_ok_and(|s| s.state == 'T') {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether the sandbox whose memory cgroup is `cgroup` rests as a session does between
/// its calls: frozen by its cgroup's freezer, or (a runner without cgroups) with
/// processes its agent stopped.
pub fn rests(cgroup: &Path) -> anyhow::Result<bool> {
    Ok(frozen(cgroup) || holds_stopped(cgroup)?)
}

/// Waits up to `timeout` until the sandbox whose memory cgroup is `cgroup` rests.
pub async fn wait_resting(cgroup: &Path, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !rests(cgroup)? {
        if Instant::now() >= deadline {
            bail!("{} does not rest after {timeout:?}", cgroup.display());
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    Ok(())
}

/// The one cgroup of `cgroups` that rests: a resting session's sandbox (frozen between
/// its calls), where a warm sandbox's processes only sleep. Waits up to `timeout` for
/// exactly one.
pub async fn resting_cgroup(cgroups: &[PathBuf], timeout: Duration) -> anyhow::Result<PathBuf> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut resting = Vec::new();
        for cgroup in cgroups {
            if rests(cgroup)? {
                resting.push(cgroup.clone());
            }
        }
        match resting.as_slice() {
            [one] => return Ok(one.clone()),
            found if Instant::now() >= deadline => {
                bail!("expected one resting sandbox, found {found:?}")
            }
            _ => tokio::time::sleep(POLL_EVERY).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_the_name() {
        let text = "9174 (ba) sh) T 9000 9174 9000 0 -1 4194304 120 0 0 0 29 3 0 0 20 0 1 0";
        let stat = parse_stat(text).unwrap();
        assert_eq!(stat.state, 'T');
        assert_eq!(stat.cpu_ticks, 32);
        assert!(parse_stat("1 (x) S 0").is_err());
    }

    #[test]
    fn this_process_is_running_or_sleeping() {
        let me = stat(std::process::id()).unwrap();
        assert!(matches!(me.state, 'R' | 'S'), "{me:?}");
        assert!(!cmdline(std::process::id()).is_empty());
        assert!(inner_pid(std::process::id()).unwrap() > 0);
    }
}
