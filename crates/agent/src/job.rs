//! Running one job: write the code, start the interpreter, watch it, collect the outcome.

use crate::capture::Capture;
use crate::identity::write_as_program_user;
use crate::launch::{self, Prepared};
use crate::sink;
use crate::tree::{end_tree, exit_code, kill_all, reap_exited};
use crate::HOME;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use sandbox_protocol::agent::{Job, JobOutcome};
use sandbox_protocol::Lang;
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdout};
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

/// Runs `job` to its end and reports what happened, in the interpreter `prepared` ahead
/// of time when it is of the job's language.
pub fn run_job(job: &Job, prepared: Option<Prepared>) -> Result<JobOutcome, JobError> {
    let file = write_code(job)?;
    let program = interpreter_name(job.lang);
    let spawned = match prepared {
        Some(p) if p.lang() == job.lang => p.start(&file),
        Some(p) => {
            p.discard();
            launch::cold(job.lang, &file)
        }
        None => launch::cold(job.lang, &file),
    };
    let mut child = spawned.map_err(|source| JobError::Spawn { program, source })?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
        unreachable!("both streams are piped in spawn()");
    };
    let program = Pid::from_raw(child.id() as i32);
    let mut watch = Watch {
        program,
        exited: pidfd_open(&child).map_err(JobError::Watch)?,
        stdout: Capture::new(stdout, job.stdout_cap),
        stderr: Capture::new(stderr, job.stderr_cap),
        status: None,
    };
    let started = Instant::now();
    let timed_out = watch.until_exit(started + Duration::from_millis(job.timeout_ms))?;
    let duration_ms = started.elapsed().as_millis() as u64;
    let ended_whole = timed_out || watch.stdout.truncated() || watch.stderr.truncated();
    let status = if job.session && !ended_whole {
        // A session keeps what the program left running: what the program wrote is in
        // the pipes; what its background processes write later is discarded.
        watch.drain_written()?;
        watch.status
    } else {
        let status = end_tree(program).or(watch.status);
        watch.drain(Instant::now() + DRAIN_LIMIT)?;
        status
    };
    let (exit_code, signal) = exit_code(status.unwrap_or(WaitStatus::StillAlive));
    Ok(JobOutcome {
        stdout_truncated: watch.stdout.truncated(),
        stderr_truncated: watch.stderr.truncated(),
        stdout: watch.stdout.into_text(),
        stderr: watch.stderr.into_text(),
        exit_code,
        signal,
        duration_ms,
        timed_out,
        oom_killed: None,
        outputs: Vec::new(),
        outputs_truncated: false,
        state_lost: false,
    })
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

fn pidfd_open(child: &Child) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1;
    // it touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The running program and its captured streams.
struct Watch {
    program: Pid,
    exited: OwnedFd,
    stdout: Capture<ChildStdout>,
    stderr: Capture<ChildStderr>,
    status: Option<WaitStatus>,
}

/// Which of the watched descriptors poll found ready.
struct Ready {
    stdout: bool,
    stderr: bool,
}

impl Watch {
    /// Reads output until the program exits or the deadline passes; true on timeout.
    /// A stream going over its cap kills the tree, which then ends the program.
    fn until_exit(&mut self, deadline: Instant) -> Result<bool, JobError> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let now = Instant::now();
            if now >= deadline {
                kill_all(self.program);
                return Ok(true);
            }
            let wait = (deadline - now).min(REAP_TICK);
            let ready = self.poll(Some(wait), true)?;
            self.read_ready(&ready, &mut buf)?;
            if let Some(status) = reap_exited(self.program).program {
                self.status = Some(status);
                return Ok(false);
            }
        }
    }

    /// Reads what is left in the pipes once no writer remains, within `limit`.
    fn drain(&mut self, limit: Instant) -> Result<(), JobError> {
        let mut buf = vec![0u8; 64 * 1024];
        while self.stdout.pipe().is_some() || self.stderr.pipe().is_some() {
            let now = Instant::now();
            if now >= limit {
                break;
            }
            let ready = self.poll(Some(limit - now), false)?;
            self.read_ready(&ready, &mut buf)?;
        }
        Ok(())
    }

    /// Reads what is in the pipes now, without waiting for their end (background
    /// processes of a session may hold them open), and hands the pipes still open to
    /// the [`sink`](crate::sink).
    fn drain_written(&mut self) -> Result<(), JobError> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let ready = self.poll(Some(Duration::ZERO), false)?;
            if !ready.stdout && !ready.stderr {
                break;
            }
            self.read_ready(&ready, &mut buf)?;
        }
        if let Some(pipe) = self.stdout.take_pipe() {
            sink::discard(pipe.into());
        }
        if let Some(pipe) = self.stderr.take_pipe() {
            sink::discard(pipe.into());
        }
        Ok(())
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

    fn poll(&self, wait: Option<Duration>, with_exit: bool) -> Result<Ready, JobError> {
        let flags = PollFlags::POLLIN;
        let mut fds = Vec::with_capacity(3);
        let mut slots = [None, None];
        if let Some(p) = self.stdout.pipe() {
            slots[0] = Some(fds.len());
            fds.push(PollFd::new(p.as_fd(), flags));
        }
        if let Some(p) = self.stderr.pipe() {
            slots[1] = Some(fds.len());
            fds.push(PollFd::new(p.as_fd(), flags));
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
        })
    }
}
