//! The exchange with the runner, for whoever does the work: [`serve_with`] over a
//! channel it was handed, [`serve_restorable`] over the channel of a VM the runner may
//! snapshot (a template's, or a session's saved whole), each with a [`Worker`] that
//! prepares interpreters and runs jobs: the agent itself ([`Local`]), or a VM's init
//! relaying to the agent of the jailed sandbox it made.

use super::files;
use super::hangup::HangupWatch;
use super::home;
use super::job::{JobError, Kept};
use super::launch::prepare;
use super::live::{LiveOutput, OutputFrames, Unstreamed};
use super::processes;
use super::tree;
use sandbox_archive::Limits;
use sandbox_protocol::agent::{
    AgentMessage, FileFailure, FileRequest, Job, JobOutcome, Prepare, Reseed, RunnerMessage,
    Snapshot,
};
use sandbox_protocol::frame::{self, FrameError};
use sandbox_protocol::process::ProcessRequest;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// Why the agent (or a VM's init, serving for it) stopped without answering a job.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The channel to the runner failed.
    #[error(transparent)]
    Channel(#[from] FrameError),
    /// The agent could not shield itself from the program.
    #[error("making the agent non-dumpable: {0}")]
    Dumpable(nix::Error),
    /// The agent could not watch its channel for the runner going away.
    #[error("watching the channel: {0}")]
    Watch(io::Error),
    /// The agent could not reach the runner.
    #[error("connecting to the runner: {0}")]
    Connect(io::Error),
    /// The kernel's random pool could not be reseeded, or the clock set, after a restore.
    #[error("reseeding the kernel's random pool and setting the clock: {0}")]
    Reseed(io::Error),
    /// The runner sent something else than the next piece of an archive being unpacked
    /// (or a piece outside one): the exchange is out of step.
    #[error("the runner sent {0} where the next piece of an archive was expected")]
    OutOfStep(String),
}

/// What serves the exchange's requests: starts an interpreter ahead of the job, runs
/// the job.
pub trait Worker {
    /// Starts the interpreter the request names ahead of the job; on failure, why.
    fn prepare(&mut self, request: &Prepare) -> Result<(), String>;
    /// Runs the job to its end, handing its output to `live` as it comes (a job that is
    /// not [streamed](Job::stream) gets [`Unstreamed`]); the answer is Done or Failed.
    fn run(&mut self, job: &Job, live: &mut dyn LiveOutput) -> AgentMessage;
    /// Does a session's file operation; the answer is Stored, File, Files or FileFailed.
    fn file(&mut self, request: &FileRequest) -> AgentMessage;
    /// Sends the session archive (of at most `max_bytes`) on `channel`: chunk frames,
    /// then Packed or FileFailed (or Failed). An error is the channel's.
    fn pack<C: Read + Write>(&mut self, max_bytes: u64, channel: &mut C) -> Result<(), AgentError>;
    /// Restores the session archive that follows on `channel` (within `limits`), reading
    /// every chunk to the last, and answers once: Unpacked or FileFailed (or Failed). An
    /// error is the channel's.
    fn unpack<C: Read + Write>(
        &mut self,
        limits: Limits,
        channel: &mut C,
    ) -> Result<(), AgentError>;
    /// Does a session's process operation; the answer is Process (or Failed).
    fn process(&mut self, request: &ProcessRequest) -> AgentMessage;
}

/// The agent doing the work itself: it starts the interpreter and runs the program
/// with `run` (normally [`run_job`](super::run_job)).
pub struct Local<F> {
    run: F,
    kept: Kept,
    /// The session's processes are stopped with SIGSTOP (see [`Worker::run`] here).
    paused: bool,
    /// The session's jobs ask for that between calls
    /// ([`Job::sigstop_between_runs`]).
    sigstop: bool,
}

impl<F> Local<F>
where
    F: FnMut(&Job, &mut Kept, &mut dyn LiveOutput) -> Result<JobOutcome, JobError>,
{
    /// A worker that runs jobs with `run`.
    pub fn new(run: F) -> Self {
        Local {
            run,
            kept: Kept::default(),
            paused: false,
            sigstop: false,
        }
    }
}

