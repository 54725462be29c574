//! Processes in a session's sandbox: commands started by the API that keep running
//! between calls, whose output is kept and read by byte offsets, and which can be fed
//! and signalled.
//!
//! Two layers: what the runner asks the agent ([`ProcessRequest`], answered by
//! [`AgentMessage::Process`](crate::agent::AgentMessage::Process)), and the runner's
//! HTTP bodies (`POST /sessions/{id}/processes` and the routes under it:
//! [`StartProcess`], [`ProcessStarted`], [`ProcessList`], [`ProcessOutput`],
//! [`SignalProcess`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The signals a process may be sent, by their names without `SIG`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ProcessSignal {
    /// SIGINT.
    Int,
    /// SIGTERM.
    Term,
    /// SIGKILL.
    Kill,
    /// SIGHUP.
    Hup,
    /// SIGQUIT.
    Quit,
    /// SIGUSR1.
    Usr1,
    /// SIGUSR2.
    Usr2,
}

impl ProcessSignal {
    /// Every signal, in the order the API's documentation lists them.
    pub const ALL: [ProcessSignal; 7] = [
        ProcessSignal::Int,
        ProcessSignal::Term,
        ProcessSignal::Kill,
        ProcessSignal::Hup,
        ProcessSignal::Quit,
        ProcessSignal::Usr1,
        ProcessSignal::Usr2,
    ];

    /// The signal of this name (`TERM`, as the API spells it), if it is one of these.
    pub fn from_name(name: &str) -> Option<ProcessSignal> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Its name, as the API spells it.
    pub fn name(self) -> &'static str {
        match self {
            ProcessSignal::Int => "INT",
            ProcessSignal::Term => "TERM",
            ProcessSignal::Kill => "KILL",
            ProcessSignal::Hup => "HUP",
            ProcessSignal::Quit => "QUIT",
            ProcessSignal::Usr1 => "USR1",
            ProcessSignal::Usr2 => "USR2",
        }
    }

    /// Its number on Linux.
    pub fn number(self) -> i32 {
        match self {
            ProcessSignal::Int => 2,
            ProcessSignal::Term => 15,
            ProcessSignal::Kill => 9,
            ProcessSignal::Hup => 1,
            ProcessSignal::Quit => 3,
            ProcessSignal::Usr1 => 10,
            ProcessSignal::Usr2 => 12,
        }
    }
}

/// One of a process's two output streams.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// What the runner asks of a session's processes (the agent does it inside the
/// sandbox). Every request is answered at once: none waits for a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "process", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProcessRequest {
    /// Start `command` under `bash -c` as the program's user, in its own session and
    /// process group; answered by [`ProcessAnswer::Started`].
    Start {
        /// The command line.
        command: String,
        /// Its working folder, relative to the home folder (absent: the home folder).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
        /// Variables added to the programs' environment.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
        /// The most bytes of each stream kept (the newest).
        keep_bytes: u64,
        /// The most processes of the session running at once; one more is refused.
        max_running: usize,
    },
    /// The bytes each stream produced from these offsets; answered by
    /// [`ProcessAnswer::Output`].
    Output {
        /// Which process.
        pid: i32,
        /// From which byte of standard output.
        stdout_from: u64,
        /// From which byte of standard error.
        stderr_from: u64,
        /// The most bytes of each stream carried in the answer (the oldest asked for
        /// first): a reader asks again from where the answer stopped.
        max_bytes: u64,
    },
    /// Write to its standard input; answered by [`ProcessAnswer::Done`] once the bytes
    /// are queued (a process that reads nothing never blocks the agent).
    Stdin {
        /// Which process.
        pid: i32,
        /// The bytes, as base64 ([`crate::agent::encode_bytes`]).
        data: String,
        /// Close its standard input after them.
        #[serde(default)]
        eof: bool,
    },
    /// Send a signal to its process group; answered by [`ProcessAnswer::Done`].
    Signal {
        /// Which process.
        pid: i32,
        /// Which signal.
        signal: ProcessSignal,
    },
    /// Every process, running and ended; answered by [`ProcessAnswer::Listed`].
    List,
}

