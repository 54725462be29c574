//! Watching a running program: reading its output up to the caps (handing what is kept
//! to the job's [`LiveOutput`] after each read), serving its calls to the tools its job
//! offers (the job's [`Relay`], and the answers the runner sends on the channel),
//! noticing its end (its process exiting, or its resident interpreter reporting),
//! enforcing the deadline.

use super::capture::Capture;
use super::ended::Ended;
use super::live::LiveOutput;
use super::resident::{Report, Resident};
use super::sink;
use super::tools::{Relay, Slot};
use super::tree::{kill_all, reap_exited};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::Pid;
use sandbox_protocol::agent::JobOutcome;
use sandbox_protocol::process::Stream;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::{ChildStderr, ChildStdout};
use std::time::{Duration, Instant};

/// How often orphans are reaped while the program runs (they count against the pids cap).
const REAP_TICK: Duration = Duration::from_millis(100);

/// The running program and its captured streams.
pub(crate) struct Watch {
    pub(crate) program: Pid,
    pub(crate) exited: OwnedFd,
    pub(crate) stdout: Capture<ChildStdout>,
    pub(crate) stderr: Capture<ChildStderr>,
    pub(crate) status: Option<Ended>,
    /// The program's calls to the tools its job offers, served while it runs (not
    /// during a compile, nor after its end); let go with the watch.
    pub(crate) calls: Option<Relay>,
}

/// How a program's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Its process exited (its status is in [`Watch::status`]).
    Exited,
    /// The deadline passed; every process of the sandbox was killed.
    TimedOut,
    /// A resident interpreter reported the program's end.
    Reported(Report),
}

/// How a compiling loader's compile ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compiled {
    /// It said so: whether the program compiled.
    Said(bool),
    /// The loader's process exited before it said anything.
    Exited,
    /// The deadline passed; every process of the sandbox was killed.
    TimedOut,
}

/// A compiling loader's report pipe: one line, `{"compiled": true|false}`.
pub(crate) struct CompileReport {
    pipe: std::fs::File,
    line: Vec<u8>,
}

impl CompileReport {
    /// Reads the report from `pipe` (made non-blocking here).
    pub(crate) fn new(pipe: OwnedFd) -> std::io::Result<CompileReport> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        fcntl(&pipe, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        Ok(CompileReport {
            pipe: pipe.into(),
            line: Vec::new(),
        })
    }