impl<F> Worker for Local<F>
where
    F: FnMut(&Job, &mut Kept, &mut dyn LiveOutput) -> Result<JobOutcome, JobError>,
{
    fn prepare(&mut self, request: &Prepare) -> Result<(), String> {
        let lang = &request.prepare;
        let interpreter = prepare(lang, &request.recipe, &request.warm_imports)
            .map_err(|e| format!("starting the {lang} loader: {e}"))?;
        self.kept.prepared(interpreter);
        if request.rehearse {
            super::rehearsal::rehearse();
        }
        Ok(())
    }

    /// A session's processes are frozen between its calls by whoever holds its cgroup
    /// (the runner, a VM's init); where nothing does, the job says so
    /// ([`Job::sigstop_between_runs`]) and the agent stops them itself
    /// (`tree::pause_all`) until the next call, unless processes of the API run
    /// (the session is then left running, as a freezer leaves it).
    fn run(&mut self, job: &Job, live: &mut dyn LiveOutput) -> AgentMessage {
        let stop = job.session && job.sigstop_between_runs;
        self.sigstop = stop;
        self.resume();
        let answer = match (self.run)(job, &mut self.kept, live) {
            Ok(mut outcome) => {
                outcome.processes_running = processes::running();
                AgentMessage::Done(outcome)
            }
            Err(e) => AgentMessage::Failed {
                message: e.to_string(),
            },
        };
        if stop {
            self.pause();
        }
        answer
    }

    fn file(&mut self, request: &FileRequest) -> AgentMessage {
        match home::open() {
            Ok(home) => files::serve(home.as_fd(), request),
            Err(e) => AgentMessage::FileFailed {
                reason: FileFailure::Io,
                message: e.to_string(),
            },
        }
    }

    fn pack<C: Read + Write>(&mut self, max_bytes: u64, channel: &mut C) -> Result<(), AgentError> {
        files::archive::pack(session_folders(), max_bytes, channel)
    }

    fn unpack<C: Read + Write>(
        &mut self,
        limits: Limits,
        channel: &mut C,
    ) -> Result<(), AgentError> {
        files::archive::unpack(session_folders(), limits, channel)
    }

    /// Done with the session's processes awake: stopped ones (SIGSTOP) are woken for
    /// it, and where the session's jobs stop them between calls, stopped again after
    /// unless one of the API's runs.
    fn process(&mut self, request: &ProcessRequest) -> AgentMessage {
        self.resume();
        let answer = processes::handle(request);
        if self.sigstop {
            self.pause();
        }
        AgentMessage::Process {
            answer,
            running: processes::running(),
        }
    }
}

/// The home folder and `/tmp`, which a session archive holds.
fn session_folders() -> Result<(OwnedFd, OwnedFd), files::Refusal> {
    let opened = home::open().and_then(|home| Ok((home, home::open_tmp()?)));
    opened.map_err(|e| (FileFailure::Io, e.to_string()))
}

impl<F> Local<F> {
    /// Wakes what [`pause`](Self::pause) stopped.
    fn resume(&mut self) {
        if std::mem::take(&mut self.paused) {
            tree::resume_all();
        }
    }

    /// Stops every process of the sandbox with SIGSTOP, unless processes of the API run.
    fn pause(&mut self) {
        if processes::running() > 0 {
            return;
        }
        if !tree::pause_all() {
            eprintln!("sandbox-agent: a process of the session kept running after SIGSTOP");
        }
        self.paused = true;
    }
}

