//! A streamed job's output as the program writes it ([`Job::stream`]): after each read of
//! the program's pipes (its compile step's too), the bytes just kept within the job's
//! caps go to a [`LiveOutput`] while the job runs. The serve loop's one writes them to
//! the channel as [`AgentMessage::Output`] frames, before the job's answer; a job that
//! is not streamed gets [`Unstreamed`], which does nothing.
//!
//! The job runs on the thread that holds the channel, so the frames are written from
//! there, between reads of the pipes: no lock, no thread. A runner that stops reading
//! holds the program up (its pipe fills) no longer than the runner's own wait for the
//! answer, which it bounds.
//!
//! [`Job::stream`]: sandbox_protocol::agent::Job::stream

use sandbox_protocol::agent::{encode_bytes, AgentMessage, OUTPUT_CHUNK_BYTES};
use sandbox_protocol::frame::{self, FrameError};
use sandbox_protocol::process::Stream;
use std::io::Write;

/// Where a job's output goes as it is read.
pub trait LiveOutput {
    /// `bytes` were just read from the program's `stream` and kept (never empty).
    fn output(&mut self, stream: Stream, bytes: &[u8]);
}

/// A job that is not streamed: its output goes only into its answer.
pub struct Unstreamed;

impl LiveOutput for Unstreamed {
    fn output(&mut self, _stream: Stream, _bytes: &[u8]) {}
}

/// Writes output to the runner's channel as [`AgentMessage::Output`] frames of at most
/// [`OUTPUT_CHUNK_BYTES`]. The first write that fails ends the sending (the channel is
/// broken; [`finish`](Self::finish) says why).
pub(crate) struct OutputFrames<'a, W> {
    channel: &'a mut W,
    failed: Option<FrameError>,
}

impl<'a, W: Write> OutputFrames<'a, W> {
    pub(crate) fn new(channel: &'a mut W) -> Self {
        OutputFrames {
            channel,
            failed: None,
        }
    }

    /// Why the channel broke, if it did.
    pub(crate) fn finish(self) -> Result<(), FrameError> {
        self.failed.map_or(Ok(()), Err)
    }
}

impl<W: Write> LiveOutput for OutputFrames<'_, W> {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        for chunk in bytes.chunks(OUTPUT_CHUNK_BYTES) {
            let message = AgentMessage::Output {
                stream,
                data: encode_bytes(chunk),
            };
            if let Err(e) = frame::write(self.channel, &message) {
                self.failed = Some(e);
                return;
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
        frames.output(Stream::Stdout, &big);
        frames.output(Stream::Stderr, b"e");
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
        frames.output(Stream::Stdout, b"first");
        frames.output(Stream::Stdout, b"second");
        assert!(matches!(frames.finish(), Err(FrameError::Io(_))));
        assert_eq!(channel.left, 0);
    }
}