    /// Reads what is there; the verdict once the whole line arrived (a line that is
    /// not a report, or none before end of file, counts as not compiled).
    fn read(&mut self) -> std::io::Result<Option<bool>> {
        use std::io::Read;
        let mut buf = [0u8; 256];
        loop {
            if let Some(end) = self.line.iter().position(|b| *b == b'\n') {
                let report: serde_json::Value =
                    serde_json::from_slice(&self.line[..end]).unwrap_or_default();
                return Ok(Some(report["compiled"] == serde_json::Value::Bool(true)));
            }
            match self.pipe.read(&mut buf) {
                Ok(0) => return Ok(Some(false)),
                Ok(n) if self.line.len() < 256 => self.line.extend_from_slice(&buf[..n]),
                Ok(_) => return Ok(Some(false)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Which of the watched descriptors poll found ready.
struct Ready {
    stdout: bool,
    stderr: bool,
    report: bool,
    /// The relay's slots with events.
    calls: Vec<Slot>,
    /// The runner's channel holds a message (an answer to a call).
    replies: bool,
}

impl Watch {
    /// Reads output until the program ends (its process exits, or the resident
    /// interpreter running it reports) or the deadline passes. A stream going over its
    /// cap kills the tree, which then ends the program.
    pub(crate) fn until_end(
        &mut self,
        deadline: Instant,
        mut resident: Option<&mut Resident>,
        live: &mut dyn LiveOutput,
    ) -> io::Result<End> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let now = Instant::now();
            if now >= deadline {
                kill_all(self.program);
                return Ok(End::TimedOut);
            }
            let wait = (deadline - now).min(REAP_TICK);
            let done = resident.as_deref().map(|r| r.done());
            let ready = self.poll(Some(wait), true, done, Some(&*live))?;
            self.read_ready(&ready, &mut buf, live)?;
            self.serve_calls(&ready, live);
            if let Some(resident) = resident.as_deref_mut().filter(|_| ready.report) {
                if let Some(report) = resident.read_report()? {
                    return Ok(End::Reported(report));
                }
            }
            if let Some(status) = reap_exited(self.program).program {
                self.status = Some(status);
                return Ok(End::Exited);
            }
        }
    }

    /// Reads output until the loader says whether the program compiled, its process
    /// exits, or the deadline passes.
    pub(crate) fn until_compiled(
        &mut self,
        deadline: Instant,
        report: &mut CompileReport,
        live: &mut dyn LiveOutput,
    ) -> io::Result<Compiled> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let now = Instant::now();
            if now >= deadline {
                kill_all(self.program);
                return Ok(Compiled::TimedOut);
            }
            let wait = (deadline - now).min(REAP_TICK);
            let ready = self.poll(Some(wait), true, Some(report.pipe.as_fd()), None)?;
            self.read_ready(&ready, &mut buf, live)?;
            if ready.report {
                if let Some(compiled) = report.read()? {
                    return Ok(Compiled::Said(compiled));
                }
            }
            if let Some(status) = reap_exited(self.program).program {
                self.status = Some(status);
                return Ok(Compiled::Exited);
            }
        }
    }

    /// Whether the run ended the whole tree: a timeout or an output cap.
    pub(crate) fn ended_whole(&self, timed_out: bool) -> bool {
        timed_out || self.stdout.truncated() || self.stderr.truncated()
    }

    /// Reads what is left in the pipes once no writer remains, within `limit`.
    pub(crate) fn drain(&mut self, limit: Instant, live: &mut dyn LiveOutput) -> io::Result<()> {
        let mut buf = vec![0u8; 64 * 1024];
        while self.stdout.pipe().is_some() || self.stderr.pipe().is_some() {
            let now = Instant::now();
            if now >= limit {
                break;
            }
            let ready = self.poll(Some(limit - now), false, None, None)?;
            self.read_ready(&ready, &mut buf, live)?;
        }
        Ok(())
    }

    /// Reads what is in the pipes now, without waiting for their end (background
    /// processes of a session, or a resident interpreter, hold them open).
    pub(crate) fn drain_written(&mut self, live: &mut dyn LiveOutput) -> io::Result<()> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let ready = self.poll(Some(Duration::ZERO), false, None, None)?;
            if !ready.stdout && !ready.stderr {
                return Ok(());
            }
            self.read_ready(&ready, &mut buf, live)?;
        }
    }

    /// Hands the pipes still open to the [`sink`](super::sink): what background
    /// processes write to them later is discarded.
    pub(crate) fn sink(&mut self) {
        if let Some(pipe) = self.stdout.take_pipe() {
            sink::discard(pipe.into());
        }
        if let Some(pipe) = self.stderr.take_pipe() {
            sink::discard(pipe.into());
        }
    }

    /// The agent's report of the run.
    pub(crate) fn outcome(
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
            compile_error: false,
            oom_killed: None,
            outputs: Vec::new(),
            outputs_truncated: false,
            state_lost,
            processes_running: 0,
        }
    }

    /// Reads the streams poll found ready, hands on what was kept, and ends the tree
    /// when a stream went over its cap.
    fn read_ready(
        &mut self,
        ready: &Ready,
        buf: &mut [u8],
        live: &mut dyn LiveOutput,
    ) -> io::Result<()> {
        let mut over_cap = false;
        if ready.stdout {
            over_cap |= self.stdout.read_some(buf)?;
            hand_on(live, Stream::Stdout, self.stdout.unsent());
        }
        if ready.stderr {
            over_cap |= self.stderr.read_some(buf)?;
            hand_on(live, Stream::Stderr, self.stderr.unsent());
        }
        if over_cap {
            kill_all(self.program);
        }
        Ok(())
    }

    /// Answers the calls `ready` says have something to do, and the runner's answer
    /// waiting on the channel.
    fn serve_calls(&mut self, ready: &Ready, live: &mut dyn LiveOutput) {
        let Some(relay) = &mut self.calls else {
            return;
        };
        if ready.replies {
            if let Some(reply) = live.reply() {
                relay.answer(reply);
            }
        }
        relay.serve(&ready.calls, live);
    }

    /// Polls the streams (and the exit, a report pipe; with `live`, the job's calls and
    /// the runner's answers) for at most `wait`.
    fn poll(
        &self,
        wait: Option<Duration>,
        with_exit: bool,
        report: Option<BorrowedFd<'_>>,
        live: Option<&dyn LiveOutput>,
    ) -> io::Result<Ready> {
        let flags = PollFlags::POLLIN;
        let mut fds = Vec::with_capacity(8);
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
        let (relay, live) = match (&self.calls, live) {
            (Some(relay), Some(live)) => (relay.interest(), live.replies()),
            _ => (Vec::new(), None),
        };
        let calls_from = fds.len();
        fds.extend(
            relay
                .iter()
                .map(|(_, fd, events)| PollFd::new(*fd, *events)),
        );
        if let Some(channel) = live {
            fds.push(PollFd::new(channel, flags));
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
            Err(e) => return Err(e.into()),
        }
        let is_ready = |slot: Option<usize>| {
            slot.and_then(|i| fds[i].revents())
                .is_some_and(|r| !r.is_empty())
        };
        let calls = relay
            .iter()
            .enumerate()
            .filter(|(i, _)| is_ready(Some(calls_from + i)))
            .map(|(_, (slot, ..))| *slot)
            .collect();
        Ok(Ready {
            stdout: is_ready(slots[0]),
            stderr: is_ready(slots[1]),
            report: is_ready(slots[2]),
            calls,
            replies: live.is_some() && is_ready(Some(fds.len() - 1)),
        })
    }
}

/// Hands `bytes` to `live`, unless there are none.
fn hand_on(live: &mut dyn LiveOutput, stream: Stream, bytes: &[u8]) {
    if !bytes.is_empty() {
        live.output(stream, bytes);
    }
}
