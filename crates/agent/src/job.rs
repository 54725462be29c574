//! Running one job: write the code, start the interpreter, watch it, collect the outcome.

use crate::capture::Capture;
use crate::identity::write_as_program_user;
use crate::launch::{self, Prepared};
use crate::outputs::{self, Seen};
use crate::resident::{pidfd_open, Resident};
use crate::sink;
use crate::tree::{end_tree, exit_code, kill_all, reap_exited};
use crate::HOME;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use sandbox_protocol::agent::{Job, JobOutcome};
use sandbox_protocol::Lang;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, ChildStdout};
use std::time::{Duration, Instant};

/// How often orphans are reaped while the program runs (they count against the pids cap).
const REAP_TICK: Duration = Duration::from_millis(100);
/// How long output still in the pipes is read after the tree is gone.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// Why a job could not be run.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The code file could not be written.
    #[error("writing the program to {path}: {source}")]
    WriteCode {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// The interpreter could not be started.
    #[error("starting {program}: {source}")]
    Spawn {
        /// The program concerned.
        program: &'static str,
        /// What failed underneath.
        source: io::Error,
    },
    /// Watching the program failed.
    #[error("watching the program: {0}")]
    Watch(io::Error),
}

/// What the agent keeps between the jobs of its sandbox: the interpreter started ahead
/// of the first job, a session's resident interpreters, and the output files already
/// handed back.
#[derive(Default)]
pub struct Kept {
    prepared: Option<Prepared>,
    residents: Vec<Resident>,
    seen: Seen,
}

impl Kept {
    /// Keeps an interpreter started ahead of the first job.
    pub fn prepared(&mut self, prepared: Option<Prepared>) {
        self.prepared = prepared;
    }

    /// The resident interpreter of `lang`, started now when there is none (or it died,
    /// which `lost` then says).
    fn resident(&mut self, lang: Lang, lost: &mut bool) -> io::Result<Resident> {
        if let Some(i) = self.residents.iter().position(|r| r.lang() == lang) {
            let resident = self.residents.swap_remove(i);
            if resident.alive() {
                return Ok(resident);
            }
            *lost = true;
        }
        let prepared = match self.prepared.take() {
            Some(p) if p.lang() == lang => Some(p),
            Some(p) => {
                p.discard();
                launch::prepare(lang)?
            }
            None => launch::prepare(lang)?,
        };
        let prepared = prepared.ok_or_else(|| io::Error::other("no loader for this language"))?;
        Resident::new(prepared)
    }
}

/// Runs `job` to its end and reports what happened: in the interpreter started ahead
/// when it is of the job's language; a session's Python and Node programs in the
/// session's resident interpreter of that language.
pub fn run_job(job: &Job, kept: &mut Kept) -> Result<JobOutcome, JobError> {
    let file = write_code(job)?;
    outputs::make_folder();
    let mut outcome = if job.session && job.lang != Lang::Bash {
        run_resident(job, &file, kept)?
    } else {
        run_spawned(job, &file, kept.prepared.take())?
    };
    if let Some(caps) = job.outputs {
        (outcome.outputs, outcome.outputs_truncated) = outputs::collect(caps, &mut kept.seen);
    }
    Ok(outcome)
}

/// Runs the program in a process of its own.
fn run_spawned(job: &Job, file: &Path, prepared: Option<Prepared>) -> Result<JobOutcome, JobError> {
    let program = interpreter_name(job.lang);
    let spawned = match prepared {
        Some(p) if p.lang() == job.lang => p.start(file),
        Some(p) => {
            p.discard();
            launch::cold(job.lang, file, job.session)
        }
        None => launch::cold(job.lang, file, job.session),
    };
    let mut child = spawned.map_err(|source| JobError::Spawn { program, source })?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
        unreachable!("both streams are piped in spawn()");
    };
    let exited = pidfd_open(&child).map_err(JobError::Watch)?;
    let mut watch = Watch {
        program: Pid::from_raw(child.id() as i32),
        exited,
        stdout: Capture::new(stdout, job.stdout_cap),
        stderr: Capture::new(stderr, job.stderr_cap),
        status: None,
    };
    let started = Instant::now();
    let end = watch.until_end(started + Duration::from_millis(job.timeout_ms), None)?;
    let duration_ms = started.elapsed().as_millis() as u64;
    let timed_out = end == End::TimedOut;
    let status = if job.session && !watch.ended_whole(timed_out) {
        // A session keeps what the program left running: what the program wrote is in
        // the pipes; what its background processes write later is discarded.
        watch.drain_written()?;
        watch.sink();
        watch.status
    } else {
        let status = end_tree(watch.program).or(watch.status);
        watch.drain(Instant::now() + DRAIN_LIMIT)?;
        status
    };
    let (exit_code, signal) = exit_code(status.unwrap_or(WaitStatus::StillAlive));
    Ok(watch.outcome(exit_code, signal, duration_ms, timed_out, false))
}

