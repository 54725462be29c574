//! The runner's HTTP API: `POST /run`, the sessions (`/sessions...`, `PATCH` of a
//! session's `egress` included), `GET /health`,
//! `GET /health/live` and error bodies.
//!
//! Field names are camelCase on the wire, as users and outside tests rely on them. With
//! the `openapi` feature each type has its schema (`utoipa::ToSchema`, from these
//! definitions and their docs), for the document the runner serves at `GET /openapi.json`.

use crate::files::FileEntry;
pub use crate::files::OutputFile;
use crate::language::LanguageInfo;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The body of `POST /run`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunRequest {
    /// The language of the code: a name the runner offers (`GET /health` lists them).
    pub lang: String,
    /// The program text.
    pub code: String,
    /// Wall-clock limit in milliseconds; the runner's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Tools the program may call (Python, TypeScript and Node programs, through their
    /// `tools` module): only with a streamed answer, which then carries a `toolCall` line
    /// for each call, answered at `POST /runs/{runId}/tool-results/{id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<crate::tools::ToolsOffer>,
    /// The hosts the program may reach through the runner's proxy: names of the
    /// operator's list (`GET /health`'s `limits.networkHosts`), or names they cover; a
    /// name outside it is refused (400 `egress_not_allowed`). Absent: the operator's
    /// default (`limits.networkByDefault`). Not in a session's run: a session's list is
    /// set when it is made and by `PATCH /sessions/{id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<String>>,
}

/// The 200 answer of `POST /run`: what the program did.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Wall-clock time of the run in milliseconds: the compile step (compiled languages)
    /// and the program, from its start to its end.
    pub duration_ms: u64,
    /// The program ran into its timeout and was killed.
    pub timed_out: bool,
    /// The program did not compile (compiled languages): `stdout`, `stderr` and
    /// `exitCode` are the compiler's, and the program never ran.
    #[serde(default)]
    pub compile_error: bool,
    /// The kernel's out-of-memory killer ended a process of the run.
    pub oom_killed: bool,
    /// Standard output went over the cap; the program was stopped there.
    pub stdout_truncated: bool,
    /// Standard error went over the cap; the program was stopped there.
    pub stderr_truncated: bool,
    /// The files the run wrote under `/home/sandbox/outputs/`, in path order.
    #[serde(default)]
    pub outputs: Vec<OutputFile>,
    /// More files were written under `outputs/` than `outputs` lists.
    #[serde(default)]
    pub outputs_truncated: bool,
    /// Only in a session's answer: whether the session's interpreter had to be ended
    /// (timeout, output cap, out of memory, or the program ended it), so that what the
    /// earlier runs left in it (variables, imports) is gone; its files remain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_lost: Option<bool>,
    /// Only in a session's answer: the session was paused and this run woke it, in a
    /// fresh sandbox, with its files (`stateLost` says whether its variables and
    /// processes were lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<bool>,
    /// What the run did through the runner's proxy, when it did anything there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressUsage>,
}

/// A run's use of the runner's proxy (`egress` in a run's answer).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressUsage {
    /// Connections the proxy made for it.
    pub connections: u64,
    /// Bytes from the hosts to the program.
    pub bytes_in: u64,
    /// Bytes from the program to the hosts.
    pub bytes_out: u64,
    /// Requests the proxy refused (a host not granted, an address it never reaches, a
    /// cap).
    pub refused: u64,
}

