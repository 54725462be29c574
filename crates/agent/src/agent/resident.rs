//! A session's resident interpreter: one Python, Node, Ruby, Lua or Perl process that runs every
//! program of its language in the session, so that what one run defines (variables,
//! functions, imports) the next one sees.
//!
//! Its loader (`loader/`) reads one request line per run on descriptor 3
//! (`{"path": ..., "session": true, "tools": N}`) and, when the program is done, writes
//! `{"exit": CODE, "run": N}` on descriptor 4, N being the request's `run`. Standard output and error are the same pipes for
//! the interpreter's whole life; by the time the report arrives, everything the
//! program wrote is in them (the loader flushes first), so a run's output is what the
//! agent reads until the report, and what is left in the pipes right after it.

use super::launch::Prepared;
use super::process::Process;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::Pid;
use sandbox_protocol::Lang;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::{ChildStderr, ChildStdout};

/// The longest report line read; a longer one (a program writing on descriptor 4)
/// is not a report.
const REPORT_MAX: usize = 256;

/// A started interpreter that serves the session's runs of its language.
pub(crate) struct Resident {
    lang: Lang,
    child: Process,
    exited: OwnedFd,
    go: File,
    done: File,
    report: Vec<u8>,
    /// The number of the current run, which its report must carry.
    run: u64,
    pub(crate) stdout: Option<ChildStdout>,
    pub(crate) stderr: Option<ChildStderr>,
}

impl Resident {
    /// Makes the interpreter `prepared` resident.
    pub(crate) fn new(prepared: Prepared) -> io::Result<Resident> {
        let (lang, mut child, go, done) = prepared.into_parts();
        fcntl(&done, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        let exited = child.pidfd()?;
        Ok(Resident {
            lang,
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            child,
            exited,
            go,
            done: File::from(done),
            report: Vec::new(),
            run: 0,
        })
    }

    /// Its language.
    pub(crate) fn lang(&self) -> &Lang {
        &self.lang
    }

    /// The interpreter's process.
    pub(crate) fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Readable once the interpreter has exited.
    pub(crate) fn exited(&self) -> BorrowedFd<'_> {
        self.exited.as_fd()
    }

    /// Readable when a report (or part of one) is waiting.
    pub(crate) fn done(&self) -> BorrowedFd<'_> {
        self.done.as_fd()
    }

    /// Whether the interpreter still runs.
    pub(crate) fn alive(&self) -> bool {
        let mut fds = [PollFd::new(self.exited.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
    }

    /// Asks the interpreter to run the program at `path`. Its report must carry the
    /// run's number: one left from an earlier run (whose program wrote a report of its
    /// own on descriptor 4 and so ended its run early) is not taken for this run's.
    /// `tools` numbers the state of the `tools` modules: an interpreter that finds it
    /// changed since its last run forgets the module it imported.
    pub(crate) fn request(
        &mut self,
        path: &str,
        python_paths: &[String],
        streamed: bool,
        tools: u64,
    ) -> io::Result<()> {
        self.run += 1;
        let mut request = serde_json::json!({
            "path": path,
            "session": true,
            "run": self.run,
            "paths": python_paths,
            "tools": tools,
        });
        if streamed {
            request["stream"] = true.into();
        }
        let line = request.to_string() + "\n";
        self.go.write_all(line.as_bytes())
    }

    /// Reads what the report pipe holds; the run's report once a whole one arrived.
    pub(crate) fn read_report(&mut self) -> io::Result<Option<Report>> {
        let mut buf = [0u8; 512];
        loop {
            if let Some(end) = self.report.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.report.drain(..=end).collect();
                match parse_report(&line) {
                    Some((run, report)) if run == self.run => return Ok(Some(report)),
                    _ => {}
                }
                continue;
            }
            if self.report.len() > REPORT_MAX {
                self.report.clear();
            }
            match self.done.read(&mut buf) {
                Ok(0) => return Ok(None),
                Ok(n) => self.report.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// What a resident interpreter reports of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Report {
    /// The program's exit code.
    pub(crate) code: i32,
    /// The program did not compile (it never ran).
    pub(crate) compile_error: bool,
}

/// The run number and report of a report line.
fn parse_report(line: &[u8]) -> Option<(u64, Report)> {
    let report: serde_json::Value = serde_json::from_slice(line).ok()?;
    let code = i32::try_from(report.get("exit")?.as_i64()?).ok()?;
    let compile_error = report
        .get("compileError")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    Some((
        report.get("run")?.as_u64()?,
        Report {
            code,
            compile_error,
        },
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_whole_report_line_counts() {
        let report = |code, compile_error| super::Report {
            code,
            compile_error,
        };
        assert_eq!(
            super::parse_report(b"{\"exit\": 3, \"run\": 2}\n"),
            Some((2, report(3, false)))
        );
        assert_eq!(
            super::parse_report(b"{\"exit\": 1, \"run\": 4, \"compileError\": true}\n"),
            Some((4, report(1, true)))
        );
        assert_eq!(super::parse_report(b"{\"exit\": 3}\n"), None);
        assert_eq!(
            super::parse_report(b"{\"exit\": \"x\", \"run\": 1}\n"),
            None
        );
        assert_eq!(super::parse_report(b"garbage\n"), None);
    }
}
