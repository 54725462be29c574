//! Capturing one output stream up to a cap.

use std::io::{self, Read};
use std::process::{ChildStderr, ChildStdout};

/// The read end of a program's stdout or stderr, and what was read from it.
pub(crate) struct Capture<R> {
    pipe: Option<R>,
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
}

/// A pipe the agent reads from.
pub(crate) trait Pipe: Read + std::os::fd::AsFd {}
impl Pipe for ChildStdout {}
impl Pipe for ChildStderr {}

impl<R: Pipe> Capture<R> {
    pub(crate) fn new(pipe: R, cap: usize) -> Self {
        Self::after(pipe, cap, Vec::new())
    }

    /// A capture whose first bytes are `kept` (a compile step's output), counted
    /// against the cap.
    pub(crate) fn after(pipe: R, cap: usize, kept: Vec<u8>) -> Self {
        Capture {
            pipe: Some(pipe),
            kept,
            cap,
            truncated: false,
        }
    }

    /// The pipe, while it has not reached end of file.
    pub(crate) fn pipe(&self) -> Option<&R> {
        self.pipe.as_ref()
    }

    /// Reads what is there (one read, which does not block after poll said readable).
    /// Returns true when this read took the stream over its cap.
    pub(crate) fn read_some(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        let Some(pipe) = self.pipe.as_mut() else {
            return Ok(false);
        };
        let n = match pipe.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(false),
            Err(e) => return Err(e),
        };
        if n == 0 {
            self.pipe = None;
            return Ok(false);
        }
        let room = self.cap.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&buf[..n.min(room)]);
        if n > room && !self.truncated {
            self.truncated = true;
            return Ok(true);
        }
        Ok(false)
    }

    /// Takes the pipe away (it is no longer read here).
    pub(crate) fn take_pipe(&mut self) -> Option<R> {
        self.pipe.take()
    }

    /// Whether more than the cap was written.
    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    /// The kept bytes.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.kept
    }

    /// The kept bytes as text (invalid UTF-8 replaced).
    pub(crate) fn into_text(self) -> String {
        String::from_utf8_lossy(&self.kept).into_owned()
    }
}
