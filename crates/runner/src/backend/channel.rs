//! The runner's side of the agent channel, the same for every backend: sending
//! [`RunnerMessage`]s, reading [`AgentMessage`]s, and the exchanges built from them.

use super::archive::{ArchiveRefusal, ArchiveSummary};
use crate::languages::Language;
use crate::live::tools::ToolLink;
use crate::live::{Allowance, Chunk, LiveOutput};
use sandbox_archive::{Limits, BLOCK};
use sandbox_protocol::agent::{
    decode_bytes, encode_bytes, AgentMessage, FileFailure, FileRequest, Job, JobOutcome, Prepare,
    Reseed, RunnerMessage, Snapshot, ARCHIVE_CHUNK_BYTES,
};
use sandbox_protocol::frame::{self, FrameError};
use sandbox_protocol::language::LoaderKind;
use sandbox_protocol::process::ProcessRequest;
use std::io;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why an exchange with the agent failed.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// The stream failed, or carried a malformed frame.
    #[error("agent channel: {0}")]
    Frame(#[from] FrameError),
    /// The agent said it could not do what was asked.
    #[error("the agent could not run the job: {0}")]
    AgentFailed(String),
    /// The agent sent output that is not base64.
    #[error("the agent sent output that is not base64: {0}")]
    BadOutput(String),
    /// The agent answered with a message that does not fit the exchange.
    #[error("the agent sent {got} where {expected} was expected")]
    Unexpected {
        /// What came instead.
        got: &'static str,
        /// What was expected.
        expected: &'static str,
    },
    /// The agent closed the channel.
    #[error("the agent closed the channel before {0}")]
    Closed(&'static str),
    /// A session's agent did not answer in time: its channel is out of step, so the
    /// session cannot go on.
    #[error("the sandbox did not report within {0:?}")]
    Unresponsive(Duration),
}

/// Sends one message.
pub async fn send<W: AsyncWrite + Unpin>(
    w: &mut W,
    message: &RunnerMessage,
) -> Result<(), ChannelError> {
    let bytes = frame::encode(message)?;
    w.write_all(&bytes).await.map_err(FrameError::Io)?;
    Ok(())
}

/// Reads one message; `None` when the stream ends cleanly before a frame.
pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<AgentMessage>, ChannelError> {
    let mut header = [0u8; 4];
    match r.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(FrameError::Io(e).into()),
    }
    let mut payload = vec![0u8; frame::payload_len(header)?];
    r.read_exact(&mut payload).await.map_err(FrameError::Io)?;
    Ok(Some(frame::decode(&payload)?))
}

/// Reads the agent's Ready.
pub async fn expect_ready<R: AsyncRead + Unpin>(r: &mut R) -> Result<(), ChannelError> {
    match read(r).await? {
        Some(AgentMessage::Ready) => Ok(()),
        Some(AgentMessage::Failed { message }) => Err(ChannelError::AgentFailed(message)),
        Some(other) => Err(unexpected(&other, "Ready")),
        None => Err(ChannelError::Closed("Ready")),
    }
}

/// Asks the agent to start the loader of `language` (a Python one with `warm_imports`
/// imported), and waits until it has.
pub async fn prepare<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    language: &Language,
    warm_imports: &[String],
) -> Result<(), ChannelError> {
    let python = language.recipe.loader.as_ref().map(|l| l.kind) == Some(LoaderKind::Python);
    let request = Prepare {
        prepare: language.name().clone(),
        recipe: language.recipe.clone(),
        warm_imports: if python {
            warm_imports.to_vec()
        } else {
            Vec::new()
        },
        rehearse: false,
    };
    send(s, &RunnerMessage::Prepare(request)).await?;
    expect_ready(s).await
}

/// Tells the agent of a VM that a snapshot is coming, and waits for its Ready: a
/// template's (it then lets the channel go and keeps reconnecting), or with `session`
/// a session's VM about to be saved whole (it then waits for the restored VM's Reseed,
/// see [`reseed`]).
pub async fn announce_snapshot<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    session: bool,
) -> Result<(), ChannelError> {
    let notice = Snapshot {
        snapshot: true,
        session,
    };
    send(s, &RunnerMessage::Snapshot(notice)).await?;
    expect_ready(s).await
}