/// How the agent answered a [`ProcessRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessAnswer {
    /// The process started.
    Started(ProcessEntry),
    /// Output from the offsets asked for.
    Output(OutputSlice),
    /// Done (stdin written, signal sent).
    Done,
    /// The processes, the oldest first.
    Listed(Vec<ProcessEntry>),
    /// Refused or failed.
    Failed {
        /// Why, for the API's error code.
        reason: ProcessFailure,
        /// A sentence for people.
        message: String,
    },
}

/// Why a process request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessFailure {
    /// No process has this pid in the session.
    NotFound,
    /// The process has ended (its standard input is gone).
    Ended,
    /// As many processes run as the session may have.
    TooMany,
    /// The working folder is not a folder inside the home folder.
    BadPath,
    /// The process has not read what was written to it before, and its queue is full.
    StdinFull,
    /// Another failure (the command could not be started).
    Io,
}

/// A process as the agent keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEntry {
    /// Its id inside the sandbox.
    pub pid: i32,
    /// Its command line.
    pub command: String,
    /// When it started, in milliseconds since the Unix epoch (the sandbox's clock).
    pub started_at_ms: u64,
    /// How it ended: its code, or 128 + the signal that ended it (absent: it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// When it ended, in milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<u64>,
}

/// Part of a process's output, from offsets a reader asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputSlice {
    /// Standard output's bytes, as base64.
    pub stdout: String,
    /// Standard error's bytes, as base64.
    pub stderr: String,
    /// The offset of standard output's first byte here (past the asked one when older
    /// bytes are no longer kept).
    pub stdout_from: u64,
    /// The offset of standard error's first byte here.
    pub stderr_from: u64,
    /// How the process ended (absent: it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Every byte of both streams has been read from the process (it ended and its
    /// pipes are closed): no more output will come.
    pub finished: bool,
}

/// The body of `POST /sessions/{id}/processes`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartProcess {
    /// The command line, run under `bash -c`.
    pub command: String,
    /// Its working folder, relative to `/home/sandbox` (absent: that folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Variables added to the sandbox's environment for it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// The answer to `POST /sessions/{id}/processes` (201).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessStarted {
    /// Its id inside the sandbox (a run of the session sees it in `/proc`).
    pub pid: i32,
    /// Its command line.
    pub command: String,
    /// When it started (RFC 3339).
    pub started_at: String,
}

/// One process of `GET /sessions/{id}/processes`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    /// Its id inside the sandbox.
    pub pid: i32,
    /// Its command line.
    pub command: String,
    /// It has not ended.
    pub running: bool,
    /// Its exit code, or 128 + the signal that ended it; null while it runs.
    pub exit_code: Option<i32>,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// When it ended (RFC 3339); null while it runs.
    pub ended_at: Option<String>,
}

/// The answer to `GET /sessions/{id}/processes`: running and ended processes (the
/// most recent ended ones), the oldest first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessList {
    /// The processes.
    pub processes: Vec<ProcessInfo>,
}

/// The answer to `GET /sessions/{id}/processes/{pid}/output`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessOutput {
    /// Standard output from `stdoutFrom` to `stdoutTo`, as UTF-8 (invalid bytes
    /// replaced).
    pub stdout: String,
    /// Standard error from `stderrFrom` to `stderrTo`.
    pub stderr: String,
    /// The byte offset `stdout` starts at.
    pub stdout_from: u64,
    /// The byte offset `stdout` ends at: pass it as `stdoutFrom` next.
    pub stdout_to: u64,
    /// The byte offset `stderr` starts at.
    pub stderr_from: u64,
    /// The byte offset `stderr` ends at: pass it as `stderrFrom` next.
    pub stderr_to: u64,
    /// Bytes of standard output between the asked offset and `stdoutFrom` that are no
    /// longer kept.
    pub stdout_dropped: u64,
    /// The same for standard error.
    pub stderr_dropped: u64,
    /// The process has not ended.
    pub running: bool,
    /// Its exit code, or 128 + the signal that ended it; null while it runs.
    pub exit_code: Option<i32>,
}

