//! Capturing one output stream up to a cap, and handing on what was kept as it comes
//! (a streamed job's live output).

use std::io::{self, Read};
use std::process::{ChildStderr, ChildStdout};

/// The read end of a program's stdout or stderr, and what was read from it.
pub(crate) struct Capture<R> {
    pipe: Option<R>,
    kept: Vec<u8>,
    /// How many of the kept bytes were handed on ([`unsent`](Capture::unsent)).
    sent: usize,
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

    /// A capture whose first bytes are `kept` (a compile step's output, handed on as it
    /// came), counted against the cap.
    pub(crate) fn after(pipe: R, cap: usize, kept: Vec<u8>) -> Self {
        Capture {
            pipe: Some(pipe),
            sent: kept.len(),
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

    /// The kept bytes not handed on yet, marked handed on.
    pub(crate) fn unsent(&mut self) -> &[u8] {
        let from = std::mem::replace(&mut self.sent, self.kept.len());
        &self.kept[from..]
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;

    impl Pipe for File {}

    /// A pipe's read end in a capture of `cap` after `kept`, and its write end.
    fn capture(cap: usize, kept: &[u8]) -> (Capture<File>, File) {
        let (read, write) = nix::unistd::pipe().expect("a pipe");
        (
            Capture::after(File::from(read), cap, kept.to_vec()),
            File::from(write),
        )
    }

    #[test]
    fn what_was_kept_is_handed_on_once_and_never_past_the_cap() {
        let (mut capture, mut writer) = capture(8, b"cc");
        assert_eq!(
            capture.unsent(),
            b"",
            "what came before was handed on as it came"
        );
        let mut buf = [0u8; 64];
        writer.write_all(b"abc").unwrap();
        assert!(!capture.read_some(&mut buf).unwrap());
        assert_eq!(capture.unsent(), b"abc");
        assert_eq!(capture.unsent(), b"");
        writer.write_all(b"defghij").unwrap();
        assert!(capture.read_some(&mut buf).unwrap(), "over the cap");
        assert_eq!(capture.unsent(), b"def");
        drop(writer);
        assert!(!capture.read_some(&mut buf).unwrap());
        assert_eq!(capture.unsent(), b"");
        assert_eq!(capture.into_bytes(), b"ccabcdef");
    }
}
