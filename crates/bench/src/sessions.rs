//! Sessions (issue 12), against the runner the rest of the bench measures: what making
//! one costs on a warm pool, a run in a warm session next to a one-shot `POST /run` of
//! the same code, the memory of a resting session next to a warm sandbox, and what
//! stopping and waking a session's processes between its runs costs (and that a
//! resting session's processes get no CPU).

use crate::cases::{Case, CASES, EXPECTED_STDOUT};
use crate::clients::{timed, RunnerApi};
use crate::measure::{REFILL_TIMEOUT, SETTLE};
use crate::memory::{self, SandboxMemory};
use crate::procfs::{self, TICKS_PER_SECOND};
use crate::stats::{self, Latency};
use anyhow::{ensure, Context};
use sandbox_protocol::Lang;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Background processes of the crowded session in the stop/wake figure.
pub const BACKGROUND: usize = 20;
/// The program run in both sessions of the stop/wake figure.
const STOP_WAKE_CODE: &str = "echo 1";
/// What the resting python session has run before it is measured.
const IDLE_CODE: &str = "x = 41";
/// The busy loop left in the background of a session.
const BUSY_LOOP: [&str; 3] = ["bash", "-c", "while :; do :; done"];
/// How long the pool is left alone before sandboxes are measured (as for the warm pool).
const MEMORY_SETTLE: Duration = Duration::from_millis(500);
/// How long a session may take to stop its processes once a run has answered.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between two runs of the stop/wake figure, so that each run meets a
/// session that is resting (its processes stopped).
const BETWEEN_RUNS: Duration = Duration::from_millis(10);

/// How many runs each figure takes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Unmeasured rounds first.
    pub warmup: usize,
    /// Measured rounds.
    pub iterations: usize,
    /// How long the busy loop's session rests while its CPU time is watched.
    pub rest: Duration,
}

/// Everything measured about sessions.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionFigures {
    /// `POST /sessions` alone, on a full pool (the session is deleted after, untimed).
    pub create: Latency,
    /// A run in a warm session next to a one-shot `POST /run`, per language.
    pub runs: Vec<SessionRun>,
    /// A python session resting after a run, next to the warm python sandboxes.
    pub idle: IdleSession,
    /// The same run in a session with background processes and in one without.
    pub stop_wake: StopWake,
    /// A busy loop in the background of a session, resting and running.
    pub busy_loop: BusyLoop,
    /// What a session's process costs in memory (issue 30).
    pub processes: crate::processes::ProcessMemory,
}

/// One language's run in a warm session next to a one-shot run of the same code.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRun {
    /// The language.
    pub lang: Lang,
    /// The program (the one-liner of the sequential figures).
    pub code: &'static str,
    /// `POST /sessions/{id}/run` in a session whose interpreter has already run once.
    pub session: Latency,
    /// `POST /run`, measured in the same rounds.
    pub one_shot: Latency,
}

/// The memory of a resting session and of the warm sandboxes beside it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IdleSession {
    /// What the session ran before it was measured.
    pub code: &'static str,
    /// The session's sandbox (jail, agent, its resident interpreter, stopped).
    pub session: SandboxMemory,
    /// The warm python sandboxes of the pool at the same moment (never used).
    pub warm: Vec<SandboxMemory>,
}

/// What stopping and waking a session's processes costs a run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StopWake {
    /// `sleep 1000 &` processes held by the crowded session.
    pub background: usize,
    /// The bash program run in both sessions.
    pub code: &'static str,
    /// Runs in the session holding the background processes.
    pub crowded: Latency,
    /// Runs in the session holding none, interleaved with the others.
    pub empty: Latency,
    /// The difference of the p50s: stopping and waking `background` processes.
    pub cost_ms: f64,
}

/// A busy loop left in the background of a session.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BusyLoop {
    /// How long it was watched, resting and then running, in milliseconds.
    pub watched_ms: f64,
    /// CPU ticks (utime + stime) while its session rested: 0 when it is stopped.
    pub resting_ticks: u64,
    /// CPU ticks during a run of `sleep` as long as the rest (the control: it runs).
    pub running_ticks: u64,
    /// Ticks per second (`USER_HZ`).
    pub ticks_per_second: u64,
}