/// The body of `POST /sessions/{id}/processes/{pid}/signal`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalProcess {
    /// `INT`, `TERM`, `KILL`, `HUP`, `QUIT`, `USR1` or `USR2`.
    pub signal: String,
}

/// One line of a streamed answer (`application/x-ndjson`): output as it appears, and
/// the last line, which says how it ended.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StreamLine<R> {
    /// Output: `{"stream": "stdout", "data": "..."}`.
    Output {
        /// Which stream.
        stream: Stream,
        /// What it wrote, as UTF-8 (a character split between chunks is kept whole).
        data: String,
    },
    /// A followed process ended: `{"exitCode": N}`.
    Exit {
        /// Its exit code, or 128 + the signal that ended it.
        #[serde(rename = "exitCode")]
        exit_code: i32,
    },
    /// A program called an offered tool: `{"toolCall": {runId, id, server, tool,
    /// arguments}}`; the caller answers at `POST /runs/{runId}/tool-results/{id}`.
    ToolCall {
        /// The call.
        #[serde(rename = "toolCall")]
        tool_call: crate::tools::ToolCallLine,
    },
    /// A streamed run ended: `{"result": {...}}`, exactly the plain answer.
    Result {
        /// The answer.
        result: R,
    },
    /// A streamed answer failed after it began (the sandbox failed, or the runner
    /// stopped the run): `{"error": {"code", "message"}}`, what the plain answer's error
    /// body would have said.
    Error {
        /// The error, its code as in an error answer.
        error: crate::api::ErrorDetail,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_as_the_api_names_them() {
        for signal in ProcessSignal::ALL {
            let json = serde_json::to_string(&signal).expect("encodes");
            assert_eq!(json, format!("\"{}\"", signal.name()));
            assert_eq!(ProcessSignal::from_name(signal.name()), Some(signal));
        }
        assert_eq!(ProcessSignal::from_name("STOP"), None);
        assert_eq!(ProcessSignal::from_name("term"), None);
        assert_eq!(ProcessSignal::Term.number(), 15);
    }

    #[test]
    fn stream_lines_are_the_contracts_shapes() {
        let out: StreamLine<()> = StreamLine::Output {
            stream: Stream::Stderr,
            data: "x\n".into(),
        };
        assert_eq!(
            serde_json::to_string(&out).expect("encodes"),
            r#"{"stream":"stderr","data":"x\n"}"#
        );
        let exit: StreamLine<()> = StreamLine::Exit { exit_code: 143 };
        assert_eq!(
            serde_json::to_string(&exit).expect("encodes"),
            r#"{"exitCode":143}"#
        );
        let result = StreamLine::Result { result: 7 };
        assert_eq!(
            serde_json::to_string(&result).expect("encodes"),
            r#"{"result":7}"#
        );
        let failed: StreamLine<()> = StreamLine::Error {
            error: crate::api::ErrorBody::new("sandbox_failed", "gone").error,
        };
        let line = serde_json::to_string(&failed).expect("encodes");
        assert_eq!(
            line,
            r#"{"error":{"code":"sandbox_failed","message":"gone"}}"#
        );
        for line in [
            line.as_str(),
            r#"{"result":7}"#,
            r#"{"stream":"stdout","data":""}"#,
        ] {
            let decoded: StreamLine<i32> = serde_json::from_str(line).expect("decodes");
            assert_eq!(serde_json::to_string(&decoded).expect("encodes"), line);
        }
    }

    #[test]
    fn a_process_request_names_itself() {
        let list: ProcessRequest = serde_json::from_str(r#"{"process":"list"}"#).expect("decodes");
        assert_eq!(list, ProcessRequest::List);
        let message: crate::agent::RunnerMessage =
            serde_json::from_str(r#"{"process":"list"}"#).expect("decodes");
        assert_eq!(
            message,
            crate::agent::RunnerMessage::Process(ProcessRequest::List)
        );
        let signal = ProcessRequest::Signal {
            pid: 7,
            signal: ProcessSignal::Hup,
        };
        let json = serde_json::to_string(&signal).expect("encodes");
        assert_eq!(json, r#"{"process":"signal","pid":7,"signal":"HUP"}"#);
    }
}
