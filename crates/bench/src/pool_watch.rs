//! A runner's pool seen from the host: whether it is at rest (full, and every process
//! of every sandbox asleep with its CPU time unchanged for [`QUIET`], so that no
//! refill's loader is still starting or importing), and what its warm sandboxes are
//! prepared for (the loader each one runs, read from its processes' command lines).

use crate::clients::RunnerApi;
use crate::memory;
use crate::procfs;
use anyhow::bail;
use std::time::{Duration, Instant};

/// How long every sandbox process must stay asleep, its CPU time unchanged, for the
/// pool to count as at rest (CPU time moves in 10 ms ticks; an importing loader gains
/// several per 100 ms even on half a CPU).
pub const QUIET: Duration = Duration::from_millis(300);
/// How often the pool's state is looked at while waiting for it to rest.
const POLL_EVERY: Duration = Duration::from_millis(25);

/// A runner under test: its API and its process id (for its sandboxes' cgroups).
pub struct Runner<'a> {
    /// Its HTTP API.
    pub api: &'a RunnerApi,
    /// Its process id.
    pub pid: u32,
}

impl Runner<'_> {
    async fn full(&self) -> anyhow::Result<bool> {
        let health = self.api.health().await?;
        if health.status != "ok" {
            bail!("runner {} is {}", self.pid, health.status);
        }
        Ok(health.available >= health.pool_size)
    }
}

/// Waits until every runner's pool is at rest: full, and every process of every
/// sandbox asleep with the same CPU time for [`QUIET`]. How long it waited, and whether
/// it got there within `timeout` (past it the caller goes ahead and says so).
pub async fn at_rest(
    runners: &[&Runner<'_>],
    timeout: Duration,
) -> anyhow::Result<(Duration, bool)> {
    let begun = Instant::now();
    let pids: Vec<u32> = runners.iter().map(|r| r.pid).collect();
    let mut quiet_since: Option<(Vec<(u32, u64)>, Instant)> = None;
    loop {
        let snapshot = if all_full(runners).await? {
            idle_snapshot(&pids)
        } else {
            None
        };
        quiet_since = match (snapshot, quiet_since) {
            (Some(now), Some((then, since))) if now == then => {
                if since.elapsed() >= QUIET {
                    return Ok((begun.elapsed(), true));
                }
                Some((then, since))
            }
            (Some(now), _) => Some((now, Instant::now())),
            (None, _) => None,
        };
        if begun.elapsed() >= timeout {
            return Ok((begun.elapsed(), false));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

async fn all_full(runners: &[&Runner<'_>]) -> anyhow::Result<bool> {
    for runner in runners {
        if !runner.full().await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Every sandbox process of the runners with its CPU ticks, sorted; `None` when one is
/// not asleep (running, in uninterruptible sleep, a zombie) or vanished while being read.
fn idle_snapshot(runner_pids: &[u32]) -> Option<Vec<(u32, u64)>> {
    let mut snapshot = Vec::new();
    for runner in runner_pids {
        for cgroup in memory::sandbox_cgroups(*runner).ok()? {
            for pid in procfs::procs(&cgroup).ok()? {
                let stat = procfs::stat(pid).ok()?;
                if !matches!(stat.state, 'S' | 'I') {
                    return None;
                }
                snapshot.push((pid, stat.cpu_ticks));
            }
        }
    }
    snapshot.sort_unstable();
    Some(snapshot)
}

/// What each sandbox of the runner `runner_pid` is prepared for: the language whose
/// loader it runs (`python`, `node`, `typescript`, `java`), `None` for one that runs
/// none (bash and the compiled languages use those).
pub fn preparations(runner_pid: u32) -> anyhow::Result<Vec<Option<&'static str>>> {
    let mut found = Vec::new();
    for cgroup in memory::sandbox_cgroups(runner_pid)? {
        let loader = procfs::procs(&cgroup)?
            .into_iter()
            .find_map(|pid| loader_of(&procfs::cmdline(pid)));
        found.push(loader);
    }
    Ok(found)
}

/// The language of the loader a process runs, from its arguments: `python3 -c LOADER`,
/// `node ... -e LOADER` (`typescript` last for TypeScript's), `java ... LOADER_FILE`.
fn loader_of(args: &[String]) -> Option<&'static str> {
    let program = args.first()?.rsplit('/').next()?;
    match program {
        "python3" => Some("python"),
        "node" if args.last().is_some_and(|a| a == "typescript") => Some("typescript"),
        "node" => Some("node"),
        "java" => Some("java"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn loaders_are_told_by_their_command_line() {
        assert_eq!(loader_of(&args(&["python3", "-c", "x"])), Some("python"));
        assert_eq!(
            loader_of(&args(&["/usr/bin/node", "-e", "x", "typescript"])),
            Some("typescript")
        );
        assert_eq!(loader_of(&args(&["node", "-e", "x"])), Some("node"));
        assert_eq!(
            loader_of(&args(&["java", "-XX:+UseSerialGC", "/tmp/L.java"])),
            Some("java")
        );
        assert_eq!(loader_of(&args(&["/proc/self/exe", "jail"])), None);
        assert_eq!(loader_of(&[]), None);
    }
}