/// Sends a restored VM's agent its fresh entropy and the time (it answers Ready).
pub async fn reseed<S: AsyncWrite + Unpin>(
    s: &mut S,
    entropy: Vec<u8>,
    unix_time_ms: u64,
) -> Result<(), ChannelError> {
    let message = RunnerMessage::Reseed(Reseed {
        reseed: entropy,
        unix_time_ms,
    });
    send(s, &message).await
}

/// Sends the job and waits for its outcome, for at most its run time ([`Job::run_time`]:
/// its timeout and its compile step's) and `grace`; past that, an outcome that says so
/// (the agent enforces the timeout itself, so this only happens when it cannot), or for a
/// session's job an error (its sandbox must go).
///
/// With `live`, the agent is asked to stream the job ([`Job::stream`]) and each chunk of
/// output it sends goes there, within the job's caps, before the outcome is returned;
/// without, it is asked for none.
pub async fn run_job<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    job: &Job,
    grace: Duration,
    live: Option<&LiveOutput>,
) -> Result<JobOutcome, ChannelError> {
    let limit = job.run_time() + grace;
    match tokio::time::timeout(limit, exchange(s, job, live)).await {
        Ok(result) => result,
        Err(_) if job.session => Err(ChannelError::Unresponsive(limit)),
        Err(_) => Ok(unresponsive(limit)),
    }
}

/// Sends the job, then reads its output (a streamed job's) until its outcome; a job
/// whose program may call tools takes the exchange of [`tools`].
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    job: &Job,
    live: Option<&LiveOutput>,
) -> Result<JobOutcome, ChannelError> {
    let tools = live.and_then(LiveOutput::tools);
    let job = Job {
        stream: live.is_some(),
        tools: job.tools.clone().filter(|_| tools.is_some()),
        ..job.clone()
    };
    if let (Some(live), Some(link)) = (live, tools) {
        return tools::exchange(s, &job, live, link).await;
    }
    send(s, &RunnerMessage::Job(job.clone())).await?;
    read_outcome(s, &job, live, None).await
}

/// Reads the agent's frames until the job's outcome: its output (a streamed job's) goes
/// to `live`, within the job's caps; its tool calls (with `tools`) to `live` too, once
/// admitted (a refused one is answered at once).
async fn read_outcome<R: AsyncRead + Unpin>(
    r: &mut R,
    job: &Job,
    live: Option<&LiveOutput>,
    tools: Option<&ToolLink>,
) -> Result<JobOutcome, ChannelError> {
    let mut allowance = Allowance::of(job);
    loop {
        match read(r).await? {
            Some(AgentMessage::Output { stream, data }) if job.stream => {
                let bytes =
                    decode_bytes(&data).map_err(|e| ChannelError::BadOutput(e.to_string()))?;
                let bytes = allowance.take(stream, bytes);
                if let (Some(live), false) = (live, bytes.is_empty()) {
                    live.send(Chunk { stream, bytes });
                }
            }
            Some(AgentMessage::ToolCall(call)) if tools.is_some() => {
                let admitted = tools.and_then(|link| link.admit(call));
                if let (Some(live), Some(line)) = (live, admitted) {
                    live.tool_call(line);
                }
            }
            Some(AgentMessage::Done(outcome)) => return Ok(outcome),
            Some(AgentMessage::Failed { message }) => {
                return Err(ChannelError::AgentFailed(message))
            }
            Some(other) => return Err(unexpected(&other, "a result")),
            None => return Err(ChannelError::Closed("a result")),
        }
    }
}

