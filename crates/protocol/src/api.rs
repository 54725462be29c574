//! The runner's HTTP API: `POST /run`, `GET /health` and error bodies.
//!
//! Field names are camelCase on the wire, as users and outside tests rely on them.

use crate::Lang;
use serde::{Deserialize, Serialize};

/// The body of `POST /run`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunRequest {
    /// Which interpreter runs the code.
    pub lang: Lang,
    /// The program text.
    pub code: String,
    /// Wall-clock limit in milliseconds; the runner's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The 200 answer of `POST /run`: what the program did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResponse {
    /// Standard output, up to the cap, as UTF-8 (invalid bytes replaced).
    pub stdout: String,
    /// Standard error, up to the cap, as UTF-8 (invalid bytes replaced).
    pub stderr: String,
    /// The program's exit status; 128 + signal when a signal ended it
    /// (137 after a timeout, an out-of-memory kill or an output-cap kill).
    pub exit_code: i32,
    /// Wall-clock time of the program, from its start to its end, in milliseconds.
    pub duration_ms: u64,
    /// The program ran into its timeout and was killed.
    pub timed_out: bool,
    /// The kernel's out-of-memory killer ended a process of the run.
    pub oom_killed: bool,
    /// Standard output went over the cap; the program was stopped there.
    pub stdout_truncated: bool,
    /// Standard error went over the cap; the program was stopped there.
    pub stderr_truncated: bool,
}

/// The answer of `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `"ok"` when sandboxes are being made, `"degraded"` when making them fails.
    pub status: String,
    /// The number of sandboxes the pool keeps (warm plus in use).
    pub pool_size: usize,
    /// Warm sandboxes ready to take a job now.
    pub available: usize,
    /// The backend in use (`process`).
    pub backend: String,
    /// The runner's version.
    pub version: String,
}

/// Every error answer: `{"error": {"code": ..., "message": ...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error itself.
    pub error: ErrorDetail,
}

/// The inside of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// A stable, machine-readable code such as `bad_request` or `pool_exhausted`.
    pub code: String,
    /// A sentence for people.
    pub message: String,
}

impl ErrorBody {
    /// An error body with the given code and message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: code.into(),
                message: message.into(),
            },
        }
    }
}
