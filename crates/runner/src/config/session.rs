//! The sessions' settings: flags and environment, checked into a [`SessionConfig`].

use super::{check, ConfigError};
use crate::session::{OnIdle, SessionConfig};
use crate::store::StoreConfig;
use sandbox_protocol::api::defaults;
use std::path::PathBuf;
use std::time::Duration;

/// The data folder a runner uses unless told another: root's. A runner that is not
/// root uses `$XDG_DATA_HOME/sandbox-runner` (or `~/.local/share/sandbox-runner`) instead.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/sandbox-runner";

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
    /// What a session's idle timeout does: `pause` (its files are kept on disk and it
    /// wakes at its next call) or `end`.
    #[arg(
        long,
        env = "RUNNER_SESSION_ON_IDLE",
        value_enum,
        default_value = "pause"
    )]
    pub session_on_idle: OnIdle,
    /// A paused session ends this long after its pause, in milliseconds.
    #[arg(long, env = "RUNNER_PAUSED_TTL_MS", default_value_t = defaults::PAUSED_TTL_MS)]
    pub paused_ttl_ms: u64,
    /// A snapshot ends this long after it was taken, in milliseconds.
    #[arg(long, env = "RUNNER_SNAPSHOT_TTL_MS", default_value_t = defaults::SNAPSHOT_TTL_MS)]
    pub snapshot_ttl_ms: u64,
    /// Where paused sessions and snapshots are kept (a folder that survives a reboot;
    /// one runner per folder).
    #[arg(long, env = "RUNNER_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// The bytes paused sessions and snapshots may take together on disk; a pause or
    /// snapshot beyond gets 507 `storage_full`.
    #[arg(long, env = "RUNNER_MAX_STORED_BYTES", default_value_t = 10 << 30)]
    pub max_stored_bytes: u64,
    /// The most entries (files, folders, links) of an imported snapshot.
    #[arg(long, env = "RUNNER_SNAPSHOT_MAX_ENTRIES", default_value_t = 50_000)]
    pub snapshot_max_entries: u64,
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
        for (ms, name) in [
            (self.paused_ttl_ms, "RUNNER_PAUSED_TTL_MS"),
            (self.snapshot_ttl_ms, "RUNNER_SNAPSHOT_TTL_MS"),
        ] {
            check(ms >= 1, name, "at least 1", ms)?;
        }
        Ok(SessionConfig {
            on_idle: self.session_on_idle,
            paused_ttl: Duration::from_millis(self.paused_ttl_ms),
            snapshot_ttl: Duration::from_millis(self.snapshot_ttl_ms),
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

    /// Checks the data folder's settings.
    pub fn store(&self) -> Result<StoreConfig, ConfigError> {
        check(
            self.data_dir.is_absolute(),
            "RUNNER_DATA_DIR",
            "an absolute path",
            self.data_dir.display(),
        )?;
        check(
            self.snapshot_max_entries >= 1,
            "RUNNER_SNAPSHOT_MAX_ENTRIES",
            "at least 1",
            self.snapshot_max_entries,
        )?;
        Ok(StoreConfig {
            dir: data_dir(&self.data_dir),
            max_bytes: self.max_stored_bytes,
            max_entries: self.snapshot_max_entries,
        })
    }
}

/// `asked`, unless it is the default and the runner is not root: then the user's data
/// folder, where there is one.
fn data_dir(asked: &std::path::Path) -> PathBuf {
    if asked.as_os_str() != DEFAULT_DATA_DIR || nix::unistd::geteuid().is_root() {
        return asked.to_owned();
    }
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".local/share"))
        });
    base.map_or_else(|| asked.to_owned(), |base| base.join("sandbox-runner"))
}
