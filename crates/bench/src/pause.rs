//! Sessions that outlive their sandbox (issue 31), on the process backend: what a pause
//! and the wake after it cost a session holding 1 MiB and one holding 50 MiB of files,
//! next to a plain run in the same session while it is active; and a fork of 8, next to
//! making a new session.
//!
//! On a runner of its own (pool of [`FORK_COUNT`], so that every fork woken at once
//! meets a warm sandbox). A bash session is filled once with random bytes over
//! [`FILES`] files, then each round: `true` in the active session (the baseline),
//! `POST /sessions/{id}/pause` (its `bytes` kept), and `true` again, which wakes it (its
//! answer must say `resumed: true`). Before each timed step the pool is full and the
//! runner has had [`SETTLE`] to itself. The files' digest must be the same after the
//! last round. A fork round: `POST /sessions` (the baseline, deleted untimed), then
//! `POST /sessions/{id}/fork {count: 8}` on the 1 MiB session, then the 8 first runs sent
//! at once (each one's time, and the time to the last answer); each fork's files are
//! checked by digest, untimed, and the forks deleted.

use crate::clients::{timed, RunnerApi};
use crate::measure::{REFILL_TIMEOUT, SETTLE};
use crate::services::{Binaries, Service};
use crate::stats::{self, Latency};
use anyhow::{ensure, Context};
use sandbox_protocol::Lang;
use serde::Serialize;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// The bytes of files of each measured session: 1 MiB and 50 MiB (the home folder's
/// tmpfs holds 64 MiB by default).
pub const SESSION_BYTES: [u64; 2] = [1 << 20, 50 << 20];
/// The files a session's bytes are spread over.
pub const FILES: u64 = 8;
/// Sessions each fork makes.
pub const FORK_COUNT: usize = 8;
/// The program of every timed run: what is measured is the session's, not a program's.
const TRIVIAL: &str = "true";
/// Prints the digest of the session's files.
const DIGEST: &str = "cat data/* | md5sum";

/// How many rounds each figure takes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Measured pause-and-wake rounds per session size.
    pub rounds: usize,
    /// Unmeasured rounds before them (and before the fork rounds).
    pub warmup: usize,
    /// Measured fork rounds.
    pub fork_rounds: usize,
}

/// Everything the section measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseFigures {
    /// Measured rounds per session size.
    pub rounds: usize,
    /// Unmeasured rounds before them.
    pub warmup: usize,
    /// Sandboxes of the runner.
    pub pool_size: usize,
    /// Files each session's bytes are spread over.
    pub files: u64,
    /// One row per session size.
    pub rows: Vec<PauseRow>,
    /// The fork of [`FORK_COUNT`].
    pub fork: ForkFigures,
}

/// Pause and wake of one session, next to a plain run in it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseRow {
    /// The bytes of files the session holds.
    pub files_bytes: u64,
    /// `bytes` of the pause's answer (the largest of the rounds).
    pub stored_bytes: u64,
    /// `true` in the active session (the baseline).
    pub run: Latency,
    /// `POST /sessions/{id}/pause`, to its answer.
    pub pause: Latency,
    /// `true` in the paused session: the wake and the run.
    pub wake: Latency,
}

/// A fork of [`FORK_COUNT`] and the forks' first runs, next to a new session.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkFigures {
    /// Sessions each fork made.
    pub count: usize,
    /// The bytes of files the forked session holds.
    pub files_bytes: u64,
    /// Measured rounds.
    pub rounds: usize,
    /// `POST /sessions` on a full pool (the baseline).
    pub create: Latency,
    /// `POST /sessions/{id}/fork` with `{count}`.
    pub fork: Latency,
    /// Each fork's first run (`true`, which wakes it), all sent at once.
    pub wake: Latency,
    /// From sending the first runs at once to the last one's answer.
    pub all_woken: Latency,
}

/// A runner being measured: its API, and how long its pool may take to refill.
pub struct RunnerUnderTest<'a> {
    /// The runner's API.
    pub api: &'a RunnerApi,
    /// How long its pool may take to make its sandboxes again.
    pub refill: Duration,
}

