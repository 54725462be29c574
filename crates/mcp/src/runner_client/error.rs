//! Why a call to a runner did not produce a result: [`RunnerError`], with its stable code
//! and whether the same call may succeed later.

/// Why a run did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// No runner is configured.
    #[error(
        "503 sandbox runner not configured: this server has no runner to run code; \
         set SANDBOX_RUNNER_URL (and SANDBOX_RUNNER_TOKEN) and restart it"
    )]
    NotConfigured,
    /// The runner could not be reached: the request never got there, so nothing ran.
    #[error("the sandbox runner is unreachable ({0}); retrying later may help once it is back")]
    Unreachable(String),
    /// The connection broke after the request was sent: the program may have run, so
    /// it is not sent anywhere again.
    #[error(
        "the connection to the sandbox runner broke after the call was sent ({0}); the \
         program may have run, so this server did not run it again; retry only if running \
         it twice is harmless"
    )]
    ConnectionLost(String),
    /// The runner that holds a sandbox's session is gone.
    #[error(
        "session lost: the runner that held this sandbox is gone ({0}), and the sandbox's \
         files and variables with it; create a new sandbox with create_sandbox (or run \
         without sandboxId)"
    )]
    SessionLost(String),
    /// The runner that holds a snapshot is gone, and the snapshot with it (a snapshot
    /// lives on the runner it was taken on).
    #[error(
        "snapshot lost: the runner that held this snapshot is gone ({0}), and the snapshot \
         with it (a snapshot lives on the runner it was taken on); take a new snapshot of a \
         sandbox with snapshot_sandbox, or create_sandbox without snapshotId"
    )]
    SnapshotLost(String),
    /// The runner gave no answer within the call's deadline: the run's timeout and
    /// compile timeout, the runner's queue wait and its answer margin
    /// ([`Limits::answer_within`](sandbox_protocol::api::Limits::answer_within)).
    #[error("the sandbox runner did not answer within {0} ms; retrying may help")]
    TimedOut(u128),
    /// The runner refused this server's token.
    #[error(
        "the sandbox runner refused this server's credentials (401); \
         fix SANDBOX_RUNNER_TOKEN, retrying will not help"
    )]
    Unauthorized,
    /// The runner has no free sandbox now.
    #[error("the sandbox runner is busy ({status}: {message}); retry{}", retry_hint(*.retry_after))]
    Busy {
        /// 429 or 503.
        status: u16,
        /// The runner's error code (`pool_exhausted`, `queue_timeout`, `shutting_down`).
        code: String,
        /// The runner's explanation.
        message: String,
        /// Seconds the runner asked to wait, from `Retry-After`.
        retry_after: Option<u64>,
    },
    /// The runner has no such session: the sandbox was closed or expired, or its runner
    /// restarted.
    #[error(
        "this sandbox no longer exists: it was closed, or it expired (idle too long, or past \
         its expiresAt), or its runner restarted, and its files are gone; create a new sandbox \
         with create_sandbox (or run without sandboxId)"
    )]
    SandboxNotFound,
    /// The runner has no such snapshot: deleted, or past its time.
    #[error(
        "this snapshot no longer exists on its runner: it was deleted, or it expired \
         (snapshots are kept for as long as the runner's operator allows), \
         or the runner lost its data folder; take a new one with snapshot_sandbox, or \
         create_sandbox without snapshotId"
    )]
    SnapshotNotFound,
    /// The runner's storage for paused sandboxes and snapshots is full.
    #[error(
        "the runner's storage for paused sandboxes and snapshots is full ({0}); nothing \
         changed and the sandbox goes on as it was; close sandboxes you no longer need with \
         close_sandbox, or retry later"
    )]
    StorageFull(String),
    /// The runner could not write or read its stored sandboxes and snapshots.
    #[error(
        "the runner could not store or restore the sandbox's files ({0}); the sandbox is as \
         it was; retrying may help"
    )]
    StorageFailed(String),
    /// The sandbox is in the middle of another call.
    #[error(
        "this sandbox is busy with another call (one call at a time per sandbox); wait for \
         that call to finish, then retry"
    )]
    SandboxBusy,
    /// The runner holds as many sandboxes as it may.
    #[error(
        "the runner already holds as many sandboxes as it allows (RUNNER_MAX_SESSIONS); close \
         one you no longer need with close_sandbox, wait for one to expire, or run without \
         sandboxId in a one-shot sandbox"
    )]
    TooManySandboxes,
    /// A path that leaves the sandbox's home folder.
    #[error(
        "the path is not inside the sandbox's home folder /home/sandbox ({0}); give a path \
         relative to it, without '..', that does not go through a symlink out of it"
    )]
    BadPath(String),
    /// No such file in the sandbox.
    #[error("no such file in the sandbox ({0}); list_files shows the sandbox's files")]
    FileNotFound(String),
    /// The path names something that is not a regular file (a folder, a FIFO, a socket,
    /// a device).
    #[error(
        "the path is not a regular file ({0}); only regular files can be downloaded or \
         uploaded: list_files shows what each entry is"
    )]
    NotAFile(String),
    /// A file over a cap, or a full home folder.
    #[error("the file is too large: {0}")]
    FileTooLarge(String),
    /// The sandbox could not read or write a file.
    #[error("the sandbox could not read or write the file ({0})")]
    FileFailed(String),
    /// No process has this pid in the sandbox.
    #[error(
        "the sandbox has no process with this pid (ended processes are listed, the most \
         recent ones only, until the sandbox ends); list_processes shows its processes, \
         start_process starts one"
    )]
    ProcessNotFound,
    /// The process has ended, or its input was closed: it takes no more input.
    #[error(
        "the process takes no more input: it has ended, or its input was closed (eof); \
         process_output shows its output and exit code, start_process starts it again"
    )]
    ProcessEnded,
    /// The process has not read what was written to it before.
    #[error(
        "the process has not read what was written to its input before ({0}); wait for it \
         to read (process_output shows what it does), then write again"
    )]
    StdinFull(String),
    /// The command could not be started.
    #[error(
        "the command could not be started ({0}); change it, or stop a process with kill_process"
    )]
    ProcessFailed(String),
    /// The sandbox runs as many processes as it may.
    #[error(
        "the sandbox already runs as many processes as it may (the runner's \
         RUNNER_MAX_PROCESSES); stop one you no longer need with kill_process \
         (list_processes shows them), or wait for one to end"
    )]
    TooManyProcesses,
    /// The runner refused the request itself (400, 413): the same call will fail again.
    #[error("the sandbox runner refused the program ({status}: {message}); retrying the same call will not help")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The runner's explanation.
        message: String,
    },
    /// `egress` named hosts the runner's operator does not open (its 400
    /// `egress_not_allowed`): nothing was started.
    #[error(
        "egress names hosts this runner does not open to sandboxes ({message}), so nothing \
         was started; {}; retrying the same call will not help",
        open_hosts(allowed)
    )]
    EgressNotAllowed {
        /// The runner's explanation, naming the hosts outside its operator's list.
        message: String,
        /// The hosts the runner opens (its `/health` `limits.networkHosts`, as this server
        /// last heard them; see [`RunnerError::naming_open_hosts`]); empty: none.
        allowed: Vec<String>,
    },
    /// The program's inline dependencies (its PEP 723 block) were refused: nothing ran.
    #[error(
        "the program's inline dependencies (its `# /// script` block) were refused, and \
         nothing ran: {message}. Use the installed packages (this tool's description lists \
         them), or change the block"
    )]
    Dependencies {
        /// The runner's code (one of [`DEPENDENCY_CODES`](super::DEPENDENCY_CODES)).
        code: &'static str,
        /// The runner's explanation, naming the package.
        message: String,
    },
    /// The runner failed internally.
    #[error("the sandbox runner failed ({status}: {message}); retrying may help")]
    Internal {
        /// The HTTP status.
        status: u16,
        /// The runner's explanation.
        message: String,
    },
    /// The client cancelled the call before the run ended.
    #[error("the call was cancelled before the program finished")]
    Cancelled,
    /// The runner answered something that is not its API.
    #[error(
        "the sandbox runner sent an answer this server cannot read ({0}); retrying will not help"
    )]
    Malformed(String),
}

