//! Live output (issue 30): how long a line a program writes takes to reach a client that
//! streams its run (`Accept: application/x-ndjson`), next to the same program's pipe
//! read directly on the host.
//!
//! The program (Python) prints its own `time.time_ns()` every 100 ms, each line flushed;
//! the reader takes its own clock when the line arrives, and the difference is one
//! sample. Both ends read CLOCK_REALTIME, which a process-backend sandbox shares with the
//! host (a time namespace, had it one, covers only the monotonic clocks). Three paths,
//! in turn, on one runner of its own: (a) the interpreter spawned directly, its standard
//! output a pipe the bench reads (the floor: a pipe and a wake-up); (b) `POST /run`
//! streamed; (c) a session's run streamed. Every run's result is checked (exit 0, every
//! line there).

use crate::services::{Binaries, Service};
use crate::stats::{latency, Latency};
use anyhow::{bail, ensure, Context};
use serde::Serialize;
use serde_json::{json, Value};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// The pause between two lines of the program.
const EVERY: Duration = Duration::from_millis(100);
/// The longest one run may take before the bench gives up.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// Sandboxes of the runner: one for the runs, one for the session.
const POOL_SIZE: usize = 2;

/// How many lines the figure takes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Lines each run prints.
    pub lines: usize,
    /// Runs per path.
    pub runs: usize,
}

/// A path a line takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LivePath {
    /// (a) the interpreter spawned directly, its stdout a pipe.
    Direct,
    /// (b) `POST /run` streamed.
    Run,
    /// (c) a session's run streamed.
    SessionRun,
}

impl LivePath {
    /// Every path, in report order.
    pub const ALL: [LivePath; 3] = [LivePath::Direct, LivePath::Run, LivePath::SessionRun];

    /// The row heading in the table.
    pub fn label(self) -> &'static str {
        match self {
            LivePath::Direct => "direct spawn (a pipe)",
            LivePath::Run => "POST /run, streamed",
            LivePath::SessionRun => "POST /sessions/{id}/run, streamed",
        }
    }
}

/// Everything the figure measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveFigures {
    /// Lines each run printed.
    pub lines: usize,
    /// Runs per path.
    pub runs: usize,
    /// Sandboxes of the runner.
    pub pool_size: usize,
    /// One row per path.
    pub rows: Vec<LiveRow>,
}

/// One path's write-to-arrival latency.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveRow {
    /// The path.
    pub path: LivePath,
    /// From the program's write to the line's arrival, ms.
    pub latency: Latency,
}

/// Python printing its own clock every [`EVERY`], `lines` times.
fn program(lines: usize) -> String {
    format!(
        "import time\nfor _ in range({lines}):\n    print(time.time_ns(), flush=True)\n    \
         time.sleep({})\n",
        EVERY.as_secs_f64()
    )
}

/// Starts a runner of its own and measures every path.
pub async fn measure(bins: &Binaries, token: &str, sizes: &Sizes) -> anyhow::Result<LiveFigures> {
    let runner = Service::runner(&bins.runner, token, POOL_SIZE).await?;
    let measured = measure_paths(&runner.url, token, sizes).await;
    let stopped = runner.stop().await.context("stopping sandbox-runner");
    let rows = measured?;
    stopped?;
    Ok(LiveFigures {
        lines: sizes.lines,
        runs: sizes.runs,
        pool_size: POOL_SIZE,
        rows,
    })
}