/// Serves the exchange over `channel` with `worker`: Ready; optionally a Prepare, answered
/// by Ready again once the interpreter waits; then one Job, answered by Done or Failed
/// (and, while the jobs are a session's, the jobs that follow); then waits until the
/// runner closes the channel.
///
/// Returns `Ok(())` also when the runner closes the channel without sending a job
/// (a pooled sandbox being destroyed).
pub fn serve_with<C, W>(channel: &mut C, worker: &mut W) -> Result<(), AgentError>
where
    C: Read + Write + AsFd,
    W: Worker,
{
    shield()?;
    frame::write(channel, &AgentMessage::Ready)?;
    let mut started = false;
    let mut refuse = |channel: &mut C, _: Snapshot| {
        fail(channel, "this sandbox cannot be snapshotted".into())?;
        Ok(false)
    };
    match await_job(channel, worker, &mut started)? {
        Next::Job(job) => serve_jobs(channel, *job, worker, &mut refuse),
        Next::Snapshot(notice) => refuse(channel, notice).map(drop),
        Next::Closed => Ok(()),
    }
}

/// The host side of a VM that can be snapshotted: the agent connects to it (again after
/// a restore where the VMM does not keep the channel), and a restored VM gets fresh
/// entropy and the time from it.
pub trait Restorable {
    /// The channel to the runner.
    type Channel: Read + Write + AsFd;
    /// Connects to the runner once; fails while the runner is not listening (or the
    /// channel's device is not there yet).
    fn connect(&mut self) -> io::Result<Self::Channel>;
    /// Whether a restored VM reaches its runner on a new connection (the VMM resets
    /// them, as Firecracker's vsock does), rather than on the channel it had (a serial
    /// port, which QEMU connects to the new runner before the VM runs again).
    fn reconnects(&self) -> bool;
    /// Applies what a restored VM gets first: mixes the entropy into the kernel's random
    /// pool, credited, reseeds its generator, and sets the clock.
    fn restored(&mut self, fresh: &Reseed) -> io::Result<()>;
}

/// How often the agent tries to reach the runner, and how long it waits between tries
/// (counted in tries, not by the clock, which a restore can move).
const CONNECT_TRIES: u32 = 12_000;
const CONNECT_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);

/// [`serve_with`] for a VM the runner may snapshot: the agent connects to the runner
/// itself, and on a [`Snapshot`] answers Ready and waits to be restored (see
/// [`restore`]): a template's before any Prepare, a session's (marked so) before or
/// between its calls. Every VM restored from the snapshot gets a Reseed first, feeds
/// it to the kernel, answers Ready, and serves the rest as [`serve_with`] does.
pub fn serve_restorable<G, W>(guest: &mut G, worker: &mut W) -> Result<(), AgentError>
where
    G: Restorable,
    W: Worker,
{
    shield()?;
    let mut channel = connect(guest)?;
    frame::write(&mut channel, &AgentMessage::Ready)?;
    let mut started = false;
    loop {
        match await_job(&mut channel, worker, &mut started)? {
            Next::Snapshot(notice) => {
                if !snapshot(guest, &mut channel, notice, started)? {
                    return Ok(());
                }
            }
            Next::Job(job) => {
                let mut restorable =
                    |channel: &mut G::Channel, notice| snapshot(guest, channel, notice, true);
                return serve_jobs(&mut channel, *job, worker, &mut restorable);
            }
            Next::Closed => return Ok(()),
        }
    }
}

/// Serves a [`Snapshot`] notice: refuses a template's once an interpreter started or
/// a job ran (`started`: their random state would be carried into every restore),
/// else [`restore`]s. `false`: the exchange is over (refused, or the runner let go).
fn snapshot<G: Restorable>(
    guest: &mut G,
    channel: &mut G::Channel,
    notice: Snapshot,
    started: bool,
) -> Result<bool, AgentError> {
    if started && !notice.session {
        fail(
            channel,
            "a template's Snapshot after a Prepare or a job".into(),
        )?;
        return Ok(false);
    }
    restore(guest, channel)
}