fn retry_hint(retry_after: Option<u64>) -> String {
    match retry_after {
        Some(secs) => format!(" in {secs} s"),
        None => " in a few seconds".to_owned(),
    }
}

/// What a call that asked for hosts outside the runner's list is told it may ask for.
fn open_hosts(allowed: &[String]) -> String {
    if allowed.is_empty() {
        return "this runner opens no host to its sandboxes: leave egress out".to_owned();
    }
    format!(
        "the hosts it opens are: {}; list only those in egress, or leave egress out for \
         the server's default",
        allowed.join(", ")
    )
}

impl RunnerError {
    /// This error, naming `hosts` (the runner's published `limits.networkHosts`) as the
    /// ones a call may ask for where it is [`RunnerError::EgressNotAllowed`]; any other
    /// error as it is.
    pub fn naming_open_hosts(self, hosts: &[String]) -> RunnerError {
        match self {
            RunnerError::EgressNotAllowed { message, .. } => RunnerError::EgressNotAllowed {
                message,
                allowed: hosts.to_vec(),
            },
            other => other,
        }
    }

    /// A stable machine-readable code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            RunnerError::NotConfigured => "not_configured",
            RunnerError::Unreachable(_) => "runner_unreachable",
            RunnerError::ConnectionLost(_) => "runner_connection_lost",
            RunnerError::SessionLost(_) => "session_lost",
            RunnerError::SnapshotLost(_) => "snapshot_lost",
            RunnerError::TimedOut(_) => "runner_timeout",
            RunnerError::Unauthorized => "runner_unauthorized",
            RunnerError::Busy { .. } => "runner_busy",
            RunnerError::Refused { .. } => "runner_refused",
            RunnerError::EgressNotAllowed { .. } => "egress_not_allowed",
            RunnerError::Dependencies { code, .. } => code,
            RunnerError::Internal { .. } => "runner_error",
            RunnerError::Cancelled => "cancelled",
            RunnerError::Malformed(_) => "runner_malformed",
            RunnerError::SandboxNotFound => "sandbox_not_found",
            RunnerError::SandboxBusy => "sandbox_busy",
            RunnerError::TooManySandboxes => "too_many_sandboxes",
            RunnerError::SnapshotNotFound => "snapshot_not_found",
            RunnerError::StorageFull(_) => "storage_full",
            RunnerError::StorageFailed(_) => "storage_error",
            RunnerError::BadPath(_) => "bad_path",
            RunnerError::FileNotFound(_) => "file_not_found",
            RunnerError::NotAFile(_) => "not_a_file",
            RunnerError::FileTooLarge(_) => "too_large",
            RunnerError::FileFailed(_) => "file_error",
            RunnerError::ProcessNotFound => "process_not_found",
            RunnerError::ProcessEnded => "process_ended",
            RunnerError::StdinFull(_) => "stdin_full",
            RunnerError::ProcessFailed(_) => "process_error",
            RunnerError::TooManyProcesses => "too_many_processes",
        }
    }

    /// Whether the same call may succeed later.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            RunnerError::Unreachable(_)
                | RunnerError::TimedOut(_)
                | RunnerError::Busy { .. }
                | RunnerError::Internal { .. }
                | RunnerError::SandboxBusy
                | RunnerError::TooManySandboxes
                | RunnerError::StorageFull(_)
                | RunnerError::StorageFailed(_)
                | RunnerError::TooManyProcesses
                | RunnerError::StdinFull(_)
                | RunnerError::Dependencies {
                    code: "index_unreachable" | "dependency_timeout",
                    ..
                }
        )
    }
}
