//! What a session's process costs in memory (issue 30): the session's cgroup charge for
//! each process started with `POST /sessions/{id}/processes`, next to the same program
//! left in the background by a run (the baseline, measured in the same session), and
//! what a process whose output window is full adds.

use crate::clients::RunnerApi;
use crate::memory;
use crate::procfs;
use anyhow::{ensure, Context};
use reqwest::Method;
use sandbox_protocol::Lang;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Processes of each kind measured together (one session may run 16 of the API's).
pub const COUNT: usize = 12;
/// How long the session is left to settle before its charge is read.
const SETTLE: Duration = Duration::from_millis(700);
/// Bytes each stream of the window-filling process writes (past the runner's default
/// window of 1 MiB).
const FLOOD_BYTES: u64 = 3 << 20;

/// The session's charge per process, each way.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessMemory {
    /// Processes of each kind.
    pub count: usize,
    /// Per `sleep` a run left in the background, bytes.
    pub background_bytes_each: i64,
    /// Per `sleep` started as a process of the API, bytes.
    pub process_bytes_each: i64,
    /// What one process whose two output windows are full adds, bytes.
    pub full_window_bytes: i64,
}

/// Measures in a session of its own.
pub async fn measure(api: &RunnerApi, runner_pid: u32) -> anyhow::Result<ProcessMemory> {
    api.in_session(|id| async move {
        let marker = format!("bench-mark-{}", std::process::id());
        // The run waits for it to exec: one frozen before its exec would keep the
        // shell's command line.
        let leave = format!(
            "(exec -a {marker} sleep 1000) >/dev/null 2>&1 & \
             until grep -qs {marker} /proc/$!/cmdline; do sleep 0.02; done"
        );
        api.session_expect(&id, &Lang::BASH, &leave, "").await?;
        let cgroup = session_cgroup(runner_pid, &marker).await?;
        let charge = || async {
            tokio::time::sleep(SETTLE).await;
            memory::sandbox(&cgroup).map(|m| m.cgroup_bytes as i64)
        };
        let base = charge().await?;
        let background =
            format!("for i in $(seq {COUNT}); do (exec sleep 1000) >/dev/null 2>&1 & done");
        api.session_expect(&id, &Lang::BASH, &background, "")
            .await?;
        let with_background = charge().await?;
        for _ in 0..COUNT {
            start(api, &id, "sleep 1000").await?;
        }
        let with_processes = charge().await?;
        let flood = format!(
            "head -c {FLOOD_BYTES} /dev/zero; head -c {FLOOD_BYTES} /dev/zero >&2; sleep 1000"
        );
        let pid = start(api, &id, &flood).await?;
        written(api, &id, pid).await?;
        let with_window = charge().await?;
        let each = |delta: i64| delta / COUNT as i64;
        Ok(ProcessMemory {
            count: COUNT,
            background_bytes_each: each(with_background - base),
            process_bytes_each: each(with_processes - with_background),
            full_window_bytes: with_window - with_processes,
        })
    })
    .await
}

/// The memory cgroup of the sandbox that holds the host process marked `marker`.
async fn session_cgroup(runner_pid: u32, marker: &str) -> anyhow::Result<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        for cgroup in memory::sandbox_cgroups(runner_pid)? {
            let marked = procfs::procs(&cgroup)?
                .into_iter()
                .any(|pid| procfs::cmdline(pid).first().is_some_and(|a| a == marker));
            if marked {
                return Ok(cgroup);
            }
        }
        ensure!(Instant::now() < deadline, "no sandbox holds {marker}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts `command` as a process of session `id`; its pid.
async fn start(api: &RunnerApi, id: &str, command: &str) -> anyhow::Result<i64> {
    let path = format!("/sessions/{id}/processes");
    let response = api
        .request(Method::POST, &path)
        .json(&serde_json::json!({ "command": command }))
        .send()
        .await
        .with_context(|| format!("POST {path}"))?;
    ensure!(
        response.status().as_u16() == 201,
        "POST {path}: {}",
        response.status()
    );
    let started: serde_json::Value = response.json().await.context("the started process")?;
    started["pid"].as_i64().context("a pid")
}

/// Waits until process `pid` has written all of its flood.
async fn written(api: &RunnerApi, id: &str, pid: i64) -> anyhow::Result<()> {
    let path = format!(
        "/sessions/{id}/processes/{pid}/output?stdoutFrom={FLOOD_BYTES}&stderrFrom={FLOOD_BYTES}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer: serde_json::Value = api
            .request(Method::GET, &path)
            .send()
            .await
            .context("reading the flood's output")?
            .json()
            .await
            .context("the output's answer")?;
        if answer["stdoutTo"] == FLOOD_BYTES && answer["stderrTo"] == FLOOD_BYTES {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the flood did not finish: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