/// Runs a session's program in the resident interpreter of its language.
fn run_resident(job: &Job, file: &Path, kept: &mut Kept) -> Result<JobOutcome, JobError> {
    let program = interpreter_name(job.lang);
    let mut lost = false;
    let mut resident = kept
        .resident(job.lang, &mut lost)
        .map_err(|source| JobError::Spawn { program, source })?;
    let path = file.to_string_lossy();
    if resident.request(&path).is_err() {
        // It died between the check and the request: start another, once.
        lost = true;
        resident = kept
            .resident(job.lang, &mut lost)
            .map_err(|source| JobError::Spawn { program, source })?;
        resident
            .request(&path)
            .map_err(|source| JobError::Spawn { program, source })?;
    }
    let (Some(stdout), Some(stderr)) = (resident.stdout.take(), resident.stderr.take()) else {
        // A resident hands its pipes back after every run it survives.
        unreachable!("a resident interpreter keeps both pipes between runs");
    };
    let mut watch = Watch {
        program: resident.pid(),
        exited: resident
            .exited()
            .try_clone_to_owned()
            .map_err(JobError::Watch)?,
        stdout: Capture::new(stdout, job.stdout_cap),
        stderr: Capture::new(stderr, job.stderr_cap),
        status: None,
    };
    let started = Instant::now();
    let deadline = started + Duration::from_millis(job.timeout_ms);
    let end = watch.until_end(deadline, Some(&mut resident))?;
    let duration_ms = started.elapsed().as_millis() as u64;
    let timed_out = end == End::TimedOut;
    match end {
        End::Reported(code) if !watch.ended_whole(false) => {
            watch.drain_written()?;
            let (stdout, stderr) = (watch.stdout.take_pipe(), watch.stderr.take_pipe());
            let outcome = watch.outcome(code, None, duration_ms, false, lost);
            resident.stdout = stdout;
            resident.stderr = stderr;
            kept.residents.push(resident);
            Ok(outcome)
        }
        End::Exited if !watch.ended_whole(false) => {
            // The interpreter ended by itself (or the kernel ended it): what it left
            // running stays, as after any session run.
            watch.drain_written()?;
            watch.sink();
            let status = watch.status.unwrap_or(WaitStatus::StillAlive);
            let (exit_code, signal) = exit_code(status);
            Ok(watch.outcome(exit_code, signal, duration_ms, false, true))
        }
        _ => {
            // A timeout or an output cap: the whole sandbox's processes end, every
            // resident interpreter with them, as a one-shot run's would.
            let status = end_tree(watch.program).or(watch.status);
            watch.drain(Instant::now() + DRAIN_LIMIT)?;
            kept.residents.clear();
            let (exit_code, signal) = match (end, status) {
                (End::Reported(code), _) => (code, None),
                (_, status) => exit_code(status.unwrap_or(WaitStatus::StillAlive)),
            };
            Ok(watch.outcome(exit_code, signal, duration_ms, timed_out, true))
        }
    }
}

/// The program's file name for a language.
fn file_name(lang: Lang) -> &'static str {
    match lang {
        Lang::Bash => "main.sh",
        Lang::Python => "main.py",
        Lang::Node => "main.js",
    }
}

fn interpreter_name(lang: Lang) -> &'static str {
    match lang {
        Lang::Bash => "bash",
        Lang::Python => "python3",
        Lang::Node => "node",
    }
}

