//! A session's processes: `POST /sessions/{id}/processes` (start) and
//! `GET /sessions/{id}/processes` (list), and under `/sessions/{id}/processes/{pid}`:
//! `GET output` (from byte offsets, waiting up to `waitMs` for more), `POST stdin` (raw
//! bytes, `?eof=true` to close it) and `POST signal`. Each exchange is bounded as a file
//! operation is, and output's by its wait as well.

use std::time::Duration;

use reqwest::{header, Method, StatusCode};
use sandbox_protocol::process::{
    ProcessList, ProcessOutput, ProcessSignal, ProcessStarted, SignalProcess, StartProcess,
};

use super::answer::{empty_within, json_within};
use super::sessions::OPERATION_TIMEOUT;
use super::{RunnerClient, RunnerError};

/// The longest `waitMs` the runner takes: an output call waits at most this for new
/// output.
pub const MAX_OUTPUT_WAIT: Duration = Duration::from_secs(30);

/// Where to read a process's output from: a byte offset in each stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offsets {
    /// The first byte of standard output wanted.
    pub stdout: u64,
    /// The first byte of standard error wanted.
    pub stderr: u64,
}

impl RunnerClient {
    /// Starts a process in session `session`; the runner answers as soon as it runs.
    pub async fn start_process(
        &self,
        session: &str,
        request: &StartProcess,
    ) -> Result<ProcessStarted, RunnerError> {
        let builder = self
            .request(Method::POST, &["sessions", session, "processes"])
            .json(request);
        json_within(OPERATION_TIMEOUT, builder, StatusCode::CREATED).await
    }

    /// The session's processes, running and ended.
    pub async fn list_processes(&self, session: &str) -> Result<ProcessList, RunnerError> {
        let builder = self.request(Method::GET, &["sessions", session, "processes"]);
        json_within(OPERATION_TIMEOUT, builder, StatusCode::OK).await
    }

    /// Process `pid`'s output from `from`; the runner waits up to `wait` (at most
    /// [`MAX_OUTPUT_WAIT`]) for some when there is none yet and the process runs.
    pub async fn process_output(
        &self,
        session: &str,
        pid: i32,
        from: Offsets,
        wait: Duration,
    ) -> Result<ProcessOutput, RunnerError> {
        let wait = wait.min(MAX_OUTPUT_WAIT);
        let pid = pid.to_string();
        let builder = self
            .request(Method::GET, &process(session, &pid, "output"))
            .query(&[
                ("stdoutFrom", from.stdout),
                ("stderrFrom", from.stderr),
                ("waitMs", wait.as_millis() as u64),
            ]);
        json_within(OPERATION_TIMEOUT + wait, builder, StatusCode::OK).await
    }

    /// Writes `bytes` to process `pid`'s standard input, and closes it after them when
    /// `eof`.
    pub async fn write_stdin(
        &self,
        session: &str,
        pid: i32,
        bytes: Vec<u8>,
        eof: bool,
    ) -> Result<(), RunnerError> {
        let pid = pid.to_string();
        let mut builder = self
            .request(Method::POST, &process(session, &pid, "stdin"))
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes);
        if eof {
            builder = builder.query(&[("eof", "true")]);
        }
        empty_within(OPERATION_TIMEOUT, builder).await
    }

    /// Sends `signal` to process `pid`'s group.
    pub async fn signal_process(
        &self,
        session: &str,
        pid: i32,
        signal: ProcessSignal,
    ) -> Result<(), RunnerError> {
        let pid = pid.to_string();
        let body = SignalProcess {
            signal: signal.name().to_owned(),
        };
        let builder = self
            .request(Method::POST, &process(session, &pid, "signal"))
            .json(&body);
        empty_within(OPERATION_TIMEOUT, builder).await
    }
}

/// The segments of `/sessions/{session}/processes/{pid}/{what}`.
fn process<'a>(session: &'a str, pid: &'a str, what: &'a str) -> [&'a str; 5] {
    ["sessions", session, "processes", pid, what]
}