/// Measures every session figure, one after the other.
pub async fn measure(
    api: &RunnerApi,
    runner_pid: u32,
    sizes: &Sizes,
) -> anyhow::Result<SessionFigures> {
    eprintln!("bench: sessions, create");
    let create = create(api, sizes).await?;
    let mut runs = Vec::with_capacity(CASES.len());
    for case in &CASES {
        eprintln!("bench: sessions, {} run vs one-shot", case.lang.as_str());
        runs.push(run_vs_one_shot(api, case, sizes).await?);
    }
    eprintln!("bench: sessions, memory of a resting python session");
    let idle = idle_memory(api, runner_pid).await?;
    eprintln!("bench: sessions, stop and wake of {BACKGROUND} background processes");
    let stop_wake = stop_wake(api, sizes).await?;
    eprintln!("bench: sessions, a busy loop in a resting session");
    let busy_loop = busy_loop(api, runner_pid, sizes.rest).await?;
    eprintln!("bench: sessions, memory per process");
    quiet(api).await?;
    let processes = crate::processes::measure(api, runner_pid).await?;
    Ok(SessionFigures {
        create,
        runs,
        idle,
        stop_wake,
        busy_loop,
        processes,
    })
}

/// Waits until the pool is full and the host has settled, as the sequential figures do.
async fn quiet(api: &RunnerApi) -> anyhow::Result<()> {
    api.wait_until_full(REFILL_TIMEOUT).await?;
    tokio::time::sleep(SETTLE).await;
    Ok(())
}

/// `POST /sessions` on a full pool (the warm path), the session deleted after.
async fn create(api: &RunnerApi, sizes: &Sizes) -> anyhow::Result<Latency> {
    let mut samples = Vec::with_capacity(sizes.iterations);
    for round in 0..sizes.warmup + sizes.iterations {
        quiet(api).await?;
        let begun = Instant::now();
        let id = api.create_session().await?;
        let took = begun.elapsed();
        api.delete_session(&id).await?;
        if round >= sizes.warmup {
            samples.push(took);
        }
    }
    stats::latency(&samples).context("no session was made")
}

/// Rounds of a run in one warm session and a one-shot run of the same code, each on a
/// quiet runner. The session's first run (which starts its interpreter) is not counted.
async fn run_vs_one_shot(
    api: &RunnerApi,
    case: &Case,
    sizes: &Sizes,
) -> anyhow::Result<SessionRun> {
    api.in_session(|id| async move {
        api.session_expect(&id, &case.lang, case.code, EXPECTED_STDOUT)
            .await
            .context("the session's first run")?;
        let mut session = Vec::with_capacity(sizes.iterations);
        let mut one_shot = Vec::with_capacity(sizes.iterations);
        for round in 0..sizes.warmup + sizes.iterations {
            quiet(api).await?;
            let in_session =
                timed(api.session_expect(&id, &case.lang, case.code, EXPECTED_STDOUT)).await?;
            quiet(api).await?;
            let alone = timed(api.run(case)).await?;
            if round >= sizes.warmup {
                session.push(in_session);
                one_shot.push(alone);
            }
        }
        Ok(SessionRun {
            lang: case.lang.clone(),
            code: case.code,
            session: stats::latency(&session).context("no session run was measured")?,
            one_shot: stats::latency(&one_shot).context("no one-shot run was measured")?,
        })
    })
    .await
}

/// A python session that has run [`IDLE_CODE`], resting, next to the pool's warm python
/// sandboxes. The session's sandbox is told from the warm ones by its frozen cgroup:
/// between calls the cgroup freezer holds it, while a warm sandbox's processes only
/// sleep.
async fn idle_memory(api: &RunnerApi, runner_pid: u32) -> anyhow::Result<IdleSession> {
    quiet(api).await?;
    api.in_session(|id| async move {
        api.session_expect(&id, &Lang::PYTHON, IDLE_CODE, "")
            .await?;
        // A one-shot python run, so that the sandbox made in its place is prepared
        // for python whatever the pool's mix was.
        let python = CASES.iter().find(|c| c.lang == Lang::PYTHON);
        api.run(python.context("no python case")?).await?;
        api.wait_until_full(REFILL_TIMEOUT).await?;
        tokio::time::sleep(MEMORY_SETTLE).await;
        let cgroups = memory::sandbox_cgroups(runner_pid)?;
        let resting = procfs::resting_cgroup(&cgroups, STOP_TIMEOUT).await?;
        let session = memory::sandbox(&resting)?;
        let mut warm = Vec::new();
        for cgroup in cgroups.iter().filter(|c| **c != resting) {
            warm.push(memory::sandbox(cgroup)?);
        }
        warm.retain(|s| s.kind == "python");
        ensure!(!warm.is_empty(), "the pool holds no warm python sandbox");
        // The interpreter kept its state while it was frozen.
        api.session_expect(&id, &Lang::PYTHON, "print(x + 1)", "42\n")
            .await?;
        Ok(IdleSession {
            code: IDLE_CODE,
            session,
            warm,
        })
    })
    .await
}