fn write_code(job: &Job) -> Result<PathBuf, JobError> {
    let path = PathBuf::from(HOME).join(file_name(job.lang));
    write_as_program_user(&path, job.code.as_bytes()).map_err(|source| JobError::WriteCode {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// The running program and its captured streams.
struct Watch {
    program: Pid,
    exited: OwnedFd,
    stdout: Capture<ChildStdout>,
    stderr: Capture<ChildStderr>,
    status: Option<WaitStatus>,
}

/// How a program's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Its process exited (its status is in [`Watch::status`]).
    Exited,
    /// The deadline passed; every process of the sandbox was killed.
    TimedOut,
    /// A resident interpreter reported the program's end, with this exit code.
    Reported(i32),
}

/// Which of the watched descriptors poll found ready.
struct Ready {
    stdout: bool,
    stderr: bool,
    report: bool,
}

impl Watch {
    /// Reads output until the program ends (its process exits, or the resident
    /// interpreter running it reports) or the deadline passes. A stream going over its
    /// cap kills the tree, which then ends the program.
    fn until_end(
        &mut self,
        deadline: Instant,
        mut resident: Option<&mut Resident>,
    ) -> Result<End, JobError> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let now = Instant::now();
            if now >= deadline {
                kill_all(self.program);
                return Ok(End::TimedOut);
            }
            let wait = (deadline - now).min(REAP_TICK);
            let done = resident.as_deref().map(|r| r.done());
            let ready = self.poll(Some(wait), true, done)?;
            self.read_ready(&ready, &mut buf)?;
            if let Some(resident) = resident.as_deref_mut().filter(|_| ready.report) {
                if let Some(code) = resident.read_report().map_err(JobError::Watch)? {
                    return Ok(End::Reported(code));
                }
            }
            if let Some(status) = reap_exited(self.program).program {
                self.status = Some(status);
                return Ok(End::Exited);
            }
        }
    }

    /// Whether the run ended the whole tree: a timeout or an output cap.
    fn ended_whole(&self, timed_out: bool) -> bool {
        timed_out || self.stdout.truncated() || self.stderr.truncated()
    }

    /// Reads what is left in the pipes once no writer remains, within `limit`.
    fn drain(&mut self, limit: Instant) -> Result<(), JobError> {
        let mut buf = vec![0u8; 64 * 1024];
        while self.stdout.pipe().is_some() || self.stderr.pipe().is_some() {
            let now = Instant::now();
            if now >= limit {
                break;
            }
            let ready = self.poll(Some(limit - now), false, None)?;
            self.read_ready(&ready, &mut buf)?;
        }
        Ok(())
    }

    /// Reads what is in the pipes now, without waiting for their end (background
    /// processes of a session, or a resident interpreter, hold them open).
    fn drain_written(&mut self) -> Result<(), JobError> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let ready = self.poll(Some(Duration::ZERO), false, None)?;
            if !ready.stdout && !ready.stderr {
                return Ok(());
            }
            self.read_ready(&ready, &mut buf)?;
        }
    }

    /// Hands the pipes still open to the [`sink`](crate::sink): what background
    /// processes write to them later is discarded.
    fn sink(&mut self) {
        if let Some(pipe) = self.stdout.take_pipe() {
            sink::discard(pipe.into());
        }
        if let Some(pipe) = self.stderr.take_pipe() {
            sink::discard(pipe.into());
        }
    }

    /// The agent's report of the run.
    fn outcome(
        self,
        exit_code: i32,
        signal: Option<i32>,
        duration_ms: u64,
        timed_out: bool,
        state_lost: bool,
    ) -> JobOutcome {
        JobOutcome {
            stdout_truncated: self.stdout.truncated(),
            stderr_truncated: self.stderr.truncated(),
            stdout: self.stdout.into_text(),
            stderr: self.stderr.into_text(),
            exit_code,
            signal,
            duration_ms,
            timed_out,
            oom_killed: None,
            outputs: Vec::new(),
            outputs_truncated: false,
            state_lost,
        }
    }

    fn read_ready(&mut self, ready: &Ready, buf: &mut [u8]) -> Result<(), JobError> {
        let mut over_cap = false;
        if ready.stdout {
            over_cap |= self.stdout.read_some(buf).map_err(JobError::Watch)?;
        }
        if ready.stderr {
            over_cap |= self.stderr.read_some(buf).map_err(JobError::Watch)?;
        }
        if over_cap {
            kill_all(self.program);
        }
        Ok(())
    }

    fn poll(
        &self,
        wait: Option<Duration>,
        with_exit: bool,
        report: Option<BorrowedFd<'_>>,
    ) -> Result<Ready, JobError> {
        let flags = PollFlags::POLLIN;
        let mut fds = Vec::with_capacity(4);
        let mut slots = [None, None, None];
        if let Some(p) = self.stdout.pipe() {
            slots[0] = Some(fds.len());
            fds.push(PollFd::new(p.as_fd(), flags));
        }
        if let Some(p) = self.stderr.pipe() {
            slots[1] = Some(fds.len());
            fds.push(PollFd::new(p.as_fd(), flags));
        }
        if let Some(fd) = report {
            slots[2] = Some(fds.len());
            fds.push(PollFd::new(fd, flags));
        }
        if with_exit {
            fds.push(PollFd::new(self.exited.as_fd(), flags));
        }
        let timeout = match wait {
            Some(Duration::ZERO) => PollTimeout::ZERO,
            Some(d) => {
                PollTimeout::try_from(d.as_millis().max(1) as i32).unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(JobError::Watch(e.into())),
        }
        let is_ready = |slot: Option<usize>| {
            slot.and_then(|i| fds[i].revents())
                .is_some_and(|r| !r.is_empty())
        };
        Ok(Ready {
            stdout: is_ready(slots[0]),
            stderr: is_ready(slots[1]),
            report: is_ready(slots[2]),
        })
    }
}