/// The runner's defaults: the one place each default limit is written. The runner's
/// flags take them as their defaults, and a client that cannot ask a runner (none
/// configured, or not reachable yet) assumes them.
pub mod defaults {
    /// Memory of a sandbox, MiB.
    pub const MEMORY_MB: u64 = 256;
    /// CPUs of a sandbox.
    pub const CPUS: f64 = 0.5;
    /// Processes and threads of a sandbox.
    pub const PIDS_MAX: u64 = 64;
    /// Timeout of a run that gives none, ms.
    pub const TIMEOUT_MS: u64 = 15_000;
    /// How long a paused session is kept, ms (7 days).
    pub const PAUSED_TTL_MS: u64 = 604_800_000;
    /// How long a snapshot is kept, ms (7 days).
    pub const SNAPSHOT_TTL_MS: u64 = 604_800_000;
    /// Largest timeout a run may ask for, ms.
    pub const MAX_TIMEOUT_MS: u64 = 300_000;
    /// Bytes of stdout, and of stderr, kept per run.
    pub const OUTPUT_CAP_BYTES: u64 = 1 << 20;
    /// Largest program, bytes.
    pub const CODE_CAP_BYTES: u64 = 1 << 20;
    /// Sandboxes a runner keeps (warm plus running).
    pub const POOL_SIZE: usize = 4;
    /// Requests that may wait for a sandbox.
    pub const QUEUE_SIZE: usize = 32;
    /// How long a request may wait for a sandbox, ms.
    pub const QUEUE_TIMEOUT_MS: u64 = 5_000;
    /// Bytes of one file of `outputs/` carried in an answer.
    pub const OUTPUT_FILE_CAP_BYTES: u64 = 4 << 20;
    /// Bytes of all files of `outputs/` carried in one answer.
    pub const OUTPUTS_CAP_BYTES: u64 = 8 << 20;
    /// Files of `outputs/` listed in one answer.
    pub const OUTPUT_FILES_MAX: usize = 64;
    /// The answer margin assumed of a runner that publishes none (older than
    /// [`Limits::answer_margin_ms`](super::Limits::answer_margin_ms)) or has not answered
    /// `GET /health` yet, ms: what callers assumed of every runner before runners
    /// published it (a process sandbox's margin), so a runner that never answers fails a
    /// call as soon as it did.
    pub const ANSWER_MARGIN_MS: u64 = 5_000;
    /// How long resolving a program's inline dependencies may take, ms (a runner's
    /// `RUNNER_DEPS_TIMEOUT_MS` default), and what a caller assumes of a runner that
    /// publishes no [`Limits::dependencies_timeout_ms`](super::Limits::dependencies_timeout_ms).
    pub const DEPENDENCIES_TIMEOUT_MS: u64 = 120_000;
}

/// The limits every sandbox of a runner runs under and the caps of its API, as
/// `GET /health` publishes them: a client tells its users these, never numbers of its
/// own.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Memory of a sandbox, MiB (no swap).
    pub memory_mb: u64,
    /// CPUs of a sandbox (a quota: 0.5 is half of one CPU).
    pub cpus: f64,
    /// Processes and threads of a sandbox.
    pub pids_max: u64,
    /// Timeout of a run that gives none, ms.
    pub default_timeout_ms: u64,
    /// Largest timeout a run may ask for, ms.
    pub max_timeout_ms: u64,
    /// Bytes of stdout, and of stderr, kept per run; more stops the program.
    pub output_cap_bytes: u64,
    /// Largest program, bytes (more gets 413).
    pub code_cap_bytes: u64,
    /// How long a request may wait for a free sandbox before 503, ms.
    pub queue_timeout_ms: u64,
    /// Whether a sandbox can reach any network: true only where the operator opened
    /// hosts (`networkHosts`), which programs reach through the runner's proxy alone.
    pub network: bool,
    /// The hosts the operator opened (`RUNNER_EGRESS_ALLOW`): `host`, `*.domain` (its
    /// subdomains), `host:port`; a run or a session may be granted these (its `egress`).
    /// Absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_hosts: Vec<String>,
    /// Whether a run or a session that names no `egress` is granted every host of
    /// `networkHosts` (`RUNNER_EGRESS_DEFAULT=all`) rather than none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network_by_default: bool,
    /// Whether `memory_mb` and `cpus` are enforced. False only where the operator
    /// started the runner with `--unsafe-no-resource-limits` (an ordinary user's runner
    /// without a delegated cgroup): the process cap stays.
    #[serde(default = "enforced")]
    pub resource_limits: bool,
    /// Whether the cgroup freezer holds a session's processes between its calls, so that
    /// nothing of it runs, whatever signal it gets. False where there is no cgroup
    /// (`--unsafe-no-resource-limits`; its agent then stops them with SIGSTOP, which a
    /// program can leave with a timer that sends it SIGCONT), and from runners older than
    /// this field (they stopped them so).
    #[serde(default)]
    pub sessions_frozen: bool,
    /// How long past a run's own timeout and its language's compile timeout
    /// (`compileTimeoutMs` in `languages`) the runner may take to answer, ms: the time its
    /// backend gives a sandbox to report (5 s for process sandboxes, 10 s for VMs). A
    /// caller waits for a run's answer its timeout, the compile timeout, `queueTimeoutMs`
    /// and this ([`Limits::answer_within`]). From runners older than this field:
    /// [`defaults::ANSWER_MARGIN_MS`].
    #[serde(default = "answer_margin")]
    pub answer_margin_ms: u64,
    /// How long resolving a Python program's inline dependencies (a PEP 723
    /// `# /// script` block, [`crate::language::declares_dependencies`]) may take before
    /// its run, ms: a caller waits for such a program this too. 0 where the runner takes
    /// none (`RUNNER_NO_INLINE_DEPS`, VM sandboxes, an ordinary user's runner). From
    /// runners older than this field: [`defaults::DEPENDENCIES_TIMEOUT_MS`].
    #[serde(default = "dependencies_timeout")]
    pub dependencies_timeout_ms: u64,
    /// Whether a session's idle timeout pauses it (its files kept on the runner's disk,
    /// woken by its next call) rather than ends it. False from runners older than this
    /// field (they ended it).
    #[serde(default)]
    pub idle_sessions_pause: bool,
    /// How long a paused session is kept after its pause, ms (0 from runners older than
    /// this field: they keep none).
    #[serde(default)]
    pub paused_ttl_ms: u64,
    /// How long a snapshot is kept after it was taken, ms (0 from runners older than this
    /// field: they take none).
    #[serde(default)]
    pub snapshot_ttl_ms: u64,
}

