//! The agent: the first process inside a sandbox.
//!
//! It announces [`AgentMessage::Ready`] on its channel, receives exactly one [`Job`],
//! writes the code to a file in the home directory, runs the interpreter on it with an
//! empty, fixed environment, captures standard output and error separately up to their
//! caps, enforces the timeout on the whole process tree, reaps every child, and answers
//! with one [`AgentMessage::Done`] (or [`AgentMessage::Failed`]). Then it waits for the
//! runner to close the channel, returns, and its caller exits; a sandbox never runs a
//! second job.
//!
//! The agent knows nothing of how its sandbox was made: the process backend starts it
//! as PID 1 of fresh namespaces, a VM backend as the guest's init. What it relies on is
//! only this: it is PID 1 of its PID namespace (so that `kill(-1)` ends every other
//! process of the sandbox and orphans are reparented to it), `/tmp` and the home
//! directory are writable, and the interpreters are on [`PATH`].
//!
//! Outside a PID namespace of its own (`getpid() != 1`) it never signals `-1`; it falls
//! back to killing the program's process group.

mod capture;
pub mod guest;
mod identity;
pub mod init;
mod job;
mod launch;
pub mod net;
mod tree;

pub use identity::run_programs_as;
pub use job::{run_job, JobError};
pub use launch::{prepare, Prepared};

use sandbox_protocol::agent::{AgentMessage, Job, JobOutcome, Reseed, RunnerMessage};
use sandbox_protocol::frame::{self, FrameError};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The search path given to programs.
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The home directory and working directory of programs.
pub const HOME: &str = "/home/sandbox";
/// The sandbox user's id inside a sandbox: the user programs run as.
pub const SANDBOX_UID: u32 = 1000;
/// [`HOME`] as a C string, for the child between fork and exec.
const HOME_C: &std::ffi::CStr = c"/home/sandbox";

/// Why the agent stopped without answering a job.
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
}

/// Takes the channel inherited as `fd` and marks it close-on-exec, so that the program
/// never inherits it (it could otherwise forge the agent's answer).
///
/// # Safety
///
/// `fd` must be an open socket that nothing else in the process owns or will close.
pub unsafe fn channel_from_fd(fd: RawFd) -> io::Result<UnixStream> {
    // SAFETY: the caller hands over sole ownership of `fd`.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    nix::fcntl::fcntl(
        &owned,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(io::Error::from)?;
    Ok(UnixStream::from(owned))
}

/// The whole life of an agent whose runner hands it the channel as descriptor `fd`
/// (the process backend's jail, or a launcher starting `sandbox-agent` by path): serves
/// one job on it and returns the process's exit code, having said on standard error why
/// it failed.
///
/// # Safety
///
/// `fd` must be an open socket that nothing else in the process owns or will close.
pub unsafe fn serve_inherited(fd: RawFd) -> i32 {
    // SAFETY: the caller hands over sole ownership of `fd`.
    let mut channel = match unsafe { channel_from_fd(fd) } {
        Ok(channel) => channel,
        Err(e) => {
            eprintln!("sandbox-agent: channel on descriptor {fd}: {e}");
            return 1;
        }
    };
    match serve(&mut channel) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sandbox-agent: {e}");
            1
        }
    }
}

/// Serves one job over `channel`: Ready; optionally a Prepare, answered by starting the
/// interpreter and Ready again; then one Job, answered by Done or Failed; then waits
/// until the runner closes the channel.
///
/// Returns `Ok(())` also when the runner closes the channel without sending a job
/// (a pooled sandbox being destroyed).
pub fn serve<C: Read + Write + AsFd>(channel: &mut C) -> Result<(), AgentError> {
    serve_with(channel, run_job)
}

/// [`serve`], with `run` in place of [`run_job`] (a VM's init adds what only it can
/// tell to the outcome).
pub fn serve_with<C, F>(channel: &mut C, run: F) -> Result<(), AgentError>
where
    C: Read + Write + AsFd,
    F: FnOnce(&Job, Option<Prepared>) -> Result<JobOutcome, JobError>,
{
    shield()?;
    frame::write(channel, &AgentMessage::Ready)?;
    let mut prepared = None;
    match await_job(channel, &mut prepared)? {
        Next::Job(job) => answer(channel, &job, prepared, run),
        Next::Snapshot => fail(channel, "this sandbox cannot be snapshotted".into()),
        Next::Closed => Ok(()),
    }
}

