//! Running one job: write the code, start the interpreter, watch it (its output handed
//! to a [`LiveOutput`] as it is read), collect the outcome.

use super::capture::Capture;
use super::home;
use super::identity::write_as_program_user;
use super::launch::{self, Prepared};
use super::live::LiveOutput;
use super::outputs::{self, Seen};
use super::process::Process;
use super::resident::Resident;
use super::tools::{Modules, Relay};
use super::tree::{end_tree, exit_code, reap_exited};
use super::watch::{CompileReport, Compiled, End, Watch};
use nix::unistd::Pid;
use sandbox_jail::layout::HOME;
use sandbox_protocol::agent::{Job, JobOutcome};
use std::borrow::Cow;
use std::io;
use std::os::fd::AsFd;
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
    /// The interpreter, compiler or loader could not be started.
    #[error("starting {program}: {source}")]
    Spawn {
        /// The program concerned.
        program: String,
        /// What failed underneath.
        source: io::Error,
    },
    /// Watching the program failed.
    #[error("watching the program: {0}")]
    Watch(io::Error),
    /// The `tools` modules could not be written, or the socket made.
    #[error("offering the tools to the program: {0}")]
    Tools(io::Error),
}

/// What the agent keeps between the jobs of its sandbox: the loader started ahead of
/// the first job, a session's resident interpreters, the output files already handed
/// back, and the `tools` modules as last written.
#[derive(Default)]
pub struct Kept {
    prepared: Option<Prepared>,
    residents: Vec<Resident>,
    seen: Seen,
    tools: Modules,
}

impl Kept {
    /// Keeps a loader started ahead of the first job.
    pub fn prepared(&mut self, prepared: Option<Prepared>) {
        self.prepared = prepared;
    }

    /// The loader kept for `job`'s language, if one is (one of another language ends).
    fn prepared_for(&mut self, job: &Job) -> Option<Prepared> {
        match self.prepared.take() {
            Some(p) if p.lang() == &job.lang => Some(p),
            Some(p) => {
                p.discard();
                None
            }
            None => None,
        }
    }

    /// The resident interpreter of `job`'s language, started now when there is none
    /// (or it died, which `lost` then says).
    fn resident(&mut self, job: &Job, lost: &mut bool) -> io::Result<Resident> {
        if let Some(i) = self.residents.iter().position(|r| r.lang() == &job.lang) {
            let resident = self.residents.swap_remove(i);
            if resident.alive() {
                return Ok(resident);
            }
            *lost = true;
        }
        let prepared = match self.prepared_for(job) {
            Some(p) => Some(p),
            None => launch::prepare(&job.lang, &job.recipe, &[])?,
        };
        let prepared = prepared.ok_or_else(|| io::Error::other("no loader for this language"))?;
        Resident::new(prepared)
    }
}

/// Runs `job` to its end and reports what happened: in the loader started ahead when it
/// is of the job's language; a session's programs in the session's resident interpreter
/// of their language when it has one (Python, Node, TypeScript, Ruby, Lua, Perl). What the program (and
/// its compile step) writes goes to `live` as it is read, within the job's caps, and so
/// do the calls of a program whose (streamed) job offers tools, whose modules are
/// written first (a job without tools removes them).
pub fn run_job(
    job: &Job,
    kept: &mut Kept,
    live: &mut dyn LiveOutput,
) -> Result<JobOutcome, JobError> {
    let offer = job.tools.as_ref().filter(|_| job.stream);
    kept.tools.write(offer).map_err(JobError::Tools)?;
    let calls = offer
        .map(|offer| kept.tools.relay(offer))
        .transpose()
        .map_err(JobError::Tools)?;
    let job = &with_tools_path(job, calls.is_some().then_some(&kept.tools));
    let file = write_code(job)?;
    // Where the home folder cannot be opened (a program that took its own rights away),
    // there is no outputs folder to make, and no output to collect.
    let home = home::open().ok();
    if let Some(home) = &home {
        outputs::make_folder(home.as_fd());
    }
    let resident = job
        .recipe
        .loader
        .as_ref()
        .is_some_and(|l| l.kind.resident());
    let mut outcome = if job.session && resident {
        run_resident(job, &file, kept, calls, live)?
    } else {
        let prepared = kept.prepared_for(job);
        run_spawned(job, &file, prepared, calls, live)?
    };
    if let (Some(caps), Some(home)) = (job.outputs, &home) {
        (outcome.outputs, outcome.outputs_truncated) =
            outputs::collect(home.as_fd(), caps, &mut kept.seen);
    }
    Ok(outcome)
}

/// `job`, with the folder of Python's `tools` module on its import path where it offers
/// tools (`modules`).
fn with_tools_path<'a>(job: &'a Job, modules: Option<&Modules>) -> Cow<'a, Job> {
    let Some(modules) = modules else {
        return Cow::Borrowed(job);
    };
    let mut job = job.clone();
    let folder = modules.folder().python();
    job.python_paths.push(folder.to_string_lossy().into_owned());
    Cow::Owned(job)
}

