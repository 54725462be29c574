//! What a streamed job ([`Job::stream`]) exchanges with the runner while it runs: after
//! each read of the program's pipes (its compile step's too), the bytes just kept within
//! the job's caps go to a [`LiveOutput`]; so do the program's calls to the tools its job
//! offers ([`Job::tools`]), whose answers come back on the same channel. The serve
//! loop's one ([`OutputFrames`]) writes [`AgentMessage::Output`] and
//! [`AgentMessage::ToolCall`] frames to the channel, before the job's answer, and reads
//! the runner's [`RunnerMessage::ToolReply`] frames when the watch loop's poll finds
//! the channel readable; a job that is not streamed gets [`Unstreamed`], which sends
//! nothing and takes no call.
//!
//! The job runs on the thread that holds the channel, so the frames are written and
//! read from there, between reads of the pipes: no lock, no thread. A runner that stops
//! reading holds the program up (its pipe fills) no longer than the runner's own wait
//! for the answer, which it bounds. (The hang-up watch, `hangup.rs`, polls the channel
//! for its end only, and never reads.)
//!
//! [`Job::stream`]: sandbox_protocol::agent::Job::stream
//! [`Job::tools`]: sandbox_protocol::agent::Job::tools

use sandbox_protocol::agent::{encode_bytes, AgentMessage, RunnerMessage, OUTPUT_CHUNK_BYTES};
use sandbox_protocol::frame::{self, FrameError};
use sandbox_protocol::process::Stream;
use sandbox_protocol::tools::{ToolCall, ToolReply};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

/// Where a job's output and its program's tool calls go as they come, and where the
/// calls' answers come from.
pub trait LiveOutput {
    /// `bytes` were just read from the program's `stream` and kept (never empty).
    fn output(&mut self, stream: Stream, bytes: &[u8]);

    /// Sends a program's call on to the runner; false when it cannot be (the job takes
    /// no calls, or the channel broke): the call then fails in the program.
    fn call(&mut self, call: &ToolCall) -> bool {
        let _ = call;
        false
    }

    /// What becomes readable when the runner sends something (an answer to a call);
    /// none when nothing is to be read (no answer comes, or the channel ended).
    fn replies(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// Reads the runner's next message once [`replies`](Self::replies) is readable: an
    /// answer to a call, or none (anything else is dropped; an end is remembered).
    fn reply(&mut self) -> Option<ToolReply> {
        None
    }
}

/// A job that is not streamed: its output goes only into its answer, and it takes no
/// call.
pub struct Unstreamed;

impl LiveOutput for Unstreamed {
    fn output(&mut self, _stream: Stream, _bytes: &[u8]) {}
}

/// The runner's channel while a streamed job runs: writes output as
/// [`AgentMessage::Output`] frames of at most [`OUTPUT_CHUNK_BYTES`] and calls as
/// [`AgentMessage::ToolCall`] frames, and reads the answers. The first write that
/// fails ends the sending (the channel is broken; [`finish`](Self::finish) says why);
/// the channel's end stops the reading.
pub(crate) struct OutputFrames<'a, W> {
    channel: &'a mut W,
    failed: Option<FrameError>,
    /// The runner closed its side (or it failed): no answer will come.
    ended: bool,
}

impl<'a, W: Write> OutputFrames<'a, W> {
    pub(crate) fn new(channel: &'a mut W) -> Self {
        OutputFrames {
            channel,
            failed: None,
            ended: false,
        }
    }

    /// Why the channel broke, if it did.
    pub(crate) fn finish(self) -> Result<(), FrameError> {
        self.failed.map_or(Ok(()), Err)
    }

    /// Writes `bytes` of `stream` as Output frames.
    fn write_output(&mut self, stream: Stream, bytes: &[u8]) {
        for chunk in bytes.chunks(OUTPUT_CHUNK_BYTES) {
            let message = AgentMessage::Output {
                stream,
                data: encode_bytes(chunk),
            };
            if !self.send(&message) {
                return;
            }
        }
    }

    /// Writes `message`, unless the channel broke before; whether it went out.
    fn send(&mut self, message: &AgentMessage) -> bool {
        if self.failed.is_some() {
            return false;
        }
        match frame::write(self.channel, message) {
            Ok(()) => true,
            Err(e) => {
                self.failed = Some(e);
                false
            }
        }
    }
}

