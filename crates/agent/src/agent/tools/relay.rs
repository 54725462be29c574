//! A job's calls, while its program runs: the agent listens on its socket, reads one
//! call from each connection, checks it against the offer and the run's budget, sends
//! it to the runner ([`LiveOutput::call`]) and writes the runner's answer back on the
//! call's connection when it comes ([`Relay::answer`]).
//!
//! Everything is non-blocking and driven by the watch loop's poll (`watch.rs`), on the
//! thread that holds the channel: [`Relay::interest`] says what to poll, and
//! [`Relay::serve`] does what poll found ready. Bounds: at most [`MAX_CALLS_WAITING`]
//! connections open at once (the listener is not polled while they are: the next
//! connections wait in its backlog), a call's line at most
//! [`MAX_LINE`], at most [`MAX_CALLS_PER_RUN`] calls a run
//! (the next are refused at once). A call that is not one, or names a tool the offer
//! does not, is refused on its connection and never reaches the runner. When the relay
//! is let go (the job's end, however it ended), every call still waiting is answered
//! with an error, every connection closed, and the socket removed: a connection after
//! the job is refused.

use super::connection::{Connection, Received, State, MAX_LINE};
use crate::agent::live::LiveOutput;
use nix::poll::PollFlags;
use sandbox_protocol::tools::{
    ProgramCall, ToolAnswer, ToolCall, ToolReply, ToolsOffer, MAX_CALLS_PER_RUN, MAX_CALLS_WAITING,
    MAX_RESULT_BYTES,
};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// What one polled descriptor of the relay is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The listening socket.
    Listener,
    /// The connection at this index.
    Connection(usize),
}

/// A job's socket and its calls.
pub(crate) struct Relay {
    listener: UnixListener,
    path: PathBuf,
    /// The offered tools, by server.
    offered: HashMap<String, HashSet<String>>,
    connections: Vec<Connection>,
    /// The run's number, the first part of its calls' ids.
    run: u64,
    /// Calls sent to the runner so far.
    calls: usize,
}

impl Relay {
    /// Listens at `path` (anyone in the sandbox may connect) for the calls of the run
    /// numbered `run` to the tools of `offer`.
    pub(crate) fn open(offer: &ToolsOffer, path: &Path, run: u64) -> io::Result<Relay> {
        match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(path)?;
        let relay = Relay {
            listener,
            path: path.to_owned(),
            offered: offer
                .servers
                .iter()
                .map(|s| {
                    let tools = s.tools.iter().map(|t| t.name.clone()).collect();
                    (s.name.clone(), tools)
                })
                .collect(),
            connections: Vec::new(),
            run,
            calls: 0,
        };
        // Set after the bind, whatever the umask: the program (another user) connects.
        fs::set_permissions(path, fs::Permissions::from_mode(0o666))?;
        relay.listener.set_nonblocking(true)?;
        Ok(relay)
    }

    /// The descriptors to poll, and for what: the listener while fewer than
    /// [`MAX_CALLS_WAITING`] connections are open, each connection being read or
    /// written.
    pub(crate) fn interest(&self) -> Vec<(Slot, BorrowedFd<'_>, PollFlags)> {
        let mut fds = Vec::with_capacity(self.connections.len() + 1);
        if self.connections.len() < MAX_CALLS_WAITING {
            fds.push((Slot::Listener, self.listener.as_fd(), PollFlags::POLLIN));
        }
        for (i, connection) in self.connections.iter().enumerate() {
            let events = match connection.state {
                State::Reading(_) => PollFlags::POLLIN,
                State::Writing(..) => PollFlags::POLLOUT,
                State::Waiting(_) | State::Done => continue,
            };
            fds.push((Slot::Connection(i), connection.stream().as_fd(), events));
        }
        fds
    }