/// A compile step's output, which the program's follows.
#[derive(Default)]
struct Before {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs the program in processes of its own: through its loader (started ahead, or now
/// for a language that runs through its loader only), or by its compile and run
/// commands.
fn run_spawned(
    job: &Job,
    file: &Path,
    prepared: Option<Prepared>,
    calls: Option<Relay>,
    live: &mut dyn LiveOutput,
) -> Result<JobOutcome, JobError> {
    let started = Instant::now();
    let spawn_error = |program: &str| {
        let program = program.to_owned();
        move |source| JobError::Spawn { program, source }
    };
    let prepared = match prepared {
        Some(p) => Some(p),
        None if job.recipe.run.is_empty() => {
            launch::prepare(&job.lang, &job.recipe, &[]).map_err(spawn_error("the loader"))?
        }
        None => None,
    };
    if let Some(prepared) = prepared {
        // A loader that died while it waited (its pipe is gone) is replaced, once.
        let spawned = match prepared.start(file, &job.python_paths, job.stream) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                eprintln!(
                    "sandbox-agent: the {} loader had ended; starting another",
                    job.lang
                );
                launch::prepare(&job.lang, &job.recipe, &[])
                    .and_then(|p| p.ok_or_else(|| io::Error::other("no loader")))
                    .and_then(|p| p.start(file, &job.python_paths, job.stream))
            }
            other => other,
        };
        let launch::Started { child, report } = spawned.map_err(spawn_error("the loader"))?;
        let report = report
            .map(CompileReport::new)
            .transpose()
            .map_err(JobError::Watch)?;
        let before = Before::default();
        return watch_spawned(job, child, report, before, started, calls, live);
    }
    let mut before = Before::default();
    if !job.recipe.compile.is_empty() {
        match compile(job, file, live)? {
            Ok(output) => before = output,
            Err(mut failed) => {
                failed.duration_ms = started.elapsed().as_millis() as u64;
                return Ok(failed);
            }
        }
    }
    let program = job.recipe.run.first().map_or("", String::as_str);
    let child = launch::cold(
        &job.lang,
        &job.recipe,
        file,
        job.session,
        &job.python_paths,
        job.stream,
    )
    .map_err(spawn_error(program))?;
    watch_spawned(job, child, None, before, started, calls, live)
}

/// Runs the compile command to its end, within the compile timeout: its output, or the
/// outcome of a compile that failed (or ran out of time), marked as such.
fn compile(
    job: &Job,
    file: &Path,
    live: &mut dyn LiveOutput,
) -> Result<Result<Before, JobOutcome>, JobError> {
    let mut child = launch::compile(&job.recipe, file).map_err(|source| JobError::Spawn {
        program: job.recipe.compile[0].clone(),
        source,
    })?;
    let mut watch = watch_of(&mut child, job, Before::default())?;
    let deadline = Instant::now() + Duration::from_millis(job.recipe.compile_timeout_ms);
    let end = watch
        .until_end(deadline, None, live)
        .map_err(JobError::Watch)?;
    let timed_out = end == End::TimedOut;
    let status = if timed_out || watch.ended_whole(false) {
        end_tree(watch.program).or(watch.status)
    } else {
        reap_exited(watch.program).program.or(watch.status)
    };
    watch
        .drain(Instant::now() + DRAIN_LIMIT, live)
        .map_err(JobError::Watch)?;
    watch.sink();
    let (exit_code, signal) = exit_code(status);
    if exit_code == 0 && !timed_out && !watch.ended_whole(false) {
        return Ok(Ok(Before {
            stdout: watch.stdout.into_bytes(),
            stderr: watch.stderr.into_bytes(),
        }));
    }
    let mut outcome = watch.outcome(exit_code, signal, 0, timed_out, false);
    outcome.compile_error = true;
    Ok(Err(outcome))
}

/// A watch on `child`'s output, within the job's caps, after what `before` holds.
fn watch_of(child: &mut Process, job: &Job, before: Before) -> Result<Watch, JobError> {
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
        unreachable!("both streams are piped in spawn()");
    };
    Ok(Watch {
        program: Pid::from_raw(child.id() as i32),
        exited: child.pidfd().map_err(JobError::Watch)?,
        stdout: Capture::after(stdout, job.stdout_cap, before.stdout),
        stderr: Capture::after(stderr, job.stderr_cap, before.stderr),
        status: None,
        calls: None,
    })
}