/// Answers Ready to a snapshot notice and waits for the VM to be restored (or the save
/// undone): on the same channel, or on a new connection where the VMM resets them (the
/// old one shut first, so that the runner sees it end); there the Reseed first, fed to
/// the kernel, then Ready. `false`: the runner closed the channel instead, or sent
/// something else first (refused).
fn restore<G: Restorable>(guest: &mut G, channel: &mut G::Channel) -> Result<bool, AgentError> {
    frame::write(channel, &AgentMessage::Ready)?;
    if guest.reconnects() {
        let _ = nix::sys::socket::shutdown(
            channel.as_fd().as_raw_fd(),
            nix::sys::socket::Shutdown::Both,
        );
        *channel = connect(guest)?;
    }
    match frame::read::<_, RunnerMessage>(channel)? {
        Some(RunnerMessage::Reseed(r)) if r.reseed.len() >= Reseed::MIN_BYTES => {
            guest.restored(&r).map_err(AgentError::Reseed)?;
        }
        Some(_) => {
            let message = format!(
                "a restored VM expects a Reseed of at least {} bytes first",
                Reseed::MIN_BYTES
            );
            fail(channel, message)?;
            return Ok(false);
        }
        None => return Ok(false),
    }
    frame::write(channel, &AgentMessage::Ready)?;
    Ok(true)
}