impl RunnerUnderTest<'_> {
    /// Waits until the pool is full, then [`SETTLE`]: each timed step meets a quiet
    /// runner, as a caller does whose previous call is long done.
    async fn settle(&self) -> anyhow::Result<()> {
        self.api.wait_until_full(self.refill).await?;
        tokio::time::sleep(SETTLE).await;
        Ok(())
    }
}

/// Starts a runner of its own and measures both sizes, then the fork.
pub async fn measure(bins: &Binaries, token: &str, sizes: &Sizes) -> anyhow::Result<PauseFigures> {
    let runner = Service::runner(&bins.runner, token, FORK_COUNT).await?;
    let measured = measure_on(&runner.url, token, sizes).await;
    let stopped = runner.stop().await.context("stopping sandbox-runner");
    let figures = measured?;
    stopped?;
    Ok(figures)
}

async fn measure_on(url: &str, token: &str, sizes: &Sizes) -> anyhow::Result<PauseFigures> {
    let api = RunnerApi::new(url, token)?;
    let runner = RunnerUnderTest {
        api: &api,
        refill: REFILL_TIMEOUT,
    };
    let mut rows = Vec::new();
    for bytes in SESSION_BYTES {
        eprintln!("bench: pause and wake, {} MiB of files", bytes >> 20);
        rows.push(pause_row(&runner, bytes, sizes.warmup, sizes.rounds).await?);
    }
    eprintln!("bench: fork of {FORK_COUNT}");
    let fork = forks(&runner, SESSION_BYTES[0], sizes).await?;
    Ok(PauseFigures {
        rounds: sizes.rounds,
        warmup: sizes.warmup,
        pool_size: FORK_COUNT,
        files: FILES,
        rows,
        fork,
    })
}

/// Writes `bytes` random bytes over [`FILES`] files in `~/data`, then prints their
/// digest.
fn fill_code(bytes: u64) -> String {
    let each = bytes / FILES;
    format!(
        "mkdir -p data && for i in $(seq {FILES}); do head -c {each} /dev/urandom > data/f$i; \
         done && {DIGEST}"
    )
}

/// Fills a new session with `bytes` of files, and measures `warmup + rounds` rounds of a
/// run, a pause and a wake in it; the session is deleted after.
pub async fn pause_row(
    runner: &RunnerUnderTest<'_>,
    bytes: u64,
    warmup: usize,
    rounds: usize,
) -> anyhow::Result<PauseRow> {
    let api = runner.api;
    api.in_session(|id| async move {
        let digest = api.session_run(&id, &Lang::BASH, &fill_code(bytes)).await?;
        let (mut run, mut pause, mut wake) = (Vec::new(), Vec::new(), Vec::new());
        let mut stored_bytes = 0;
        for round in 0..warmup + rounds {
            let measured = pause_round(runner, &id).await?;
            stored_bytes = stored_bytes.max(measured.stored_bytes);
            if round >= warmup {
                run.push(measured.run);
                pause.push(measured.pause);
                wake.push(measured.wake);
            }
        }
        ensure!(
            stored_bytes >= bytes,
            "a pause stored {stored_bytes} bytes of a session holding {bytes}"
        );
        let after = api.session_run(&id, &Lang::BASH, DIGEST).await?;
        ensure!(
            after.stdout == digest.stdout,
            "the files changed across pauses: {:?}, then {:?}",
            digest.stdout,
            after.stdout
        );
        Ok(PauseRow {
            files_bytes: bytes,
            stored_bytes,
            run: summary(&run)?,
            pause: summary(&pause)?,
            wake: summary(&wake)?,
        })
    })
    .await
}

/// One round's times.
struct PauseRound {
    run: Duration,
    pause: Duration,
    stored_bytes: u64,
    wake: Duration,
}