async fn measure_paths(url: &str, token: &str, sizes: &Sizes) -> anyhow::Result<Vec<LiveRow>> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(RUN_TIMEOUT)
        .build()?;
    let reader = Streamer { http, url, token };
    let session = reader.open_session().await?;
    let code = program(sizes.lines);
    let mut rows = Vec::new();
    for path in LivePath::ALL {
        eprintln!("bench: live output, {}", path.label());
        let mut samples = Vec::new();
        for _ in 0..sizes.runs {
            let run = match path {
                LivePath::Direct => direct(&code).await,
                LivePath::Run => reader.stream("/run", &code).await,
                LivePath::SessionRun => {
                    reader
                        .stream(&format!("/sessions/{session}/run"), &code)
                        .await
                }
            };
            let run = run.with_context(|| path.label())?;
            ensure!(
                run.len() == sizes.lines,
                "{}: {} lines of {}",
                path.label(),
                run.len(),
                sizes.lines
            );
            samples.extend(run);
        }
        let latency = latency(&samples).context("no samples")?;
        rows.push(LiveRow { path, latency });
    }
    Ok(rows)
}

/// What the clock says now, in ns since the epoch.
fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// The sample of one line that arrived `arrived_ns`: from the time it carries.
fn sample(line: &str, arrived_ns: i128) -> anyhow::Result<Duration> {
    let written: i128 = line
        .trim()
        .parse()
        .with_context(|| format!("a line that is not a time: {line:?}"))?;
    Ok(Duration::from_nanos((arrived_ns - written).max(0) as u64))
}

/// Runs the program with `python3` directly, reading its standard output as it comes.
async fn direct(code: &str) -> anyhow::Result<Vec<Duration>> {
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", code])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("spawning python3")?;
    let stdout = child.stdout.take().context("a piped stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut samples = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await? {
            samples.push(sample(&line, now_ns())?);
        }
        let status = child.wait().await?;
        ensure!(status.success(), "python3 exited with {status}");
        anyhow::Ok(())
    };
    tokio::time::timeout(RUN_TIMEOUT, read)
        .await
        .context("the direct run took too long")??;
    Ok(samples)
}

/// A client of the runner that streams runs.
struct Streamer<'a> {
    http: reqwest::Client,
    url: &'a str,
    token: &'a str,
}

impl Streamer<'_> {
    async fn open_session(&self) -> anyhow::Result<String> {
        let response = self
            .http
            .post(format!("{}/sessions", self.url))
            .bearer_auth(self.token)
            .json(&json!({}))
            .send()
            .await?;
        ensure!(
            response.status() == 201,
            "POST /sessions: {}",
            response.status()
        );
        let info: Value = response.json().await?;
        info["id"]
            .as_str()
            .map(str::to_owned)
            .context("a session without an id")
    }

    /// Runs the program at `path` streamed; a sample per line of its output.
    async fn stream(&self, path: &str, code: &str) -> anyhow::Result<Vec<Duration>> {
        let mut response = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(self.token)
            .header("accept", "application/x-ndjson")
            .json(&json!({"lang": "python", "code": code}))
            .send()
            .await?;
        ensure!(response.status() == 200, "{path}: {}", response.status());
        let mut samples = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut text = String::new();
        while let Some(bytes) = response.chunk().await? {
            let arrived = now_ns();
            pending.extend_from_slice(&bytes);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line: Value = serde_json::from_slice(&line[..end])?;
                if let Some(result) = line.get("result") {
                    ensure!(result["exitCode"] == 0, "the program failed: {result}");
                    return Ok(samples);
                }
                let Some(data) = line["data"].as_str() else {
                    bail!("{path}: an unexpected line {line}");
                };
                text.push_str(data);
                while let Some(end) = text.find('\n') {
                    let whole: String = text.drain(..=end).collect();
                    samples.push(sample(&whole, arrived)?);
                }
            }
        }
        bail!("{path}: the stream ended before its result")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_the_time_from_the_line_s_clock_to_its_arrival() {
        assert_eq!(
            sample("1000000000\n", 1_002_500_000).unwrap(),
            Duration::from_micros(2500)
        );
        assert_eq!(sample("5", 4).unwrap(), Duration::ZERO, "never negative");
        assert!(sample("x", 4).is_err());
        assert!(program(3).contains("range(3)") && program(3).contains("time.sleep(0.1)"));
    }
}
