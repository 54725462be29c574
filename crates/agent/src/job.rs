//! Running one job: write the code, start the interpreter, watch it, collect the outcome.

use crate::capture::Capture;
use crate::identity::write_as_program_user;
use crate::launch::{self, Prepared};
use crate::outputs::{self, Seen};
use crate::resident::{pidfd_open, Resident};
use crate::tree::{end_tree, exit_code};
use crate::watch::{End, Watch};
use crate::HOME;
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use sandbox_protocol::agent::{Job, JobOutcome};
use sandbox_protocol::Lang;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
                launch::prepare(lang, &[])?
            }
            None => launch::prepare(lang, &[])?,
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
        Some(p) if p.lang() == job.lang => p.start(file, &job.python_paths),
        Some(p) => {
            p.discard();
            launch::cold(job.lang, file, job.session, &job.python_paths)
        }
        None => launch::cold(job.lang, file, job.session, &job.python_paths),
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
    if resident.request(&path, &job.python_paths).is_err() {
        // It died between the check and the request: start another, once.
        lost = true;
        resident = kept
            .resident(job.lang, &mut lost)
            .map_err(|source| JobError::Spawn { program, source })?;
        resident
            .request(&path, &job.python_paths)
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