/// A run in the active session, a pause, and the run that wakes it.
async fn pause_round(runner: &RunnerUnderTest<'_>, id: &str) -> anyhow::Result<PauseRound> {
    let api = runner.api;
    runner.settle().await?;
    let run = timed(async { api.session_run(id, &Lang::BASH, TRIVIAL).await.map(drop) }).await?;
    runner.settle().await?;
    let begun = Instant::now();
    let paused = api.pause_session(id).await?;
    let pause = begun.elapsed();
    runner.settle().await?;
    let wake = timed(async { api.session_wake(id, &Lang::BASH, TRIVIAL).await.map(drop) }).await?;
    Ok(PauseRound {
        run,
        pause,
        stored_bytes: paused.bytes,
        wake,
    })
}

/// Fills a new session with `bytes` of files, and measures the fork rounds in it.
async fn forks(
    runner: &RunnerUnderTest<'_>,
    bytes: u64,
    sizes: &Sizes,
) -> anyhow::Result<ForkFigures> {
    let api = runner.api;
    let sizes = *sizes;
    api.in_session(|id| async move {
        let digest = api.session_run(&id, &Lang::BASH, &fill_code(bytes)).await?;
        let (mut create, mut fork, mut wake, mut all_woken) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..sizes.warmup + sizes.fork_rounds {
            runner.settle().await?;
            let begun = Instant::now();
            let new = api.create_session().await?;
            let created = begun.elapsed();
            api.delete_session(&new).await?;
            runner.settle().await?;
            let begun = Instant::now();
            let ids = api.fork_session(&id, FORK_COUNT as u64).await?;
            let forked = begun.elapsed();
            let (each, all) = wake_forks(runner, &ids, &digest.stdout).await?;
            if round >= sizes.warmup {
                create.push(created);
                fork.push(forked);
                wake.extend(each);
                all_woken.push(all);
            }
        }
        Ok(ForkFigures {
            count: FORK_COUNT,
            files_bytes: bytes,
            rounds: sizes.fork_rounds,
            create: summary(&create)?,
            fork: summary(&fork)?,
            wake: summary(&wake)?,
            all_woken: summary(&all_woken)?,
        })
    })
    .await
}

/// Wakes the forks `ids` at once (see [`wake_at_once`]), then deletes every one of them
/// whatever happened (the first error wins).
async fn wake_forks(
    runner: &RunnerUnderTest<'_>,
    ids: &[String],
    digest: &str,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let woken = wake_at_once(runner, ids, digest).await;
    let mut deleted = Ok(());
    for id in ids {
        let result = runner.api.delete_session(id).await;
        if deleted.is_ok() {
            deleted = result;
        }
    }
    let woken = woken?;
    deleted?;
    Ok(woken)
}

/// Sends every fork's first run at once: each one's time and the time to the last
/// answer; then checks each fork's files against `digest`, untimed.
async fn wake_at_once(
    runner: &RunnerUnderTest<'_>,
    ids: &[String],
    digest: &str,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    runner.settle().await?;
    let begun = Instant::now();
    let mut wakes = JoinSet::new();
    for id in ids {
        let (api, id) = (runner.api.clone(), id.clone());
        wakes.spawn(async move {
            timed(async { api.session_wake(&id, &Lang::BASH, TRIVIAL).await.map(drop) }).await
        });
    }
    let mut each = Vec::with_capacity(ids.len());
    while let Some(joined) = wakes.join_next().await {
        each.push(joined.context("a fork's wake")??);
    }
    let all = begun.elapsed();
    for id in ids {
        let files = runner.api.session_run(id, &Lang::BASH, DIGEST).await?;
        ensure!(
            files.stdout == digest,
            "fork {id} holds other files: {:?}, not {digest:?}",
            files.stdout
        );
    }
    Ok((each, all))
}

/// The latency of a series that must not be empty.
fn summary(samples: &[Duration]) -> anyhow::Result<Latency> {
    stats::latency(samples).context("no round was measured")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_add_up_to_the_session_s_bytes() {
        let code = fill_code(1 << 20);
        assert!(
            code.contains("seq 8") && code.contains("head -c 131072"),
            "{code}"
        );
        assert!(code.ends_with(DIGEST), "{code}");
        assert!(SESSION_BYTES.iter().all(|b| b % FILES == 0));
    }
}