/// Sends a session's file operation and waits for its answer: Stored, File, Files or
/// FileFailed. Not bounded here: the agent's file operations cannot block, and the
/// session bounds the wait without leaving the channel out of step
/// ([`Sessions::file`](crate::session::Sessions::file)).
pub async fn file<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    request: FileRequest,
) -> Result<AgentMessage, ChannelError> {
    send(s, &RunnerMessage::File(request)).await?;
    match read(s).await? {
        Some(
            answer @ (AgentMessage::Stored
            | AgentMessage::File { .. }
            | AgentMessage::Files { .. }
            | AgentMessage::FileFailed { .. }),
        ) => Ok(answer),
        Some(AgentMessage::Failed { message }) => Err(ChannelError::AgentFailed(message)),
        Some(other) => Err(unexpected(&other, "a file answer")),
        None => Err(ChannelError::Closed("a file answer")),
    }
}

/// Sends a session's process operation and waits for its answer (Process). Not bounded
/// here, as for [`file`]: the agent answers every process operation at once.
pub async fn process<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    request: ProcessRequest,
) -> Result<AgentMessage, ChannelError> {
    send(s, &RunnerMessage::Process(request)).await?;
    match read(s).await? {
        Some(answer @ AgentMessage::Process { .. }) => Ok(answer),
        Some(AgentMessage::Failed { message }) => Err(ChannelError::AgentFailed(message)),
        Some(other) => Err(unexpected(&other, "a process answer")),
        None => Err(ChannelError::Closed("a process answer")),
    }
}

/// What an archive operation gives: the summary or a refusal, or the sandbox's failure.
pub type ArchiveOutcome = Result<Result<ArchiveSummary, ArchiveRefusal>, ChannelError>;

/// Writes the session archive of the sandbox at the other end of `s` to the file `to`
/// (created 0600, truncated), at most `max_bytes` of it.
pub async fn pack_to<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    to: &Path,
    max_bytes: u64,
) -> ArchiveOutcome {
    let opened = tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(to)
        .await;
    let mut file = match opened {
        Ok(file) => file,
        Err(e) => return Ok(Err(ArchiveRefusal::Io(e))),
    };
    pack(s, max_bytes, &mut file).await
}

/// Restores the session archive in the file `from` (one the runner wrote, or checked
/// with `sandbox_archive::normalize`) into the sandbox at the other end of `s`. The
/// agent checks it again, within what the file's size allows: its bytes, and an entry
/// per 512-byte block at most.
pub async fn unpack_from<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    from: &Path,
) -> ArchiveOutcome {
    let opened = match tokio::fs::File::open(from).await {
        Ok(file) => file.metadata().await.map(|m| (file, m.len())),
        Err(e) => Err(e),
    };
    let (mut file, len) = match opened {
        Ok(opened) => opened,
        Err(e) => return Ok(Err(ArchiveRefusal::Io(e))),
    };
    let limits = Limits {
        max_bytes: len,
        max_entries: len / BLOCK,
    };
    unpack(s, &mut file, limits).await
}

/// Asks the agent for the session archive ([`FileRequest::Pack`]) and writes its chunks
/// to `out` as they come, at most `max_bytes`: past that, or when `out` fails, the rest
/// of the chunks are read and dropped (the channel stays in step) and the refusal says
/// why. Not bounded in time here, as for [`file`].
pub async fn pack<S, W>(s: &mut S, max_bytes: u64, out: &mut W) -> ArchiveOutcome
where
    S: AsyncRead + AsyncWrite + Unpin,
    W: AsyncWrite + Unpin,
{
    send(s, &RunnerMessage::File(FileRequest::Pack { max_bytes })).await?;
    let mut written = 0u64;
    let mut refusal = None;
    loop {
        match read(s).await? {
            Some(AgentMessage::ArchiveChunk { data }) => {
                let bytes =
                    decode_bytes(&data).map_err(|e| ChannelError::BadOutput(e.to_string()))?;
                if refusal.is_some() {
                    continue;
                }
                written += bytes.len() as u64;
                if written > max_bytes {
                    refusal = Some(ArchiveRefusal::TooLarge { limit: max_bytes });
                } else if let Err(e) = out.write_all(&bytes).await {
                    refusal = Some(ArchiveRefusal::Io(e));
                }
            }
            Some(AgentMessage::Packed { entries, .. }) => {
                let flushed = out.flush().await.map_err(ArchiveRefusal::Io);
                return Ok(match refusal.map_or(flushed, Err) {
                    Ok(()) => Ok(ArchiveSummary {
                        bytes: written,
                        entries,
                    }),
                    Err(refusal) => Err(refusal),
                });
            }
            Some(AgentMessage::FileFailed { reason, message }) => {
                return Ok(Err(refusal.unwrap_or(match reason {
                    FileFailure::TooLarge => ArchiveRefusal::TooLarge { limit: max_bytes },
                    _ => ArchiveRefusal::Refused(message),
                })))
            }
            Some(AgentMessage::Failed { message }) => {
                return Err(ChannelError::AgentFailed(message))
            }
            Some(other) => return Err(unexpected(&other, "a piece of an archive")),
            None => return Err(ChannelError::Closed("a piece of an archive")),
        }
    }
}