/// Limits are enforced unless a runner says otherwise (older runners say nothing).
fn enforced() -> bool {
    true
}

/// The answer margin of a runner that says nothing of it.
fn answer_margin() -> u64 {
    defaults::ANSWER_MARGIN_MS
}

/// The dependencies' timeout of a runner that says nothing of it.
fn dependencies_timeout() -> u64 {
    defaults::DEPENDENCIES_TIMEOUT_MS
}

impl Limits {
    /// How long a caller waits for the answer to a request that takes a sandbox from the
    /// pool and keeps it busy for at most `run_time` ([`crate::language::run_time`]; zero
    /// for opening a session): that, the runner's queue wait and its answer margin.
    pub fn answer_within(&self, run_time: Duration) -> Duration {
        let allowances = self.queue_timeout_ms.saturating_add(self.answer_margin_ms);
        run_time.saturating_add(Duration::from_millis(allowances))
    }

    /// What a program's own code adds to the wait for its answer: the dependencies'
    /// timeout for a Python program that declares inline dependencies, nothing
    /// otherwise.
    pub fn code_allowance(&self, lang: &str, code: &str) -> Duration {
        if lang == crate::Lang::PYTHON.as_str() && crate::language::declares_dependencies(code) {
            Duration::from_millis(self.dependencies_timeout_ms)
        } else {
            Duration::ZERO
        }
    }
}

impl Default for Limits {
    /// The runner's defaults ([`defaults`]).
    fn default() -> Self {
        Limits {
            memory_mb: defaults::MEMORY_MB,
            cpus: defaults::CPUS,
            pids_max: defaults::PIDS_MAX,
            default_timeout_ms: defaults::TIMEOUT_MS,
            max_timeout_ms: defaults::MAX_TIMEOUT_MS,
            output_cap_bytes: defaults::OUTPUT_CAP_BYTES,
            code_cap_bytes: defaults::CODE_CAP_BYTES,
            queue_timeout_ms: defaults::QUEUE_TIMEOUT_MS,
            network: false,
            network_hosts: Vec::new(),
            network_by_default: false,
            resource_limits: true,
            sessions_frozen: true,
            answer_margin_ms: defaults::ANSWER_MARGIN_MS,
            dependencies_timeout_ms: defaults::DEPENDENCIES_TIMEOUT_MS,
            idle_sessions_pause: true,
            paused_ttl_ms: defaults::PAUSED_TTL_MS,
            snapshot_ttl_ms: defaults::SNAPSHOT_TTL_MS,
        }
    }
}

/// The answer of `GET /health`: whether to send this runner traffic.
///
/// The HTTP status follows `status`, so that an orchestrator's readiness probe (which
/// reads only the status) understands it: 200 when `status` is [`health::OK`], 503 with
/// this same body otherwise:
/// - [`health::STARTING`]: the runner listens but its start-up work is not finished (its
///   pool has not made its first warm sandbox yet);
/// - [`health::DEGRADED`]: making sandboxes fails and none is warm;
/// - [`health::DRAINING`]: the runner got SIGTERM or SIGINT: it takes no new run or
///   session, finishes the runs in flight and exits.
///
/// `GET /health/live` answers [`Liveness`] with 200 whenever the process serves HTTP.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// [`health::OK`], [`health::STARTING`], [`health::DEGRADED`] or [`health::DRAINING`].
    pub status: String,
    /// This process's id: 32 random hex digits made at start, the same for the
    /// process's life, new on every restart (absent from runners older than this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// The number of sandboxes the pool keeps (warm plus in use).
    pub pool_size: usize,
    /// Warm sandboxes ready to take a job now.
    pub available: usize,
    /// The backend in use (`process`).
    pub backend: String,
    /// The runner's version.
    pub version: String,
    /// The limits of its sandboxes and the caps of its API (absent from runners older
    /// than this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Sessions open now (absent from runners without sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<usize>,
    /// The most sessions open at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<usize>,
    /// What programs can import (absent from runners older than this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<Packages>,
    /// The languages offered, in the table's order (absent from runners older than
    /// this field, which offer [`crate::language::classic`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub languages: Option<Vec<LanguageInfo>>,
}