/// Watches a spawned program to its end: a compiling loader's compile first (within
/// the compile timeout), then the program within the job's timeout, serving its
/// `calls`.
fn watch_spawned(
    job: &Job,
    mut child: Process,
    report: Option<CompileReport>,
    before: Before,
    started: Instant,
    calls: Option<Relay>,
    live: &mut dyn LiveOutput,
) -> Result<JobOutcome, JobError> {
    let mut watch = watch_of(&mut child, job, before)?;
    watch.calls = calls;
    let mut compile_error = false;
    let end = match report {
        Some(mut report) => {
            let compile_deadline =
                Instant::now() + Duration::from_millis(job.recipe.compile_timeout_ms);
            match watch
                .until_compiled(compile_deadline, &mut report, live)
                .map_err(JobError::Watch)?
            {
                Compiled::Said(true) => None,
                Compiled::Said(false) => {
                    compile_error = true;
                    None
                }
                Compiled::Exited => {
                    compile_error = true;
                    Some(End::Exited)
                }
                Compiled::TimedOut => {
                    compile_error = true;
                    Some(End::TimedOut)
                }
            }
        }
        None => None,
    };
    let end = match end {
        Some(end) => end,
        None => {
            let deadline = Instant::now() + Duration::from_millis(job.timeout_ms);
            watch
                .until_end(deadline, None, live)
                .map_err(JobError::Watch)?
        }
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let timed_out = end == End::TimedOut;
    let status = if job.session && !watch.ended_whole(timed_out) {
        // A session keeps what the program left running: what the program wrote is in
        // the pipes; what its background processes write later is discarded.
        watch.drain_written(live).map_err(JobError::Watch)?;
        watch.sink();
        watch.status
    } else {
        let status = end_tree(watch.program).or(watch.status);
        watch
            .drain(Instant::now() + DRAIN_LIMIT, live)
            .map_err(JobError::Watch)?;
        status
    };
    let (exit_code, signal) = exit_code(status);
    let mut outcome = watch.outcome(exit_code, signal, duration_ms, timed_out, false);
    outcome.compile_error = compile_error;
    Ok(outcome)
}

/// Runs a session's program in the resident interpreter of its language, serving its
/// `calls`.
fn run_resident(
    job: &Job,
    file: &Path,
    kept: &mut Kept,
    calls: Option<Relay>,
    live: &mut dyn LiveOutput,
) -> Result<JobOutcome, JobError> {
    let program = || format!("the {} interpreter", job.lang);
    let mut lost = false;
    let mut resident = kept
        .resident(job, &mut lost)
        .map_err(|source| JobError::Spawn {
            program: program(),
            source,
        })?;
    let path = file.to_string_lossy();
    let tools = kept.tools.generation();
    if resident
        .request(&path, &job.python_paths, job.stream, tools)
        .is_err()
    {
        // It died between the check and the request: start another, once.
        lost = true;
        resident = kept
            .resident(job, &mut lost)
            .map_err(|source| JobError::Spawn {
                program: program(),
                source,
            })?;
        resident
            .request(&path, &job.python_paths, job.stream, tools)
            .map_err(|source| JobError::Spawn {
                program: program(),
                source,
            })?;
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
        calls,
    };
    let started = Instant::now();
    let deadline = started + Duration::from_millis(job.timeout_ms);
    let end = watch
        .until_end(deadline, Some(&mut resident), live)
        .map_err(JobError::Watch)?;
    let duration_ms = started.elapsed().as_millis() as u64;
    let timed_out = end == End::TimedOut;
    match end {
        End::Reported(report) if !watch.ended_whole(false) => {
            watch.drain_written(live).map_err(JobError::Watch)?;
            let (stdout, stderr) = (watch.stdout.take_pipe(), watch.stderr.take_pipe());
            let mut outcome = watch.outcome(report.code, None, duration_ms, false, lost);
            outcome.compile_error = report.compile_error;
            resident.stdout = stdout;
            resident.stderr = stderr;
            kept.residents.push(resident);
            Ok(outcome)
        }
        End::Exited if !watch.ended_whole(false) => {
            // The interpreter ended by itself (or the kernel ended it): what it left
            // running stays, as after any session run.
            watch.drain_written(live).map_err(JobError::Watch)?;
            watch.sink();
            let (exit_code, signal) = exit_code(watch.status);
            Ok(watch.outcome(exit_code, signal, duration_ms, false, true))
        }
        _ => {
            // A timeout or an output cap: the whole sandbox's processes end, every
            // resident interpreter with them, as a one-shot run's would.
            let status = end_tree(watch.program).or(watch.status);
            watch
                .drain(Instant::now() + DRAIN_LIMIT, live)
                .map_err(JobError::Watch)?;
            kept.residents.clear();
            let (exit_code, signal) = match (end, status) {
                (End::Reported(report), _) => (report.code, None),
                (_, status) => exit_code(status),
            };
            Ok(watch.outcome(exit_code, signal, duration_ms, timed_out, true))
        }
    }
}

fn write_code(job: &Job) -> Result<PathBuf, JobError> {
    let path = PathBuf::from(HOME).join(&job.recipe.file);
    write_as_program_user(&path, job.code.as_bytes()).map_err(|source| JobError::WriteCode {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}