/// The host side of a VM that can be snapshotted: the agent connects to it (again after
/// a restore), and a restored VM gets fresh entropy and the time from it.
pub trait Restorable {
    /// The channel to the runner.
    type Channel: Read + Write + AsFd;
    /// Connects to the runner once; fails while the runner is not listening.
    fn connect(&mut self) -> io::Result<Self::Channel>;
    /// Applies what a restored VM gets first: mixes the entropy into the kernel's random
    /// pool, credited, reseeds its generator, and sets the clock.
    fn restored(&mut self, fresh: &Reseed) -> io::Result<()>;
}

/// How often the agent tries to reach the runner, and how long it waits between tries
/// (counted in tries, not by the clock, which a restore can move).
const CONNECT_TRIES: u32 = 12_000;
const CONNECT_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);

/// [`serve_with`] for a VM the runner may snapshot: the agent connects to the runner
/// itself, and on a [`Snapshot`](sandbox_protocol::agent::Snapshot) (before any Prepare)
/// answers Ready, lets the channel go and connects again. Every VM restored from the
/// snapshot arrives there: it expects a Reseed, feeds it to the kernel, answers Ready,
/// and serves the rest as [`serve_with`] does.
pub fn serve_restorable<G, F>(guest: &mut G, run: F) -> Result<(), AgentError>
where
    G: Restorable,
    F: FnOnce(&Job, Option<Prepared>) -> Result<JobOutcome, JobError>,
{
    shield()?;
    let mut channel = connect(guest)?;
    frame::write(&mut channel, &AgentMessage::Ready)?;
    let mut prepared = None;
    let mut next = await_job(&mut channel, &mut prepared)?;
    if let Next::Snapshot = next {
        if prepared.is_some() {
            // A started interpreter would carry its random state into every restore.
            return fail(&mut channel, "a Snapshot after a Prepare".into());
        }
        frame::write(&mut channel, &AgentMessage::Ready)?;
        drop(channel);
        channel = connect(guest)?;
        match frame::read::<_, RunnerMessage>(&mut channel)? {
            Some(RunnerMessage::Reseed(r)) if r.reseed.len() >= Reseed::MIN_BYTES => {
                guest.restored(&r).map_err(AgentError::Reseed)?;
            }
            Some(_) => {
                return fail(
                    &mut channel,
                    format!(
                        "a restored VM expects a Reseed of at least {} bytes first",
                        Reseed::MIN_BYTES
                    ),
                )
            }
            None => return Ok(()),
        }
        frame::write(&mut channel, &AgentMessage::Ready)?;
        next = await_job(&mut channel, &mut prepared)?;
    }
    match next {
        Next::Job(job) => answer(&mut channel, &job, prepared, run),
        Next::Snapshot => fail(&mut channel, "a second Snapshot".into()),
        Next::Closed => Ok(()),
    }
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

/// Where the program runs as the agent's user (a VM guest), this alone keeps it from
/// opening /proc/1/mem and rewriting the agent; elsewhere it is a second bar. The
/// program's own processes become dumpable again at exec.
fn shield() -> Result<(), AgentError> {
    nix::sys::prctl::set_dumpable(false).map_err(AgentError::Dumpable)
}

/// What came before the job.
enum Next {
    /// The job.
    Job(Job),
    /// A snapshot is to be taken.
    Snapshot,
    /// The runner closed the channel (a pooled sandbox being destroyed), or the agent
    /// refused a message and said so.
    Closed,
}

/// Reads messages until the job or a snapshot notice, starting the interpreter on a
/// Prepare.
fn await_job<C: Read + Write>(
    channel: &mut C,
    prepared: &mut Option<Prepared>,
) -> Result<Next, AgentError> {
    let mut started = false;
    loop {
        match frame::read::<_, RunnerMessage>(channel)? {
            None => return Ok(Next::Closed),
            Some(RunnerMessage::Job(job)) => return Ok(Next::Job(job)),
            Some(RunnerMessage::Snapshot(_)) => return Ok(Next::Snapshot),
            Some(RunnerMessage::Reseed(_)) => {
                fail(channel, "a Reseed outside a restore".into())?;
                return Ok(Next::Closed);
            }
            Some(RunnerMessage::Prepare(_)) if started => {
                fail(channel, "a second Prepare".into())?;
                return Ok(Next::Closed);
            }
            Some(RunnerMessage::Prepare(p)) => match prepare(p.prepare) {
                Ok(interpreter) => {
                    started = true;
                    *prepared = interpreter;
                    frame::write(channel, &AgentMessage::Ready)?;
                }
                Err(e) => {
                    fail(
                        channel,
                        format!("starting the {} interpreter: {e}", p.prepare),
                    )?;
                    return Ok(Next::Closed);
                }
            },
        }
    }
}

/// Runs the job, answers, and waits for the runner to let go of the sandbox.
fn answer<C, F>(
    channel: &mut C,
    job: &Job,
    prepared: Option<Prepared>,
    run: F,
) -> Result<(), AgentError>
where
    C: Read + Write + AsFd,
    F: FnOnce(&Job, Option<Prepared>) -> Result<JobOutcome, JobError>,
{
    let answered = Arc::new(AtomicBool::new(false));
    let watcher = watch_for_hangup(channel.as_fd(), answered.clone())?;
    let answer = match run(job, prepared) {
        Ok(outcome) => AgentMessage::Done(outcome),
        Err(e) => AgentMessage::Failed {
            message: e.to_string(),
        },
    };
    answered.store(true, Ordering::SeqCst);
    frame::write(channel, &answer)?;
    // Every process of the job is gone by now. Stay until the runner closes the
    // channel: the sandbox's teardown (a namespace's, a VM's) then happens when the
    // runner destroys it, not while the answer is on its way to the caller.
    let _ = watcher.join();
    Ok(())
}

/// While the job runs the runner sends nothing more; end of file means it is gone, and
/// nobody would read the answer: end the sandbox now rather than at the timeout. As PID 1,
/// exiting ends every process of the namespace (in a VM, the VM). Once `answered` is
/// set, end of file is the runner letting go of the sandbox: the thread just ends.
fn watch_for_hangup(
    channel: BorrowedFd<'_>,
    answered: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, AgentError> {
    let mut watcher = File::from(channel.try_clone_to_owned().map_err(AgentError::Watch)?);
    std::thread::Builder::new()
        .name("hangup".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match watcher.read(&mut buf) {
                    Ok(0) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                    Ok(_) => continue, // nothing is expected; ignore it
                }
            }
            if answered.load(Ordering::SeqCst) {
                return;
            }
            if nix::unistd::getpid() == nix::unistd::Pid::from_raw(1) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(-1),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::process::exit(1);
        })
        .map_err(AgentError::Watch)
}