impl<W: Read + Write + AsFd> LiveOutput for OutputFrames<'_, W> {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        self.write_output(stream, bytes);
    }

    fn call(&mut self, call: &ToolCall) -> bool {
        self.send(&AgentMessage::ToolCall(call.clone()))
    }

    fn replies(&self) -> Option<BorrowedFd<'_>> {
        (!self.ended && self.failed.is_none()).then(|| self.channel.as_fd())
    }

    /// Reads one frame (the runner writes each whole, so a readable channel holds one
    /// on its way).
    fn reply(&mut self) -> Option<ToolReply> {
        match frame::read::<_, RunnerMessage>(self.channel) {
            Ok(Some(RunnerMessage::ToolReply(reply))) => Some(reply),
            Ok(Some(other)) => {
                eprintln!("sandbox-agent: dropped {other:?} from the runner during a job");
                None
            }
            Ok(None) => {
                self.ended = true;
                None
            }
            Err(e) => {
                // Out of step or broken: the hang-up watch, or the answer's write, ends it.
                eprintln!("sandbox-agent: reading the runner during a job: {e}");
                self.ended = true;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_protocol::agent::decode_bytes;

    #[test]
    fn output_goes_out_in_frames_of_at_most_a_chunk() {
        let mut channel = Vec::new();
        let mut frames = OutputFrames::new(&mut channel);
        let big = vec![b'x'; OUTPUT_CHUNK_BYTES * 2 + 5];
        frames.write_output(Stream::Stdout, &big);
        frames.write_output(Stream::Stderr, b"e");
        frames.finish().expect("written");
        let mut read = channel.as_slice();
        let mut got = Vec::new();
        while let Some(message) = frame::read::<_, AgentMessage>(&mut read).expect("a frame") {
            let AgentMessage::Output { stream, data } = message else {
                panic!("an output frame, got {message:?}");
            };
            got.push((stream, decode_bytes(&data).expect("base64").len()));
        }
        assert_eq!(
            got,
            [
                (Stream::Stdout, OUTPUT_CHUNK_BYTES),
                (Stream::Stdout, OUTPUT_CHUNK_BYTES),
                (Stream::Stdout, 5),
                (Stream::Stderr, 1),
            ]
        );
    }

    /// A channel that takes `left` bytes, then fails.
    struct Breaking {
        left: usize,
    }

    impl Write for Breaking {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_broken_channel_stops_the_sending_and_says_why() {
        let mut channel = Breaking { left: 10 };
        let mut frames = OutputFrames::new(&mut channel);
        frames.write_output(Stream::Stdout, b"first");
        frames.write_output(Stream::Stdout, b"second");
        assert!(matches!(frames.finish(), Err(FrameError::Io(_))));
        assert_eq!(channel.left, 0);
    }

    #[test]
    fn calls_go_out_as_frames_and_their_answers_come_back() {
        use sandbox_protocol::tools::ToolAnswer;
        use std::os::unix::net::UnixStream;
        let (mut agent, mut runner) = UnixStream::pair().unwrap();
        let mut frames = OutputFrames::new(&mut agent);
        let call = ToolCall {
            id: "1-1".into(),
            server: "tracker".into(),
            tool: "search".into(),
            arguments: serde_json::json!({"q": 1}),
        };
        assert!(frames.call(&call));
        let got: AgentMessage = frame::read(&mut runner).unwrap().unwrap();
        assert_eq!(got, AgentMessage::ToolCall(call));
        let reply = ToolReply {
            tool_result: "1-1".into(),
            answer: ToolAnswer::error("no"),
        };
        frame::write(&mut runner, &RunnerMessage::ToolReply(reply.clone())).unwrap();
        let prepare = sandbox_protocol::agent::Prepare {
            prepare: sandbox_protocol::Lang::BASH,
            recipe: sandbox_protocol::language::Recipe {
                file: "main.sh".into(),
                compile: Vec::new(),
                run: Vec::new(),
                env: Default::default(),
                compile_timeout_ms: 0,
                loader: None,
                memory_mb: None,
            },
            warm_imports: Vec::new(),
            rehearse: false,
        };
        frame::write(&mut runner, &RunnerMessage::Prepare(prepare)).unwrap();
        drop(runner);
        assert!(frames.replies().is_some());
        assert_eq!(frames.reply(), Some(reply));
        assert_eq!(frames.reply(), None, "anything else is dropped");
        assert!(frames.replies().is_some());
        assert_eq!(frames.reply(), None);
        assert!(
            frames.replies().is_none(),
            "the channel ended: nothing to poll"
        );
    }
}
