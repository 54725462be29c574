//! The sessions' settings: flags and environment, checked into a [`SessionConfig`].

use super::{check, ConfigError};
use crate::session::SessionConfig;
use std::time::Duration;

/// Sessions' settings (see [`crate::session`]).
#[derive(Debug, Clone, clap::Args)]
pub struct SessionArgs {
    /// A session ends after this long without a run, unless it asks for another idle
    /// timeout, in milliseconds.
    #[arg(long, env = "RUNNER_SESSION_IDLE_MS", default_value_t = 600_000)]
    pub session_idle_ms: u64,
    /// A session ends this long after it was made, unless it asks for another TTL, in
    /// milliseconds.
    #[arg(long, env = "RUNNER_SESSION_TTL_MS", default_value_t = 3_600_000)]
    pub session_ttl_ms: u64,
    /// The longest idle timeout a session may ask for, in milliseconds.
    #[arg(long, env = "RUNNER_SESSION_MAX_IDLE_MS", default_value_t = 3_600_000)]
    pub session_max_idle_ms: u64,
    /// The longest TTL a session may ask for, in milliseconds.
    #[arg(long, env = "RUNNER_SESSION_MAX_TTL_MS", default_value_t = 86_400_000)]
    pub session_max_ttl_ms: u64,
    /// Sessions open at once; one more gets 429 `too_many_sessions`. (The flag names
    /// sandboxes: sandbox-mcp, which embeds these flags, has a `--max-sessions` of its
    /// own, for MCP sessions.)
    #[arg(long, env = "RUNNER_MAX_SESSIONS", default_value_t = 16)]
    pub max_sandbox_sessions: usize,
    /// The largest file put into or taken from a session, in bytes (at most 16 MiB);
    /// more gets 413.
    #[arg(long, env = "RUNNER_FILE_CAP_BYTES", default_value_t = 16 << 20)]
    pub file_cap_bytes: usize,
    /// The bytes of each output stream (stdout, stderr) kept of a session's process: the
    /// newest (at most 64 MiB).
    #[arg(long, env = "RUNNER_PROCESS_OUTPUT_BYTES", default_value_t = 1 << 20)]
    pub process_output_bytes: u64,
    /// Processes running at once in a session (`POST /sessions/{id}/processes`); one
    /// more gets 429 `too_many_processes` (at most 256).
    #[arg(long, env = "RUNNER_MAX_PROCESSES", default_value_t = 16)]
    pub max_processes: usize,
}

impl SessionArgs {
    /// Checks the settings: each default within its maximum.
    pub fn validate(&self) -> Result<SessionConfig, ConfigError> {
        check(
            (1..=self.session_max_idle_ms).contains(&self.session_idle_ms),
            "RUNNER_SESSION_IDLE_MS",
            "between 1 and RUNNER_SESSION_MAX_IDLE_MS",
            self.session_idle_ms,
        )?;
        check(
            (1..=self.session_max_ttl_ms).contains(&self.session_ttl_ms),
            "RUNNER_SESSION_TTL_MS",
            "between 1 and RUNNER_SESSION_MAX_TTL_MS",
            self.session_ttl_ms,
        )?;
        check(
            self.max_sandbox_sessions <= 1024,
            "RUNNER_MAX_SESSIONS",
            "at most 1024",
            self.max_sandbox_sessions,
        )?;
        check(
            (1..=16 << 20).contains(&self.file_cap_bytes),
            "RUNNER_FILE_CAP_BYTES",
            "between 1 and 16777216 (16 MiB)",
            self.file_cap_bytes,
        )?;
        check(
            (1..=64 << 20).contains(&self.process_output_bytes),
            "RUNNER_PROCESS_OUTPUT_BYTES",
            "between 1 and 67108864 (64 MiB)",
            self.process_output_bytes,
        )?;
        check(
            (1..=256).contains(&self.max_processes),
            "RUNNER_MAX_PROCESSES",
            "between 1 and 256",
            self.max_processes,
        )?;
        Ok(SessionConfig {
            file_cap_bytes: self.file_cap_bytes,
            process_output_bytes: self.process_output_bytes,
            max_processes: self.max_processes,
            idle: Duration::from_millis(self.session_idle_ms),
            ttl: Duration::from_millis(self.session_ttl_ms),
            max_idle: Duration::from_millis(self.session_max_idle_ms),
            max_ttl: Duration::from_millis(self.session_max_ttl_ms),
            max_sessions: self.max_sandbox_sessions,
        })
    }
}