fn fail<C: Write>(channel: &mut C, message: String) -> Result<(), AgentError> {
    frame::write(channel, &AgentMessage::Failed { message })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_protocol::agent::Snapshot;
    use sandbox_protocol::Lang;
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;

    /// A runner stand-in's address, and what the agent fed its "kernel".
    struct Host {
        socket: PathBuf,
        connects: usize,
        reseeded: Vec<u8>,
        clock: u64,
    }

    impl Restorable for Host {
        type Channel = UnixStream;
        fn connect(&mut self) -> io::Result<UnixStream> {
            let channel = UnixStream::connect(&self.socket)?;
            self.connects += 1;
            Ok(channel)
        }
        fn restored(&mut self, fresh: &Reseed) -> io::Result<()> {
            self.reseeded.extend_from_slice(&fresh.reseed);
            self.clock = fresh.unix_time_ms;
            Ok(())
        }
    }

    fn job() -> Job {
        Job {
            lang: Lang::Bash,
            code: "echo restored".into(),
            timeout_ms: 1000,
            stdout_cap: 100,
            stderr_cap: 100,
        }
    }

    /// Stands in for the interpreter: the exchange is what is tested here.
    fn echo(job: &Job, _: Option<Prepared>) -> Result<JobOutcome, JobError> {
        Ok(JobOutcome {
            stdout: job.code.clone(),
            stderr: String::new(),
            exit_code: 0,
            signal: None,
            duration_ms: 0,
            timed_out: false,
            stdout_truncated: false,
            stderr_truncated: false,
            oom_killed: None,
        })
    }

    fn expect(channel: &mut UnixStream, want: &AgentMessage) {
        let got: AgentMessage = frame::read(channel).unwrap().expect("a message");
        assert_eq!(&got, want);
    }

    /// The agent's thread: what serving returned, and the host it served.
    type Agent = std::thread::JoinHandle<(Result<(), AgentError>, Host)>;

    fn serve_in_background(dir: &std::path::Path) -> (UnixListener, Agent) {
        let socket = dir.join("agent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let agent = std::thread::spawn(move || {
            let mut host = Host {
                socket,
                connects: 0,
                reseeded: Vec::new(),
                clock: 0,
            };
            (serve_restorable(&mut host, echo), host)
        });
        (listener, agent)
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("agent-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The template's side: Ready, Snapshot, Ready; the agent then lets the channel go.
    fn snapshot_template(listener: &UnixListener) -> UnixStream {
        let (mut template, _) = listener.accept().unwrap();
        expect(&mut template, &AgentMessage::Ready);
        let notice = RunnerMessage::Snapshot(Snapshot { snapshot: true });
        frame::write(&mut template, &notice).unwrap();
        expect(&mut template, &AgentMessage::Ready);
        template
    }

    #[test]
    fn a_restored_agent_reconnects_takes_the_reseed_and_serves_its_job() {
        let dir = temp_dir("restore");
        let (listener, agent) = serve_in_background(&dir);
        let mut template = snapshot_template(&listener);
        assert!(frame::read::<_, AgentMessage>(&mut template)
            .unwrap()
            .is_none());
        // The restored VM: it connects again and wants entropy before anything else.
        let (mut restored, _) = listener.accept().unwrap();
        let entropy: Vec<u8> = (0..Reseed::MIN_BYTES as u8).collect();
        let reseed = RunnerMessage::Reseed(Reseed {
            reseed: entropy.clone(),
            unix_time_ms: 1_800_000_000_000,
        });
        frame::write(&mut restored, &reseed).unwrap();
        expect(&mut restored, &AgentMessage::Ready);
        frame::write(&mut restored, &RunnerMessage::Job(job())).unwrap();
        expect(
            &mut restored,
            &AgentMessage::Done(echo(&job(), None).unwrap()),
        );
        drop(restored);
        let (result, host) = agent.join().unwrap();
        result.unwrap();
        assert_eq!(host.connects, 2);
        assert_eq!(host.reseeded, entropy);
        assert_eq!(host.clock, 1_800_000_000_000);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_restored_agent_refuses_a_job_before_its_reseed() {
        let dir = temp_dir("no-reseed");
        let (listener, agent) = serve_in_background(&dir);
        snapshot_template(&listener);
        let (mut restored, _) = listener.accept().unwrap();
        let short = RunnerMessage::Reseed(Reseed {
            reseed: vec![7; 4],
            unix_time_ms: 1,
        });
        frame::write(&mut restored, &short).unwrap();
        let got: AgentMessage = frame::read(&mut restored).unwrap().unwrap();
        assert!(
            matches!(&got, AgentMessage::Failed { message } if message.contains("Reseed")),
            "{got:?}"
        );
        let (result, host) = agent.join().unwrap();
        result.unwrap();
        assert!(host.reseeded.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_sandbox_served_without_restore_refuses_a_snapshot_and_a_reseed() {
        for message in [
            RunnerMessage::Snapshot(Snapshot { snapshot: true }),
            RunnerMessage::Reseed(Reseed {
                reseed: vec![0; Reseed::MIN_BYTES],
                unix_time_ms: 1,
            }),
        ] {
            let (mut runner, mut agent_end) = UnixStream::pair().unwrap();
            let agent = std::thread::spawn(move || serve_with(&mut agent_end, echo));
            expect(&mut runner, &AgentMessage::Ready);
            frame::write(&mut runner, &message).unwrap();
            let got: AgentMessage = frame::read(&mut runner).unwrap().unwrap();
            assert!(matches!(got, AgentMessage::Failed { .. }), "{got:?}");
            agent.join().unwrap().unwrap();
        }
    }
}