/// The same run, interleaved, in a session holding [`BACKGROUND`] sleeping processes
/// and in one holding none: the difference is thawing and freezing those processes.
async fn stop_wake(api: &RunnerApi, sizes: &Sizes) -> anyhow::Result<StopWake> {
    quiet(api).await?;
    api.in_session(|crowded| async move {
        let sleepers =
            format!("for i in $(seq {BACKGROUND}); do sleep 1000 >/dev/null 2>&1 & done; echo 1");
        api.session_expect(&crowded, &Lang::BASH, &sleepers, "1\n")
            .await?;
        api.in_session(|empty| async move {
            api.session_expect(&empty, &Lang::BASH, STOP_WAKE_CODE, "1\n")
                .await?;
            let (with, without) = interleaved(api, [&crowded, &empty], sizes).await?;
            let crowded = stats::latency(&with).context("no run was measured")?;
            let empty = stats::latency(&without).context("no run was measured")?;
            Ok(StopWake {
                background: BACKGROUND,
                code: STOP_WAKE_CODE,
                cost_ms: crowded.p50_ms - empty.p50_ms,
                crowded,
                empty,
            })
        })
        .await
    })
    .await
}

/// Runs [`STOP_WAKE_CODE`] in both sessions by turns (which goes first alternates);
/// each one's run times.
async fn interleaved(
    api: &RunnerApi,
    sessions: [&str; 2],
    sizes: &Sizes,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let mut times = [Vec::new(), Vec::new()];
    for round in 0..sizes.warmup + sizes.iterations {
        for turn in 0..2 {
            let which = (round + turn) % 2;
            tokio::time::sleep(BETWEEN_RUNS).await;
            let took =
                timed(api.session_expect(sessions[which], &Lang::BASH, STOP_WAKE_CODE, "1\n"))
                    .await?;
            if round >= sizes.warmup {
                times[which].push(took);
            }
        }
    }
    let [with, without] = times;
    Ok((with, without))
}

/// A busy loop in the background of a session: its CPU ticks while the session rests
/// for `rest`, then during a run of `sleep` as long.
async fn busy_loop(api: &RunnerApi, runner_pid: u32, rest: Duration) -> anyhow::Result<BusyLoop> {
    quiet(api).await?;
    api.in_session(|id| async move {
        // The run ends (and the session is frozen) only once the loop has exec'd, so
        // that its command line is the loop's when it is looked for.
        let start = format!(
            "{} '{}' >/dev/null 2>&1 & pid=$!; \
             until grep -qs '{}' /proc/$pid/cmdline; do :; done; echo $pid",
            BUSY_LOOP[0..2].join(" "),
            BUSY_LOOP[2],
            BUSY_LOOP[2]
        );
        let answer = api.session_run(&id, &Lang::BASH, &start).await?;
        let inner: u32 = answer
            .stdout
            .trim()
            .parse()
            .with_context(|| format!("the busy loop's pid: {:?}", answer.stdout))?;
        let (pid, cgroup) = find_busy_loop(runner_pid, inner)?;
        procfs::wait_resting(&cgroup, STOP_TIMEOUT).await?;
        let before = procfs::stat(pid)?;
        tokio::time::sleep(rest).await;
        let rested = procfs::stat(pid)?;
        ensure!(
            procfs::rests(&cgroup)?,
            "the busy loop's session woke while it rested"
        );
        let sleep = format!("sleep {}; echo 1", rest.as_secs_f64());
        api.session_expect(&id, &Lang::BASH, &sleep, "1\n").await?;
        let ran = procfs::stat(pid)?;
        Ok(BusyLoop {
            watched_ms: rest.as_secs_f64() * 1e3,
            resting_ticks: rested.cpu_ticks.saturating_sub(before.cpu_ticks),
            running_ticks: ran.cpu_ticks.saturating_sub(rested.cpu_ticks),
            ticks_per_second: TICKS_PER_SECOND,
        })
    })
    .await
}

/// The host pid of the busy loop whose pid in its sandbox is `inner`, and its sandbox's
/// memory cgroup.
fn find_busy_loop(runner_pid: u32, inner: u32) -> anyhow::Result<(u32, PathBuf)> {
    for cgroup in memory::sandbox_cgroups(runner_pid)? {
        for pid in procfs::procs(&cgroup)? {
            if procfs::cmdline(pid) == BUSY_LOOP && procfs::inner_pid(pid).ok() == Some(inner) {
                return Ok((pid, cgroup));
            }
        }
    }
    anyhow::bail!("no busy loop with pid {inner} in its sandbox was found")
}
