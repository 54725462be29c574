//! The exchange driven from the runner's side, with a worker that echoes: restores,
//! refusals and sessions, without a real sandbox.

use super::*;
use sandbox_protocol::agent::{decode_bytes, Snapshot};
use sandbox_protocol::process::Stream;
use sandbox_protocol::Lang;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

/// A runner stand-in's address, and what the agent fed its "kernel".
struct Host {
    socket: PathBuf,
    /// New connections after a restore (vsock), or the same channel (a serial port).
    reconnects: bool,
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
    fn reconnects(&self) -> bool {
        self.reconnects
    }
    fn restored(&mut self, fresh: &Reseed) -> io::Result<()> {
        self.reseeded.extend_from_slice(&fresh.reseed);
        self.clock = fresh.unix_time_ms;
        Ok(())
    }
}

fn job() -> Job {
    Job {
        lang: Lang::BASH,
        recipe: sandbox_protocol::language::Recipe {
            file: "main.sh".into(),
            compile: Vec::new(),
            run: vec!["bash".into(), "{file}".into()],
            env: Default::default(),
            compile_timeout_ms: 0,
            loader: None,
            memory_mb: None,
        },
        code: "echo restored".into(),
        timeout_ms: 1000,
        stdout_cap: 100,
        stderr_cap: 100,
        session: false,
        sigstop_between_runs: false,
        outputs: None,
        python_paths: Vec::new(),
        stream: false,
        tools: None,
    }
}

/// Stands in for the interpreter: the exchange is what is tested here. Its output, the
/// code, goes to `live` too, in two parts.
fn echo(job: &Job, _: &mut Kept, live: &mut dyn LiveOutput) -> Result<JobOutcome, JobError> {
    let (first, second) = job.code.as_bytes().split_at(job.code.len() / 2);
    live.output(Stream::Stdout, first);
    live.output(Stream::Stderr, second);
    Ok(JobOutcome {
        stdout: job.code.clone(),
        stderr: String::new(),
        exit_code: 0,
        signal: None,
        duration_ms: 0,
        timed_out: false,
        compile_error: false,
        stdout_truncated: false,
        stderr_truncated: false,
        oom_killed: None,
        outputs: Vec::new(),
        outputs_truncated: false,
        state_lost: false,
        processes_running: 0,
    })
}

fn expect(channel: &mut UnixStream, want: &AgentMessage) {
    let got: AgentMessage = frame::read(channel).unwrap().expect("a message");
    assert_eq!(&got, want);
}

/// The agent's thread: what serving returned, and the host it served.
type Agent = std::thread::JoinHandle<(Result<(), AgentError>, Host)>;

fn serve_in_background(dir: &std::path::Path) -> (UnixListener, Agent) {
    serve_restorable_in_background(dir, true)
}

