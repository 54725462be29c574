//! Live output of a run: what the agent of a streamed job sends while the program runs
//! ([`AgentMessage::Output`](sandbox_protocol::agent::AgentMessage::Output), and the
//! calls of a program that was offered tools), on its way to the caller.
//!
//! The caller makes a [`channel`] (or, for a run with tools, [`channel_with_tools`]) and
//! hands its [`LiveOutput`] down with the job (a run's lease, a session's run); the agent
//! channel's exchange ([`run_job`](crate::backend::channel::run_job)) asks the agent to
//! stream only when it has one, and sends it each chunk, within the job's caps
//! ([`Allowance`]), and each tool call it lets through ([`tools`]), before the job's
//! outcome comes back. The caller reads the [`Event`]s from the other end and makes them
//! lines ([`text`]). A VM sandbox streams as a process sandbox does: its guest's init
//! relays the agent's frames (output, calls and their answers) while the job runs.
//!
//! The channel is unbounded so that the exchange never waits for a slow caller (the
//! agent would wait for the exchange, and the program for the agent); what it can hold
//! is bounded by the job's caps (and a run's calls by [`tools`]' bounds).

pub mod text;
pub mod tools;

use sandbox_protocol::agent::Job;
use sandbox_protocol::process::Stream;
use sandbox_protocol::tools::ToolCallLine;
use tokio::sync::mpsc;
use tools::ToolLink;

/// Bytes a program wrote to one of its streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Which stream.
    pub stream: Stream,
    /// The bytes, as the agent read them.
    pub bytes: Vec<u8>,
}

/// What the exchange hands the caller while a job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Output.
    Output(Chunk),
    /// A call of the program to an offered tool, to answer at
    /// `POST /runs/{runId}/tool-results/{id}`.
    ToolCall(ToolCallLine),
}

/// Where a streamed job's output (and its tool calls) go as they come. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LiveOutput {
    events: mpsc::UnboundedSender<Event>,
    tools: Option<ToolLink>,
}

/// The receiving end of a [`LiveOutput`]: it ends once every sender is dropped (the run
/// is over).
pub type LiveChunks = mpsc::UnboundedReceiver<Event>;

/// A live output and the end its events come out of.
pub fn channel() -> (LiveOutput, LiveChunks) {
    let (events, rx) = mpsc::unbounded_channel();
    (
        LiveOutput {
            events,
            tools: None,
        },
        rx,
    )
}

/// A live output for a run whose program may call the tools of `link`, and the end its
/// events come out of.
pub fn channel_with_tools(link: ToolLink) -> (LiveOutput, LiveChunks) {
    let (events, rx) = mpsc::unbounded_channel();
    let live = LiveOutput {
        events,
        tools: Some(link),
    };
    (live, rx)
}

impl LiveOutput {
    /// Hands on a chunk; one the caller no longer reads is dropped.
    pub fn send(&self, chunk: Chunk) {
        let _ = self.events.send(Event::Output(chunk));
    }

    /// Hands on a tool call let through (see [`ToolLink::admit`]).
    pub fn tool_call(&self, line: ToolCallLine) {
        let _ = self.events.send(Event::ToolCall(line));
    }

    /// The run's tool calls, if its program was offered tools.
    pub fn tools(&self) -> Option<&ToolLink> {
        self.tools.as_ref()
    }
}

/// What the agent of a job may still send of each stream: what the job keeps of it
/// (its caps). The agent sends no more; one that did would not get more through.
#[derive(Debug, Clone, Copy)]
pub struct Allowance {
    stdout: usize,
    stderr: usize,
}

impl Allowance {
    /// The allowance of `job`: its caps.
    pub fn of(job: &Job) -> Self {
        Allowance {
            stdout: job.stdout_cap,
            stderr: job.stderr_cap,
        }
    }

    /// The part of `bytes` of `stream` within what is left, taken from it.
    pub fn take(&mut self, stream: Stream, mut bytes: Vec<u8>) -> Vec<u8> {
        let left = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        bytes.truncate(*left);
        *left -= bytes.len();
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowance_lets_through_each_stream_s_cap_and_no_more() {
        let mut allowance = Allowance {
            stdout: 5,
            stderr: 2,
        };
        assert_eq!(allowance.take(Stream::Stdout, b"abc".to_vec()), b"abc");
        assert_eq!(allowance.take(Stream::Stdout, b"defg".to_vec()), b"de");
        assert_eq!(allowance.take(Stream::Stdout, b"h".to_vec()), b"");
        assert_eq!(allowance.take(Stream::Stderr, b"xyz".to_vec()), b"xy");
    }

    #[tokio::test]
    async fn the_chunks_end_when_every_live_output_is_dropped() {
        let (live, mut chunks) = channel();
        let chunk = Chunk {
            stream: Stream::Stdout,
            bytes: b"1".to_vec(),
        };
        let clone = live.clone();
        live.send(chunk.clone());
        drop(live);
        clone.send(chunk.clone());
        drop(clone);
        assert_eq!(chunks.recv().await, Some(Event::Output(chunk.clone())));
        assert_eq!(chunks.recv().await, Some(Event::Output(chunk)));
        assert_eq!(chunks.recv().await, None);
    }
}