/// Sends the session archive read from `input` to the agent to restore
/// ([`FileRequest::Unpack`], within `limits`), in chunks, and waits for its one answer.
/// When `input` fails, the archive is ended there (the agent then refuses it) and the
/// refusal says why. Not bounded in time here, as for [`file`].
pub async fn unpack<S, R>(s: &mut S, input: &mut R, limits: Limits) -> ArchiveOutcome
where
    S: AsyncRead + AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
{
    let request = FileRequest::Unpack {
        max_bytes: limits.max_bytes,
        max_entries: limits.max_entries,
    };
    send(s, &RunnerMessage::File(request)).await?;
    let mut failed = None;
    let mut chunk = fill(input, &mut failed).await;
    loop {
        let next = match failed {
            None => fill(input, &mut failed).await,
            Some(_) => Vec::new(),
        };
        let last = next.is_empty();
        let data = encode_bytes(&chunk);
        send(
            s,
            &RunnerMessage::File(FileRequest::UnpackChunk { data, last }),
        )
        .await?;
        if last {
            break;
        }
        chunk = next;
    }
    let answer = match read(s).await? {
        Some(AgentMessage::Unpacked { bytes, entries }) => Ok(ArchiveSummary { bytes, entries }),
        Some(AgentMessage::FileFailed { message, .. }) => Err(ArchiveRefusal::Refused(message)),
        Some(AgentMessage::Failed { message }) => return Err(ChannelError::AgentFailed(message)),
        Some(other) => return Err(unexpected(&other, "an unpack's answer")),
        None => return Err(ChannelError::Closed("an unpack's answer")),
    };
    Ok(match failed {
        Some(e) => Err(ArchiveRefusal::Io(e)),
        None => answer,
    })
}

/// Reads up to [`ARCHIVE_CHUNK_BYTES`] from `input` (fewer only at its end); a failure
/// ends it, kept in `failed`.
async fn fill<R: AsyncRead + Unpin>(input: &mut R, failed: &mut Option<io::Error>) -> Vec<u8> {
    let mut chunk = Vec::with_capacity(ARCHIVE_CHUNK_BYTES);
    while chunk.len() < ARCHIVE_CHUNK_BYTES {
        let mut limited = (&mut *input).take((ARCHIVE_CHUNK_BYTES - chunk.len()) as u64);
        match limited.read_buf(&mut chunk).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                *failed = Some(e);
                break;
            }
        }
    }
    chunk
}

fn unexpected(got: &AgentMessage, expected: &'static str) -> ChannelError {
    let got = match got {
        AgentMessage::Ready => "Ready",
        AgentMessage::Done(_) => "a result",
        AgentMessage::Failed { .. } => "a failure",
        AgentMessage::Stored
        | AgentMessage::File { .. }
        | AgentMessage::Files { .. }
        | AgentMessage::FileFailed { .. } => "a file answer",
        AgentMessage::Process { .. } => "a process answer",
        AgentMessage::Output { .. } => "output",
        AgentMessage::ToolCall(_) => "a tool call",
        AgentMessage::ArchiveChunk { .. } => "a piece of an archive",
        AgentMessage::Packed { .. } | AgentMessage::Unpacked { .. } => "an archive's answer",
    };
    ChannelError::Unexpected { got, expected }
}