fn serve_restorable_in_background(
    dir: &std::path::Path,
    reconnects: bool,
) -> (UnixListener, Agent) {
    let socket = dir.join("agent.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let agent = std::thread::spawn(move || {
        let mut host = Host {
            socket,
            reconnects,
            connects: 0,
            reseeded: Vec::new(),
            clock: 0,
        };
        (serve_restorable(&mut host, &mut Local::new(echo)), host)
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
    let notice = RunnerMessage::Snapshot(Snapshot {
        snapshot: true,
        session: false,
    });
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
        &AgentMessage::Done(echo(&job(), &mut Kept::default(), &mut Unstreamed).unwrap()),
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
    refused_for_want_of_a_reseed(&mut restored, agent, &dir);
}

/// The agent refuses what came instead of its Reseed, and ends with nothing applied.
fn refused_for_want_of_a_reseed(channel: &mut UnixStream, agent: Agent, dir: &std::path::Path) {
    let got: AgentMessage = frame::read(channel).unwrap().unwrap();
    assert!(
        matches!(&got, AgentMessage::Failed { message } if message.contains("Reseed")),
        "{got:?}"
    );
    let (result, host) = agent.join().unwrap();
    result.unwrap();
    assert!(host.reseeded.is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_sandbox_served_without_restore_refuses_a_snapshot_and_a_reseed() {
    for message in [
        RunnerMessage::Snapshot(Snapshot {
            snapshot: true,
            session: false,
        }),
        RunnerMessage::Snapshot(Snapshot {
            snapshot: true,
            session: true,
        }),
        RunnerMessage::Reseed(Reseed {
            reseed: vec![0; Reseed::MIN_BYTES],
            unix_time_ms: 1,
        }),
    ] {
        let (mut runner, mut agent_end) = UnixStream::pair().unwrap();
        let agent = std::thread::spawn(move || serve_with(&mut agent_end, &mut Local::new(echo)));
        expect(&mut runner, &AgentMessage::Ready);
        frame::write(&mut runner, &message).unwrap();
        let got: AgentMessage = frame::read(&mut runner).unwrap().unwrap();
        assert!(matches!(got, AgentMessage::Failed { .. }), "{got:?}");
        agent.join().unwrap().unwrap();
    }
}

fn session_job(code: &str) -> RunnerMessage {
    RunnerMessage::Job(Job {
        code: code.into(),
        session: true,
        outputs: None,
        ..job()
    })
}

fn done(code: &str) -> AgentMessage {
    AgentMessage::Done(
        echo(
            &Job {
                code: code.into(),
                ..job()
            },
            &mut Kept::default(),
            &mut Unstreamed,
        )
        .unwrap(),
    )
}

#[test]
fn a_session_s_sandbox_answers_every_job_until_the_channel_closes() {
    let (mut runner, mut agent_end) = UnixStream::pair().unwrap();
    let agent = std::thread::spawn(move || serve_with(&mut agent_end, &mut Local::new(echo)));
    expect(&mut runner, &AgentMessage::Ready);
    for code in ["one", "two", "three"] {
        frame::write(&mut runner, &session_job(code)).unwrap();
        expect(&mut runner, &done(code));
    }
    drop(runner);
    agent.join().unwrap().unwrap();
}

#[test]
fn a_session_refuses_a_one_shot_job_and_a_one_shot_sandbox_a_second_job() {
    let (mut runner, mut agent_end) = UnixStream::pair().unwrap();
    let agent = std::thread::spawn(move || serve_with(&mut agent_end, &mut Local::new(echo)));
    expect(&mut runner, &AgentMessage::Ready);
    frame::write(&mut runner, &session_job("one")).unwrap();
    expect(&mut runner, &done("one"));
    frame::write(&mut runner, &RunnerMessage::Job(job())).unwrap();
    let got: AgentMessage = frame::read(&mut runner).unwrap().unwrap();
    assert!(matches!(got, AgentMessage::Failed { .. }), "{got:?}");
    agent.join().unwrap().unwrap();

    let (mut runner, mut agent_end) = UnixStream::pair().unwrap();
    let agent = std::thread::spawn(move || serve_with(&mut agent_end, &mut Local::new(echo)));
    expect(&mut runner, &AgentMessage::Ready);
    frame::write(&mut runner, &RunnerMessage::Job(job())).unwrap();
    expect(&mut runner, &done("echo restored"));
    frame::write(&mut runner, &session_job("two")).unwrap();
    runner.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(
        frame::read::<_, AgentMessage>(&mut runner)
            .unwrap()
            .is_none(),
        "no answer after the one job"
    );
    agent.join().unwrap().unwrap();
}

#[test]
fn a_streamed_job_s_output_comes_before_its_answer_and_an_unstreamed_one_s_never() {
    let (mut runner, mut agent_end) = UnixStream::pair().unwrap();
    let agent = std::thread::spawn(move || serve_with(&mut agent_end, &mut Local::new(echo)));
    expect(&mut runner, &AgentMessage::Ready);
    let streamed = Job {
        code: "live!".into(),
        session: true,
        stream: true,
        ..job()
    };
    frame::write(&mut runner, &RunnerMessage::Job(streamed)).unwrap();
    for (stream, bytes) in [(Stream::Stdout, "li"), (Stream::Stderr, "ve!")] {
        let got: AgentMessage = frame::read(&mut runner).unwrap().expect("a message");
        let AgentMessage::Output { stream: s, data } = got else {
            panic!("output first, got {got:?}");
        };
        assert_eq!((s, decode_bytes(&data).unwrap()), (stream, bytes.into()));
    }
    expect(&mut runner, &done("live!"));
    frame::write(&mut runner, &session_job("quiet")).unwrap();
    expect(&mut runner, &done("quiet"));
    drop(runner);
    agent.join().unwrap().unwrap();
}

/// Sends `message` and expects `answer`.
fn call(channel: &mut UnixStream, message: &RunnerMessage, answer: &AgentMessage) {
    frame::write(channel, message).unwrap();
    expect(channel, answer);
}

/// A session on a serial port (no reconnection) that has served its first job.
fn one_job_served(dir: &std::path::Path) -> (UnixListener, Agent, UnixStream) {
    let (listener, agent) = serve_restorable_in_background(dir, false);
    let (mut runner, _) = listener.accept().unwrap();
    expect(&mut runner, &AgentMessage::Ready);
    call(&mut runner, &session_job("one"), &done("one"));
    (listener, agent, runner)
}

fn reseed(first: u8, unix_time_ms: u64) -> RunnerMessage {
    RunnerMessage::Reseed(Reseed {
        reseed: (first..first + Reseed::MIN_BYTES as u8).collect(),
        unix_time_ms,
    })
}

fn session_snapshot() -> RunnerMessage {
    RunnerMessage::Snapshot(Snapshot {
        snapshot: true,
        session: true,
    })
}

/// A session's VM saved between its calls, twice, on a serial port (QEMU): the same
/// channel on, Ready to the notice, the Reseed applied before the next job is served.
#[test]
fn a_session_saved_on_its_port_takes_a_reseed_before_its_next_call_each_time() {
    let dir = temp_dir("session-port");
    let (_listener, agent, mut runner) = one_job_served(&dir);
    for (round, time) in [(1u8, 1_800_000_000_000), (100, 1_900_000_000_000)] {
        call(&mut runner, &session_snapshot(), &AgentMessage::Ready);
        call(&mut runner, &reseed(round, time), &AgentMessage::Ready);
        call(&mut runner, &session_job("after"), &done("after"));
    }
    drop(runner);
    let (result, host) = agent.join().unwrap();
    result.unwrap();
    assert_eq!(host.connects, 1, "a serial port is opened once");
    assert_eq!(host.reseeded.len(), 2 * Reseed::MIN_BYTES);
    assert_eq!(host.clock, 1_900_000_000_000);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same over vsock (Firecracker): the agent lets the old connection go and serves
/// the restored session on a new one; a session saved before its first job too.
#[test]
fn a_session_saved_over_vsock_reconnects_and_serves_on() {
    let dir = temp_dir("session-vsock");
    let (listener, agent) = serve_restorable_in_background(&dir, true);
    let (mut runner, _) = listener.accept().unwrap();
    expect(&mut runner, &AgentMessage::Ready);
    call(&mut runner, &session_snapshot(), &AgentMessage::Ready);
    assert!(frame::read::<_, AgentMessage>(&mut runner)
        .unwrap()
        .is_none());
    let (mut restored, _) = listener.accept().unwrap();
    call(&mut restored, &reseed(1, 5), &AgentMessage::Ready);
    call(&mut restored, &session_job("one"), &done("one"));
    call(&mut restored, &session_snapshot(), &AgentMessage::Ready);
    let (mut again, _) = listener.accept().unwrap();
    call(&mut again, &reseed(50, 6), &AgentMessage::Ready);
    call(&mut again, &session_job("two"), &done("two"));
    drop(again);
    let (result, host) = agent.join().unwrap();
    result.unwrap();
    assert_eq!(host.connects, 3);
    assert_eq!(host.clock, 6);
    let _ = std::fs::remove_dir_all(&dir);
}

/// After a session's snapshot notice the restored VM serves nothing before its Reseed,
/// and a template's notice (unmarked) is refused once a job ran.
#[test]
fn a_saved_session_refuses_a_call_before_its_reseed_and_a_template_notice() {
    let dir = temp_dir("session-refusals");
    let (_listener, agent, mut runner) = one_job_served(&dir);
    call(&mut runner, &session_snapshot(), &AgentMessage::Ready);
    frame::write(&mut runner, &session_job("too early")).unwrap();
    refused_for_want_of_a_reseed(&mut runner, agent, &dir);

    let dir = temp_dir("session-template-notice");
    let (_listener, agent, mut runner) = one_job_served(&dir);
    let template = RunnerMessage::Snapshot(Snapshot {
        snapshot: true,
        session: false,
    });
    frame::write(&mut runner, &template).unwrap();
    let got: AgentMessage = frame::read(&mut runner).unwrap().unwrap();
    assert!(
        matches!(&got, AgentMessage::Failed { message } if message.contains("template")),
        "{got:?}"
    );
    agent.join().unwrap().0.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
