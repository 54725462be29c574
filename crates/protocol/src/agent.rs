//! Messages between the runner and the agent inside a sandbox.
//!
//! The exchange, over one stream (a socketpair in the process backend, a serial
//! console or vsock in a VM), each message one [`frame`](crate::frame):
//!
//! 1. agent -> runner: [`AgentMessage::Ready`] once the sandbox is set up;
//! 2. runner -> agent: one [`Job`];
//! 3. agent -> runner: [`AgentMessage::Done`] or [`AgentMessage::Failed`].
//!
//! The agent then exits; a sandbox never takes a second job.

use crate::Lang;
use serde::{Deserialize, Serialize};

/// One program to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// The interpreter.
    pub lang: Lang,
    /// The program text, written to a file that the interpreter is given.
    pub code: String,
    /// Wall-clock limit for the whole process tree, in milliseconds.
    pub timeout_ms: u64,
    /// Bytes of standard output kept; more stops the program.
    pub stdout_cap: usize,
    /// Bytes of standard error kept; more stops the program.
    pub stderr_cap: usize,
}

/// What the agent sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    /// The sandbox is set up and the agent waits for its job.
    Ready,
    /// The job ran (whatever its outcome).
    Done(JobOutcome),
    /// The agent could not run the job (for example, the interpreter is missing).
    Failed {
        /// What went wrong, for the operator.
        message: String,
    },
}

/// How a job ended, as the agent saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// Captured standard output (lossy UTF-8), at most `stdout_cap` bytes before decoding.
    pub stdout: String,
    /// Captured standard error (lossy UTF-8), at most `stderr_cap` bytes before decoding.
    pub stderr: String,
    /// Exit status, or 128 + signal when a signal ended the program.
    pub exit_code: i32,
    /// The signal that ended the program, if one did.
    pub signal: Option<i32>,
    /// Wall-clock time from spawn to exit, in milliseconds.
    pub duration_ms: u64,
    /// The timeout expired and the process tree was killed.
    pub timed_out: bool,
    /// Standard output went over its cap and the process tree was killed.
    pub stdout_truncated: bool,
    /// Standard error went over its cap and the process tree was killed.
    pub stderr_truncated: bool,
}