/// The report made for an agent that did not answer in time.
fn unresponsive(limit: Duration) -> JobOutcome {
    JobOutcome {
        stdout: String::new(),
        stderr: format!(
            "sandbox-runner: the sandbox did not report within {limit:?} and was destroyed; \
             its output is lost"
        ),
        exit_code: 128 + libc::SIGKILL,
        signal: Some(libc::SIGKILL),
        duration_ms: limit.as_millis() as u64,
        timed_out: true,
        compile_error: false,
        stdout_truncated: false,
        stderr_truncated: false,
        oom_killed: None,
        outputs: Vec::new(),
        outputs_truncated: false,
        state_lost: true,
        processes_running: 0,
    }
}

mod tools;

#[cfg(test)]
mod archive_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live;
    use sandbox_protocol::process::Stream;
    use sandbox_protocol::Lang;

    /// A session's job whose streams keep 4 bytes each.
    fn job() -> Job {
        Job {
            stdout_cap: 4,
            stderr_cap: 4,
            session: true,
            ..crate::pool::tests::job(Lang::BASH)
        }
    }

    fn done() -> JobOutcome {
        let mut outcome = unresponsive(Duration::ZERO);
        outcome.stderr = "done".into();
        outcome
    }

    fn output(stream: Stream, bytes: &[u8]) -> AgentMessage {
        AgentMessage::Output {
            stream,
            data: encode_bytes(bytes),
        }
    }

    /// An agent that reads the job and answers with `answers`; the job it read.
    async fn agent<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, answers: Vec<AgentMessage>) -> Job {
        let mut header = [0u8; 4];
        s.read_exact(&mut header).await.expect("a header");
        let mut payload = vec![0u8; frame::payload_len(header).expect("a length")];
        s.read_exact(&mut payload).await.expect("a payload");
        let Ok(RunnerMessage::Job(job)) = frame::decode(&payload) else {
            panic!("a job");
        };
        for answer in answers {
            let bytes = frame::encode(&answer).expect("encodes");
            s.write_all(&bytes).await.expect("written");
        }
        job
    }

    #[tokio::test]
    async fn a_streamed_job_s_output_goes_to_its_live_output_within_its_caps() {
        let (mut runner, agent_end) = tokio::io::duplex(1 << 16);
        let answers = vec![
            output(Stream::Stdout, b"abc"),
            output(Stream::Stderr, b"e"),
            output(Stream::Stdout, b"defg"),
            AgentMessage::Done(done()),
        ];
        let agent = tokio::spawn(agent(agent_end, answers));
        let (live, mut chunks) = live::channel();
        let outcome = run_job(&mut runner, &job(), Duration::from_secs(5), Some(&live))
            .await
            .expect("an outcome");
        assert_eq!(outcome, done());
        assert!(agent.await.expect("the agent").stream, "asked to stream");
        drop(live);
        let mut got = Vec::new();
        while let Some(event) = chunks.recv().await {
            let crate::live::Event::Output(chunk) = event else {
                panic!("not output: {event:?}");
            };
            got.push((chunk.stream, chunk.bytes));
        }
        assert_eq!(
            got,
            [
                (Stream::Stdout, b"abc".to_vec()),
                (Stream::Stderr, b"e".to_vec()),
                (Stream::Stdout, b"d".to_vec()),
            ],
            "four bytes of stdout at most"
        );
    }

    #[tokio::test]
    async fn output_for_a_job_not_streamed_is_out_of_turn() {
        let (mut runner, agent_end) = tokio::io::duplex(1 << 16);
        let answers = vec![output(Stream::Stdout, b"x"), AgentMessage::Done(done())];
        let agent = tokio::spawn(agent(agent_end, answers));
        let result = run_job(&mut runner, &job(), Duration::from_secs(5), None).await;
        assert!(
            matches!(result, Err(ChannelError::Unexpected { got: "output", .. })),
            "{result:?}"
        );
        assert!(!agent.await.expect("the agent").stream, "asked for none");
    }
}
