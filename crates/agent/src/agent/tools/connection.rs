//! One connection of a program to the agent's socket: one call. The program writes one
//! line (a [`ProgramCall`](sandbox_protocol::tools::ProgramCall)), the agent writes one
//! line back (a [`ToolAnswer`]) and closes it. Non-blocking both ways: a program that
//! sends nothing, or reads nothing, holds up nobody but itself.

use sandbox_protocol::tools::{ToolAnswer, MAX_RESULT_BYTES};
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

/// The longest line a call may take: its arguments at their most, and room for the
/// rest of the call.
pub(super) const MAX_LINE: usize = MAX_RESULT_BYTES + 64 * 1024;

/// Where a connection is in its one call.
#[derive(Debug)]
pub(super) enum State {
    /// The program is writing its call: what came so far.
    Reading(Vec<u8>),
    /// The call went to the runner under this id; the answer has not come yet.
    Waiting(String),
    /// The answer is being written: the line, and how much of it went out.
    Writing(Vec<u8>, usize),
    /// Over: the connection is closed when it is let go.
    Done,
}

/// What a read of a connection brought.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Received {
    /// Its line, whole.
    Line(Vec<u8>),
    /// Not yet a line.
    More,
    /// A line longer than [`MAX_LINE`].
    TooLong,
    /// The program closed it (or it failed) before its line ended.
    Closed,
}

/// A program's connection.
pub(super) struct Connection {
    stream: UnixStream,
    pub(super) state: State,
}

impl Connection {
    /// A connection just accepted, made non-blocking.
    pub(super) fn new(stream: UnixStream) -> io::Result<Connection> {
        stream.set_nonblocking(true)?;
        Ok(Connection {
            stream,
            state: State::Reading(Vec::new()),
        })
    }

    /// The stream, to poll.
    pub(super) fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Reads what the program wrote, up to the end of its line or [`MAX_LINE`].
    pub(super) fn read(&mut self) -> Received {
        let State::Reading(line) = &mut self.state else {
            return Received::More;
        };
        let mut buf = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Received::Closed,
                Ok(n) => {
                    let start = line.len();
                    line.extend_from_slice(&buf[..n]);
                    if let Some(end) = line[start..].iter().position(|b| *b == b'\n') {
                        line.truncate(start + end);
                        return Received::Line(std::mem::take(line));
                    }
                    if line.len() > MAX_LINE {
                        return Received::TooLong;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Received::More,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Received::Closed,
            }
        }
    }

    /// Starts writing `answer` (as one line) and writes what the socket takes now.
    pub(super) fn answer(&mut self, answer: &ToolAnswer) {
        let mut line = serde_json::to_vec(answer).unwrap_or_else(|e| {
            serde_json::to_vec(&ToolAnswer::error(format!("tools: the answer: {e}")))
                .unwrap_or_default()
        });
        line.push(b'\n');
        self.state = State::Writing(line, 0);
        self.write();
    }

    /// Writes what the socket takes of the answer; [`State::Done`] once it is all out,
    /// or the program is gone.
    pub(super) fn write(&mut self) {
        let State::Writing(line, sent) = &mut self.state else {
            return;
        };
        while *sent < line.len() {
            match self.stream.write(&line[*sent..]) {
                Ok(0) => break,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        self.state = State::Done;
    }
}