    /// Serves what poll found ready (`ready`: the slots of [`interest`](Self::interest)
    /// with events): reads calls and sends them on to `live`, writes answers, takes new
    /// connections.
    pub(crate) fn serve(&mut self, ready: &[Slot], live: &mut dyn LiveOutput) {
        let mut accept = false;
        for slot in ready {
            match *slot {
                Slot::Listener => accept = true,
                Slot::Connection(i) => self.serve_connection(i, live),
            }
        }
        self.connections.retain(|c| !matches!(c.state, State::Done));
        if accept {
            self.accept();
        }
    }

    /// Writes the runner's answer on its call's connection; a reply to no waiting call
    /// (a call already refused, a late or forged id) is dropped.
    pub(crate) fn answer(&mut self, reply: ToolReply) {
        let waiting = self
            .connections
            .iter_mut()
            .find(|c| matches!(&c.state, State::Waiting(id) if *id == reply.tool_result));
        if let Some(connection) = waiting {
            connection.answer(&reply.answer);
        }
        self.connections.retain(|c| !matches!(c.state, State::Done));
    }

    fn serve_connection(&mut self, i: usize, live: &mut dyn LiveOutput) {
        let Some(connection) = self.connections.get_mut(i) else {
            return;
        };
        match connection.state {
            State::Writing(..) => connection.write(),
            State::Reading(_) => match connection.read() {
                Received::More => {}
                Received::Closed => connection.state = State::Done,
                Received::TooLong => connection.answer(&ToolAnswer::error(format!(
                    "tools: a call takes at most {MAX_LINE} bytes"
                ))),
                Received::Line(line) => match self.call(&line, live) {
                    Ok(id) => self.connections[i].state = State::Waiting(id),
                    Err(message) => self.connections[i].answer(&ToolAnswer::error(message)),
                },
            },
            State::Waiting(_) | State::Done => {}
        }
    }

    /// Takes the connections waiting in the backlog, up to [`MAX_CALLS_WAITING`] open.
    fn accept(&mut self) {
        while self.connections.len() < MAX_CALLS_WAITING {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if let Ok(connection) = Connection::new(stream) {
                        self.connections.push(connection);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    }

    /// Checks the call on `line` and sends it to the runner: its id, or why it is
    /// refused.
    fn call(&mut self, line: &[u8], live: &mut dyn LiveOutput) -> Result<String, String> {
        let call: ProgramCall = serde_json::from_slice(line).map_err(|e| {
            format!(
                "tools: a call is one line of JSON {{\"server\", \"tool\", \"arguments\"}} ({e})"
            )
        })?;
        let offered = self
            .offered
            .get(&call.server)
            .is_some_and(|tools| tools.contains(&call.tool));
        if !offered {
            return Err(format!(
                "tools: this run is offered no tool {:?} of a server {:?}",
                call.tool, call.server
            ));
        }
        let arguments = match call.arguments {
            Value::Null => Value::Object(Default::default()),
            arguments @ Value::Object(_) => arguments,
            _ => return Err("tools: a call's arguments are a JSON object".into()),
        };
        if arguments.to_string().len() > MAX_RESULT_BYTES {
            return Err(format!(
                "tools: a call's arguments take at most {MAX_RESULT_BYTES} bytes of JSON"
            ));
        }
        if self.calls >= MAX_CALLS_PER_RUN {
            return Err(format!(
                "tools: this run made {MAX_CALLS_PER_RUN} calls, the most a run may make"
            ));
        }
        self.calls += 1;
        let id = format!("{}-{}", self.run, self.calls);
        let sent = live.call(&ToolCall {
            id: id.clone(),
            server: call.server,
            tool: call.tool,
            arguments,
        });
        if !sent {
            return Err("tools: the call could not be sent on (the run is ending)".into());
        }
        Ok(id)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        let ended = ToolAnswer::error("tools: the run ended before the call was answered");
        for connection in &mut self.connections {
            if matches!(connection.state, State::Waiting(_)) {
                connection.answer(&ended);
            }
        }
    }
}