/// Connects to the runner, trying again while it does not listen.
fn connect<G: Restorable>(guest: &mut G) -> Result<G::Channel, AgentError> {
    let mut last = None;
    for _ in 0..CONNECT_TRIES {
        match guest.connect() {
            Ok(channel) => return Ok(channel),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(CONNECT_PAUSE);
    }
    Err(AgentError::Connect(last.unwrap_or_else(|| {
        io::Error::new(io::ErrorKind::TimedOut, "no attempt was made")
    })))
}

/// The agent is not dumpable: a program running as the agent's own user could
/// otherwise open /proc/<agent>/mem and rewrite it; a program of another user (as
/// everywhere now) cannot anyway, so this is a second bar. The program's own
/// processes become dumpable again at exec.
fn shield() -> Result<(), AgentError> {
    nix::sys::prctl::set_dumpable(false).map_err(AgentError::Dumpable)
}

/// What came before the job.
enum Next {
    /// The job.
    Job(Box<Job>),
    /// A snapshot is to be taken.
    Snapshot(Snapshot),
    /// The runner closed the channel (a pooled sandbox being destroyed), or the agent
    /// refused a message and said so.
    Closed,
}

/// Reads messages until the job or a snapshot notice, having the worker start the
/// interpreter on a Prepare (`started` then set).
fn await_job<C: Read + Write, W: Worker>(
    channel: &mut C,
    worker: &mut W,
    started: &mut bool,
) -> Result<Next, AgentError> {
    loop {
        match frame::read::<_, RunnerMessage>(channel)? {
            None => return Ok(Next::Closed),
            Some(RunnerMessage::Job(job)) => return Ok(Next::Job(Box::new(job))),
            // A session's files and processes may come before its first job.
            Some(RunnerMessage::File(request)) => file(channel, worker, &request)?,
            Some(RunnerMessage::Process(request)) => {
                frame::write(channel, &worker.process(&request))?;
            }
            Some(RunnerMessage::Snapshot(notice)) => return Ok(Next::Snapshot(notice)),
            // The answer to a call of a job that has ended: nobody waits for it.
            Some(RunnerMessage::ToolReply(_)) => {}
            Some(RunnerMessage::Reseed(_)) => {
                fail(channel, "a Reseed outside a restore".into())?;
                return Ok(Next::Closed);
            }
            Some(RunnerMessage::Prepare(_)) if *started => {
                fail(channel, "a second Prepare".into())?;
                return Ok(Next::Closed);
            }
            Some(RunnerMessage::Prepare(p)) => match worker.prepare(&p) {
                Ok(()) => {
                    *started = true;
                    frame::write(channel, &AgentMessage::Ready)?;
                }
                Err(message) => {
                    fail(channel, message)?;
                    return Ok(Next::Closed);
                }
            },
        }
    }
}

/// Does a session's file operation: most are answered by one frame; a session
/// archive's take several each way (see [`sandbox_protocol::agent`]).
fn file<C: Read + Write, W: Worker>(
    channel: &mut C,
    worker: &mut W,
    request: &FileRequest,
) -> Result<(), AgentError> {
    match request {
        FileRequest::Pack { max_bytes } => worker.pack(*max_bytes, channel),
        FileRequest::Unpack {
            max_bytes,
            max_entries,
        } => {
            let limits = Limits {
                max_bytes: *max_bytes,
                max_entries: *max_entries,
            };
            worker.unpack(limits, channel)
        }
        FileRequest::UnpackChunk { .. } => Err(AgentError::OutOfStep(
            "a piece of an archive outside an unpack".into(),
        )),
        _ => Ok(frame::write(channel, &worker.file(request))?),
    }
}

/// What serves a [`Snapshot`] notice between a session's calls: `false` when the
/// exchange is over.
type OnSnapshot<'a, C> = dyn FnMut(&mut C, Snapshot) -> Result<bool, AgentError> + 'a;

/// Answers `job` and, while the jobs are a session's, the jobs that follow (and the
/// snapshots between them, with `on_snapshot`); after a one-shot job, waits for the
/// runner to let go of the sandbox.
fn serve_jobs<C, W>(
    channel: &mut C,
    first: Job,
    worker: &mut W,
    on_snapshot: &mut OnSnapshot<'_, C>,
) -> Result<(), AgentError>
where
    C: Read + Write + AsFd,
    W: Worker,
{
    let mut job = first;
    loop {
        answer(channel, &job, worker)?;
        if !job.session {
            // Every process of the job is gone by now. Stay until the runner closes
            // the channel: the sandbox's teardown (a namespace's, a VM's) then happens
            // when the runner destroys it, not while the answer is on its way.
            wait_for_close(channel);
            return Ok(());
        }
        let next = loop {
            match frame::read::<_, RunnerMessage>(channel)? {
                Some(RunnerMessage::File(request)) => file(channel, worker, &request)?,
                Some(RunnerMessage::Process(request)) => {
                    frame::write(channel, &worker.process(&request))?;
                }
                Some(RunnerMessage::Snapshot(notice)) => {
                    if !on_snapshot(channel, notice)? {
                        return Ok(());
                    }
                }
                // The answer to a call of the job that has just ended: nobody waits.
                Some(RunnerMessage::ToolReply(_)) => {}
                other => break other,
            }
        };
        match next {
            None => return Ok(()),
            Some(RunnerMessage::Job(next)) if next.session => job = next,
            Some(_) => {
                return fail(
                    channel,
                    "a session's sandbox takes only session jobs".into(),
                )
            }
        }
    }
}

/// Runs the job and answers, watching meanwhile for the runner going away. A streamed
/// job's output and its program's tool calls go to the channel as they come, before the
/// answer, and the calls' answers are read from it meanwhile.
fn answer<C, W>(channel: &mut C, job: &Job, worker: &mut W) -> Result<(), AgentError>
where
    C: Read + Write + AsFd,
    W: Worker,
{
    let watcher = HangupWatch::start(channel.as_fd()).map_err(AgentError::Watch)?;
    let (answer, sent) = if job.stream {
        let mut frames = OutputFrames::new(channel);
        let answer = worker.run(job, &mut frames);
        (answer, frames.finish())
    } else {
        (worker.run(job, &mut Unstreamed), Ok(()))
    };
    watcher.stop();
    sent?;
    frame::write(channel, &answer)?;
    Ok(())
}

/// Reads (and ignores) what the runner sends until it closes the channel.
fn wait_for_close<C: Read>(channel: &mut C) {
    let mut buf = [0u8; 64];
    loop {
        match channel.read(&mut buf) {
            Ok(0) => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
            Ok(_) => continue, // nothing is expected; ignore it
        }
    }
}

fn fail<C: Write>(channel: &mut C, message: String) -> Result<(), AgentError> {
    frame::write(channel, &AgentMessage::Failed { message })?;
    Ok(())
}

#[cfg(test)]
mod tests;