/// The values of [`Health::status`].
pub mod health {
    /// Ready: send it traffic (HTTP 200).
    pub const OK: &str = "ok";
    /// Listening, but not ready yet (HTTP 503).
    pub const STARTING: &str = "starting";
    /// Making sandboxes fails and none is warm (HTTP 503).
    pub const DEGRADED: &str = "degraded";
    /// Shutting down: no new runs or sessions (HTTP 503).
    pub const DRAINING: &str = "draining";
    /// The status of `GET /health/live`.
    pub const ALIVE: &str = "alive";
}

/// The answer of `GET /health/live` (always 200 while the process serves HTTP, even
/// when it is starting, degraded or draining): for an orchestrator's liveness probe.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Liveness {
    /// Always [`health::ALIVE`].
    pub status: String,
    /// The same id as [`Health::instance_id`].
    pub instance_id: String,
}

/// The packages a runner's sandboxes have, beyond each language's standard library.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Packages {
    /// The package set's key (absent: no set is installed, only standard libraries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Python packages, importable by every Python program.
    #[serde(default)]
    pub python: Vec<PackageVersion>,
    /// npm packages, which `require` and `import` find.
    #[serde(default)]
    pub node: Vec<PackageVersion>,
    /// Modules warm Python interpreters have imported before the program starts.
    #[serde(default)]
    pub warm_imports: Vec<String>,
    /// Whether a Python program may declare more in a PEP 723 `# /// script` block.
    #[serde(default)]
    pub inline_dependencies: bool,
}

/// One installed package.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageVersion {
    /// Its name, as its index spells it.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// The body of `POST /sessions` (`{}` or empty takes the runner's defaults).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSession {
    /// The session ends after this long without a run, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    /// The session ends this long after it was made, in milliseconds, whatever it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Start from this snapshot's files (`POST /sessions/{id}/snapshots`, or an import).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_snapshot: Option<String>,
    /// The hosts the session's programs may reach, as for a run's `egress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<String>>,
}

/// The body of `PATCH /sessions/{id}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateSession {
    /// The hosts the session's programs may reach from now on (within the operator's
    /// list; `[]`: none), for its next runs and its running processes' next
    /// connections.
    pub egress: Vec<String>,
}

/// The answer of `GET /sessions/{id}/files`: the home folder, recursively.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileList {
    /// Files, folders and what else is there (`path` relative to the home folder,
    /// `size`, `kind`), each folder's entries by name and before what they hold.
    pub files: Vec<FileEntry>,
    /// The listing stopped early (at its entries, bytes or depth): there is more than
    /// it gives.
    pub truncated: bool,
}

/// A session, as `POST /sessions` (201) and `GET /sessions/{id}` answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session's id: at least 128 random bits, the only way to reach it.
    pub id: String,
    /// The session ends after this long without a run, in milliseconds.
    pub idle_timeout_ms: u64,
    /// When the session ends at the latest (RFC 3339, UTC).
    pub expires_at: String,
    /// Runs so far.
    pub runs: u64,
    /// A run is in flight.
    pub busy: bool,
    /// `active`, or `paused` (its files on the runner's disk, no sandbox: any call wakes it).
    pub state: crate::snapshot::SessionState,
    /// When it was paused, while it is (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<String>,
    /// The hosts its programs may reach through the runner's proxy (absent where the
    /// runner opens none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<String>>,
}

/// Every error answer: `{"error": {"code": ..., "message": ...}}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error itself.
    pub error: ErrorDetail,
}

/// The inside of an [`ErrorBody`].
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// A stable, machine-readable code such as `bad_request` or `pool_exhausted`. A 429
    /// `pool_exhausted` or a 503 `queue_timeout`, `draining` (the runner got SIGTERM) or
    /// `starting` (it has no sandbox yet) never started the program: the request may be
    /// sent to another runner.
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
