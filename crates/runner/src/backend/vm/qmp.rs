//! A client of QEMU's machine protocol (QMP) over the unix socket the runner listens on
//! and QEMU connects to at start: the greeting, capability negotiation (at the first
//! command: until then QEMU sends nothing but its greeting, not even events), commands
//! answered by `return` or `error` (events in between are skipped), and a file
//! descriptor handed to QEMU by name (`getfd`, with the descriptor in the same
//! message), which is how the runner gives QEMU the file of a save or a restore
//! without QEMU ever opening a path of the runner's.
//!
//! Every line QEMU sends is bounded ([`MAX_LINE`]); the caller bounds the time.

use serde_json::{json, Value};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Interest};
use tokio::net::UnixStream;

/// The longest line QEMU may send (its answers to our few commands are far shorter).
const MAX_LINE: u64 = 1024 * 1024;

/// Why a QMP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// The socket failed.
    #[error("QMP socket: {0}")]
    Io(#[from] io::Error),
    /// QEMU closed the connection.
    #[error("QEMU closed its QMP connection before answering {0}")]
    Closed(String),
    /// QEMU sent a line longer than [`MAX_LINE`].
    #[error("QEMU sent a QMP line over {MAX_LINE} bytes")]
    TooLong,
    /// QEMU sent something that is not JSON, or not QMP.
    #[error("QEMU sent {0:?}, which is not a QMP message")]
    Malformed(String),
    /// QEMU refused a command.
    #[error("QEMU refused {command}: {class}: {desc}")]
    Refused {
        /// The command.
        command: String,
        /// QEMU's error class.
        class: String,
        /// QEMU's message.
        desc: String,
    },
}

/// A QMP connection to one QEMU.
#[derive(Debug)]
pub struct Qmp {
    stream: BufReader<UnixStream>,
    negotiated: bool,
}

impl Qmp {
    /// The connection QEMU made, negotiated at its first command.
    pub fn new(stream: UnixStream) -> Qmp {
        Qmp {
            stream: BufReader::new(stream),
            negotiated: false,
        }
    }

    /// Reads QEMU's greeting and enters command mode, once.
    async fn negotiate(&mut self) -> Result<(), QmpError> {
        if self.negotiated {
            return Ok(());
        }
        let greeting = self.message("the greeting").await?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Malformed(greeting.to_string()));
        }
        self.command("qmp_capabilities", json!({})).await?;
        self.negotiated = true;
        Ok(())
    }

    /// Runs `command` with `arguments`; what it returned.
    pub async fn execute(&mut self, command: &str, arguments: Value) -> Result<Value, QmpError> {
        self.negotiate().await?;
        self.command(command, arguments).await
    }

    async fn command(&mut self, command: &str, arguments: Value) -> Result<Value, QmpError> {
        let line = request(command, arguments);
        let written = self.stream.get_mut().write_all(line.as_bytes()).await;
        if let Err(e) = written {
            return Err(match e.kind() {
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                    QmpError::Closed(command.to_owned())
                }
                _ => e.into(),
            });
        }
        self.answer(command).await
    }

    /// Hands `fd` to QEMU under `name` (`getfd`: the descriptor travels with the
    /// command, as `SCM_RIGHTS`); QEMU holds its own duplicate.
    pub async fn send_fd(&mut self, name: &str, fd: BorrowedFd<'_>) -> Result<(), QmpError> {
        self.negotiate().await?;
        let line = request("getfd", json!({ "fdname": name }));
        let stream = self.stream.get_ref();
        let mut sent = 0;
        while sent < line.len() {
            stream.writable().await?;
            // The descriptor goes with the first byte: QEMU takes it on the read that
            // brings the command's start.
            let rights = [fd.as_raw_fd()];
            let rest = &line.as_bytes()[sent..];
            let written = stream.try_io(Interest::WRITABLE, || {
                send_with_rights(stream.as_raw_fd(), rest, (sent == 0).then_some(&rights[..]))
            });
            match written {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            }
        }
        self.answer("getfd").await.map(drop)
    }

    /// The answer to `command`, past any events.
    async fn answer(&mut self, command: &str) -> Result<Value, QmpError> {
        loop {
            let message = self.message(command).await?;
            if let Some(value) = message.get("return") {
                return Ok(value.clone());
            }
            if let Some(error) = message.get("error") {
                let text = |key: &str| {
                    error
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                return Err(QmpError::Refused {
                    command: command.to_owned(),
                    class: text("class"),
                    desc: text("desc"),
                });
            }
            if message.get("event").is_none() {
                return Err(QmpError::Malformed(message.to_string()));
            }
        }
    }

    /// The next message, one JSON object per line.
    async fn message(&mut self, awaited: &str) -> Result<Value, QmpError> {
        let mut line = Vec::new();
        let read = (&mut self.stream)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await?;
        if read == 0 {
            return Err(QmpError::Closed(awaited.to_owned()));
        }
        if line.last() != Some(&b'\n') {
            return match read as u64 >= MAX_LINE {
                true => Err(QmpError::TooLong),
                false => Err(QmpError::Closed(awaited.to_owned())),
            };
        }
        serde_json::from_slice::<Value>(&line)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| QmpError::Malformed(String::from_utf8_lossy(&line).trim().to_owned()))
    }
}

/// One command as QMP takes it: a JSON object on a line.
fn request(command: &str, arguments: Value) -> String {
    let mut line = json!({ "execute": command, "arguments": arguments }).to_string();
    line.push('\n');
    line
}

/// One `sendmsg` of `bytes`, with `rights` as `SCM_RIGHTS` when given.
fn send_with_rights(socket: i32, bytes: &[u8], rights: Option<&[i32]>) -> io::Result<usize> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let iov = [io::IoSlice::new(bytes)];
    let control: Vec<ControlMessage> = rights.map(ControlMessage::ScmRights).into_iter().collect();
    sendmsg::<()>(socket, &iov, &control, MsgFlags::MSG_NOSIGNAL, None).map_err(io::Error::from)
}

#[cfg(test)]
mod tests;
