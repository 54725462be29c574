//! Every error code the API answers with, its status, and when: the one place each is
//! written. [`ApiError`](super::ApiError) answers with them, and the OpenAPI document
//! ([`super::openapi`]) lists for each route those it can answer. The codes of a refused
//! PEP 723 block are those of `sandbox_packages::DepsError::code` and
//! [`DepsRefusal`](crate::deps::DepsRefusal), listed here for the document (a unit test
//! holds the two together).

use axum::http::StatusCode;

/// An error code and the status it comes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode {
    /// The HTTP status.
    pub status: StatusCode,
    /// The code, as `{"error": {"code"}}` says it.
    pub code: &'static str,
    /// When it is answered, for the document.
    pub when: &'static str,
}

const fn code(status: StatusCode, code: &'static str, when: &'static str) -> ErrorCode {
    ErrorCode { status, code, when }
}

/// 400: the body or a parameter is not valid.
pub const BAD_REQUEST: ErrorCode = code(
    StatusCode::BAD_REQUEST,
    "bad_request",
    "the body or a parameter is not valid (the message says which): not the JSON object \
     asked for, a language the runner does not offer, a timeout or duration out of range",
);
/// 400: `egress` names a host the operator did not open.
pub const EGRESS_NOT_ALLOWED: ErrorCode = code(
    StatusCode::BAD_REQUEST,
    "egress_not_allowed",
    "`egress` names hosts outside the operator's list (`GET /health`'s \
     `limits.networkHosts`; the message names them); nothing was started or changed",
);
/// 401: no token, or the wrong one.
pub const UNAUTHORIZED: ErrorCode = code(
    StatusCode::UNAUTHORIZED,
    "unauthorized",
    "no `Authorization: Bearer <token>`, or the wrong token (with `WWW-Authenticate: Bearer`)",
);
/// 413: over a cap.
pub const TOO_LARGE: ErrorCode = code(
    StatusCode::PAYLOAD_TOO_LARGE,
    "too_large",
    "the code, the body or the file is over its cap (the message says which)",
);
/// 429: the queue for a sandbox is full.
pub const POOL_EXHAUSTED: ErrorCode = code(
    StatusCode::TOO_MANY_REQUESTS,
    "pool_exhausted",
    "the queue for a sandbox is full; nothing was started (`Retry-After`)",
);
/// 503: no sandbox within the queue wait.
pub const QUEUE_TIMEOUT: ErrorCode = code(
    StatusCode::SERVICE_UNAVAILABLE,
    "queue_timeout",
    "no sandbox was free within the queue wait; nothing was started (`Retry-After`)",
);
/// 503: the pool is closing.
pub const SHUTTING_DOWN: ErrorCode = code(
    StatusCode::SERVICE_UNAVAILABLE,
    "shutting_down",
    "the pool is shutting down; nothing was started (`Retry-After`)",
);
/// 503: the runner drains.
pub const DRAINING: ErrorCode = code(
    StatusCode::SERVICE_UNAVAILABLE,
    "draining",
    "the runner got SIGTERM or SIGINT: it takes no new run or session; nothing was \
     started, another runner may take the request (`Retry-After`)",
);
/// 503: the runner has no sandbox yet.
pub const STARTING: ErrorCode = code(
    StatusCode::SERVICE_UNAVAILABLE,
    "starting",
    "the runner is starting: its pool has no sandbox yet; nothing was started (`Retry-After`)",
);
/// 500: the sandbox failed.
pub const SANDBOX_FAILED: ErrorCode = code(
    StatusCode::INTERNAL_SERVER_ERROR,
    "sandbox_failed",
    "the sandbox failed (a session's then ends)",
);
/// 404: no such endpoint.
pub const NOT_FOUND: ErrorCode = code(StatusCode::NOT_FOUND, "not_found", "no such endpoint");
/// 405: the endpoint does not take this method.
pub const METHOD_NOT_ALLOWED: ErrorCode = code(
    StatusCode::METHOD_NOT_ALLOWED,
    "method_not_allowed",
    "the endpoint does not take this method",
);
/// 404: no such session.
pub const SESSION_NOT_FOUND: ErrorCode = code(
    StatusCode::NOT_FOUND,
    "session_not_found",
    "no such session: never made, deleted, expired, or ended by its sandbox's failure",
);
/// 409: the session is busy.
pub const SESSION_BUSY: ErrorCode = code(
    StatusCode::CONFLICT,
    "session_busy",
    "a run or file operation of the session is in flight: one at a time",
);
/// 429: the most sessions are open.
pub const TOO_MANY_SESSIONS: ErrorCode = code(
    StatusCode::TOO_MANY_REQUESTS,
    "too_many_sessions",
    "as many sessions are open as the runner keeps (`RUNNER_MAX_SESSIONS`) (`Retry-After`)",
);
/// 400: a path outside the home folder.
pub const BAD_PATH: ErrorCode = code(
    StatusCode::BAD_REQUEST,
    "bad_path",
    "the path leaves the home folder (`..`, absolute) or goes through or to a symlink; \
     nothing was touched",
);
/// 404: no such file.
pub const FILE_NOT_FOUND: ErrorCode = code(
    StatusCode::NOT_FOUND,
    "file_not_found",
    "no file at the path",
);
/// 400: not a regular file.
pub const NOT_A_FILE: ErrorCode = code(
    StatusCode::BAD_REQUEST,
    "not_a_file",
    "a folder, FIFO, socket or device is at the path (the message says which); no byte \
     was read or written",
);
/// 400: the file cannot be read or written.
pub const FILE_ERROR: ErrorCode = code(
    StatusCode::BAD_REQUEST,
    "file_error",
    "the file cannot be read or written (such as one a program holds a lease on)",
);
/// 504: the agent has not answered a file operation.
pub const FILE_TIMEOUT: ErrorCode = code(
    StatusCode::GATEWAY_TIMEOUT,
    "file_timeout",
    "the sandbox has not answered within 30 s; the session stays, busy until it answers",
);
/// 404: no such process in the session.
pub const PROCESS_NOT_FOUND: ErrorCode = code(
    StatusCode::NOT_FOUND,
    "process_not_found",
    "no process of the session has this pid (ended ones stay listed: the most recent 64)",
);
/// 409: the process has ended.
pub const PROCESS_ENDED: ErrorCode = code(
    StatusCode::CONFLICT,
    "process_ended",
    "the process has ended (or its standard input is closed): nothing can be written to it",
);
/// 429: the most processes run in the session.
pub const TOO_MANY_PROCESSES: ErrorCode = code(
    StatusCode::TOO_MANY_REQUESTS,
    "too_many_processes",
    "as many processes run in the session as it may have (`RUNNER_MAX_PROCESSES`); stop one",
);
/// 409: the process has not read what was written to it.
pub const STDIN_FULL: ErrorCode = code(
    StatusCode::CONFLICT,
    "stdin_full",
    "4 MiB written to the process wait for it to read them; retry once it has",
);
/// 400: the command could not be started.
pub const PROCESS_ERROR: ErrorCode = code(
    StatusCode::BAD_REQUEST,
    "process_error",
    "the command could not be started (the message says why, such as the session's \
     process limit)",
);
/// 404: no snapshot has this id.
pub const SNAPSHOT_NOT_FOUND: ErrorCode = code(
    StatusCode::NOT_FOUND,
    "snapshot_not_found",
    "no snapshot on this runner has this id (never taken here, deleted, or expired)",
);
/// 404: no run of this id is waiting for tool results.
pub const RUN_NOT_FOUND: ErrorCode = code(
    StatusCode::NOT_FOUND,
    "run_not_found",
    "no run with this id is streaming its answer: it ended (or never offered tools)",
);
/// 404: the run has no call of this id waiting.
pub const TOOL_CALL_NOT_FOUND: ErrorCode = code(
    StatusCode::NOT_FOUND,
    "tool_call_not_found",
    "the run has no tool call with this id waiting for its result (answered already, \
     refused by the runner, or never made)",
);
/// 507: the runner's storage for paused sessions and snapshots is full.
pub const STORAGE_FULL: ErrorCode = code(
    StatusCode::INSUFFICIENT_STORAGE,
    "storage_full",
    "the pause, snapshot, fork or import would take the runner's stored bytes past `RUNNER_MAX_STORED_BYTES`; nothing changed (the session goes on)",
);
/// 400: an imported archive was refused.
pub const BAD_ARCHIVE: ErrorCode = code(
    StatusCode::BAD_REQUEST,
    "bad_archive",
    "the imported archive was refused (the message names the entry and why); nothing was kept",
);
/// 500: the data folder failed, or a session's files could not be packed or restored.
pub const STORAGE_ERROR: ErrorCode = code(
    StatusCode::INTERNAL_SERVER_ERROR,
    "storage_error",
    "the runner's data folder failed, or a session's files could not be packed or restored (the message says why); the session is as it was",
);
/// 400: a PEP 723 block that cannot be read.
pub const BAD_SCRIPT_METADATA: ErrorCode = code(
    StatusCode::BAD_REQUEST,
    "bad_script_metadata",
    "the program's PEP 723 block cannot be read; nothing ran",
);
/// 422: too many inline dependencies.
pub const TOO_MANY_DEPENDENCIES: ErrorCode = deps(
    "too_many_dependencies",
    "more than 64 names declared, or 256 packages resolved; nothing ran",
);
/// 422: an inline dependency the policy refuses.
pub const DEPENDENCY_DENIED: ErrorCode = deps(
    "dependency_denied",
    "by the policy, or a package whose metadata names a dependency by URL; nothing ran",
);
/// 422: no such package, or no wheel for this Python.
pub const DEPENDENCY_NOT_FOUND: ErrorCode = deps(
    "dependency_not_found",
    "no such package, or no wheel for the sandboxes' Python; nothing ran",
);
/// 422: inline dependencies over the size cap.
pub const DEPENDENCY_TOO_LARGE: ErrorCode = deps(
    "dependency_too_large",
    "the dependencies take more than `RUNNER_DEPS_MAX_MB` installed, or more memory to \
     resolve than the resolver has; nothing ran",
);
/// 422: resolving took too long.
pub const DEPENDENCY_TIMEOUT: ErrorCode = deps(
    "dependency_timeout",
    "resolving and installing took longer than `RUNNER_DEPS_TIMEOUT_MS`; nothing ran",
);
/// 422: against the package set's versions.
pub const DEPENDENCY_CONFLICT: ErrorCode = deps(
    "dependency_conflict",
    "the dependencies conflict with the package set's versions; nothing ran",
);
/// 422: the block asks for another Python.
pub const PYTHON_VERSION_UNSUPPORTED: ErrorCode = deps(
    "python_version_unsupported",
    "the block's `requires-python` excludes the sandboxes' Python; nothing ran",
);
/// 422: the package index cannot be reached.
pub const INDEX_UNREACHABLE: ErrorCode = deps(
    "index_unreachable",
    "the package index could not be reached; nothing ran",
);
/// 422: inline dependencies turned off.
pub const DEPENDENCIES_DISABLED: ErrorCode = deps(
    "dependencies_disabled",
    "the runner takes no inline dependencies (`RUNNER_NO_INLINE_DEPS`); nothing ran",
);
/// 422: sandboxes that cannot take them.
pub const DEPENDENCIES_UNSUPPORTED: ErrorCode = deps(
    "dependencies_unsupported",
    "the runner's sandboxes cannot take inline dependencies (VM sandboxes, or a runner not \
     started as root); nothing ran",
);
/// 422: the store or the resolver's confinement could not be had.
pub const DEPENDENCIES_UNAVAILABLE: ErrorCode = deps(
    "dependencies_unavailable",
    "the package store or the resolver's confinement could not be had when the runner \
     started; nothing ran",
);
/// 500: resolving failed on the host.
pub const INTERNAL: ErrorCode = code(
    StatusCode::INTERNAL_SERVER_ERROR,
    "internal",
    "resolving the inline dependencies failed on the runner's host; nothing ran",
);
/// 408: the body came too slowly (answered before any route, by `http-limits`).
pub const BODY_TIMEOUT: ErrorCode = code(
    StatusCode::REQUEST_TIMEOUT,
    "body_timeout",
    "the body did not arrive within `RUNNER_BODY_TIMEOUT_MS`; the connection is closed",
);
/// 503: the most connections are open (answered before any route, by `http-limits`).
pub const TOO_MANY_CONNECTIONS: ErrorCode = code(
    StatusCode::SERVICE_UNAVAILABLE,
    "too_many_connections",
    "as many connections are open as `RUNNER_MAX_CONNECTIONS`; the connection is closed \
     (`Retry-After`)",
);

/// A refusal of a program's inline dependencies (422).
const fn deps(name: &'static str, when: &'static str) -> ErrorCode {
    code(StatusCode::UNPROCESSABLE_ENTITY, name, when)
}

/// The codes of a refused PEP 723 block: no program ran.
pub const DEPENDENCIES: &[ErrorCode] = &[
    BAD_SCRIPT_METADATA,
    TOO_MANY_DEPENDENCIES,
    DEPENDENCY_DENIED,
    DEPENDENCY_NOT_FOUND,
    DEPENDENCY_TOO_LARGE,
    DEPENDENCY_TIMEOUT,
    DEPENDENCY_CONFLICT,
    PYTHON_VERSION_UNSUPPORTED,
    INDEX_UNREACHABLE,
    DEPENDENCIES_DISABLED,
    DEPENDENCIES_UNSUPPORTED,
    DEPENDENCIES_UNAVAILABLE,
    INTERNAL,
    DRAINING,
];
