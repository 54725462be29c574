//! The template's socket to the runner (descriptor 3, `SOCK_SEQPACKET`): its spec first,
//! the exchange its confinement needs, its ready message, then one request per sandbox.

use super::error::TemplateError;
use super::spec::TemplateSpec;
use sandbox_jail::JailSpec;
use std::io;
use std::os::fd::{OwnedFd, RawFd};

/// The descriptor requests arrive on.
const REQUESTS_FD: RawFd = 3;
/// The largest request read (a jail spec is a few hundred bytes).
const REQUEST_MAX: usize = 64 * 1024;
/// How often, at most, forks whose sandboxes ended are reaped while no request comes.
const REAP_EVERY_MS: u16 = 1000;

/// One request as it arrived.
pub(super) struct Request {
    pub(super) spec: Result<JailSpec, serde_json::Error>,
    pub(super) channel: OwnedFd,
    pub(super) stderr: OwnedFd,
    pub(super) ctl: OwnedFd,
}

impl Request {
    /// Says why on the sandbox's standard error (the runner then finds its control
    /// socket closed).
    pub(super) fn refuse(&self, why: &str) {
        let _ = nix::unistd::write(&self.stderr, format!("{why}\n").as_bytes());
    }
}

/// The template's spec: the first message.
pub(super) fn read_spec() -> Result<TemplateSpec, TemplateError> {
    let mut first = vec![0u8; REQUEST_MAX];
    let n = nix::sys::socket::recv(REQUESTS_FD, &mut first, nix::sys::socket::MsgFlags::empty())
        .map_err(|e| TemplateError::Receive(e.into()))?;
    serde_json::from_slice(&first[..n]).map_err(TemplateError::Spec)
}

/// Sends `tag` to the runner and waits for its answer (one byte, `1`).
pub(super) fn exchange(tag: u8, step: &'static str) -> Result<(), TemplateError> {
    use nix::sys::socket::{recv, send, MsgFlags};
    let failed = |source: io::Error| TemplateError::Confine { step, source };
    send(REQUESTS_FD, &[tag], MsgFlags::empty()).map_err(|e| failed(e.into()))?;
    let mut byte = [0u8; 1];
    match recv(REQUESTS_FD, &mut byte, MsgFlags::empty()) {
        Ok(1) if byte[0] == b'1' => Ok(()),
        Ok(_) => Err(failed(io::ErrorKind::UnexpectedEof.into())),
        Err(e) => Err(failed(e.into())),
    }
}

/// Tells the runner the template is ready, with `message` (its ceilings).
pub(super) fn announce_ready(message: &[u8]) -> Result<(), TemplateError> {
    nix::sys::socket::send(REQUESTS_FD, message, nix::sys::socket::MsgFlags::empty()).map_err(
        |e| TemplateError::Confine {
            step: "announcing itself",
            source: e.into(),
        },
    )?;
    Ok(())
}

/// Whether a request (or end of file) waits, within [`REAP_EVERY_MS`].
pub(super) fn readable() -> Result<bool, TemplateError> {
    use nix::poll::{poll, PollFd, PollFlags};
    // SAFETY: REQUESTS_FD is the request socket, open for the template's whole life.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(REQUESTS_FD) };
    let mut fds = [PollFd::new(borrowed, PollFlags::POLLIN)];
    match poll(&mut fds, REAP_EVERY_MS) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(TemplateError::Receive(e.into())),
    }
}

/// The next request; `None` at end of file. A request without its three descriptors is
/// dropped (the runner then sees its sockets close).
pub(super) fn receive() -> Result<Option<Request>, TemplateError> {
    loop {
        let mut data = vec![0u8; REQUEST_MAX];
        let mut msg = sandbox_jail::fdpass::receive::<3>(REQUESTS_FD, &mut data)
            .map_err(TemplateError::Receive)?;
        if msg.bytes == 0 && msg.fds.is_empty() {
            return Ok(None);
        }
        if msg.fds.len() != 3 || msg.truncated {
            continue;
        }
        let spec = serde_json::from_slice(&data[..msg.bytes]);
        let ctl = msg.fds.pop().expect("three descriptors");
        let stderr = msg.fds.pop().expect("three descriptors");
        let channel = msg.fds.pop().expect("three descriptors");
        return Ok(Some(Request {
            spec,
            channel,
            stderr,
            ctl,
        }));
    }
}
