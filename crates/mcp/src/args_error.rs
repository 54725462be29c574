//! Why a tool call's arguments cannot be used: one error the model is told, so that it
//! can correct its call (every tool's parsing returns it).

/// Arguments a call cannot run with; the model is told so and can correct them.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// `code` is absent or not a string.
    #[error("invalid arguments: `code` (a string holding the program) is required")]
    MissingCode,
    /// `timeoutMs` is not an integer in range.
    #[error("invalid arguments: `timeoutMs` must be an integer from 1 to {max}")]
    BadTimeout {
        /// The runner's largest timeout.
        max: u64,
    },
    /// `sandboxId` is not a string.
    #[error("invalid arguments: `sandboxId` must be the string create_sandbox returned")]
    BadSandboxId,
    /// `snapshotId` is not a string.
    #[error("invalid arguments: `snapshotId` must be the string snapshot_sandbox returned")]
    BadSnapshotId,
    /// `count` is not an integer in range.
    #[error("invalid arguments: `count` must be a whole number from 1 to {max}")]
    BadCount {
        /// The most copies.
        max: u64,
    },
    /// A required argument is absent or not a string.
    #[error("invalid arguments: `{field}` ({what}) is required")]
    Missing {
        /// The argument's name.
        field: &'static str,
        /// What it holds.
        what: &'static str,
    },
    /// A duration is not a whole number of milliseconds.
    #[error("invalid arguments: `{0}` must be a whole number of milliseconds, at least 1")]
    BadDuration(&'static str),
    /// `encoding` is neither `utf-8` nor `base64`.
    #[error(
        "invalid arguments: `encoding` must be \"utf-8\" (the default, for text) or \"base64\""
    )]
    BadEncoding,
    /// `content` is not base64.
    #[error("invalid arguments: `content` is not valid base64 ({0}); send the file's bytes in standard base64 with encoding \"base64\", or text with encoding \"utf-8\"")]
    BadBase64(String),
    /// A path that is not inside the home folder.
    #[error("invalid arguments: path {0:?} is not inside the sandbox's home folder /home/sandbox; give a path relative to it (such as data/input.csv or outputs/plot.png), without '..'")]
    BadPath(String),
    /// `pid` is not a process id.
    #[error("invalid arguments: `pid` must be the whole number start_process returned (list_processes shows them)")]
    BadPid,
    /// `cursor` is not one this server wrote.
    #[error("invalid arguments: `cursor` is not a cursor process_output returned; pass the cursor of its previous answer as it is, or omit it to read from the start")]
    BadCursor,
    /// `cursor` was written for another process's output.
    #[error("invalid arguments: this `cursor` is for the output of process {cursor}, not of process {pid}; pass the cursor of process {pid}'s previous answer, or omit it to read from the start")]
    CursorOfAnotherProcess {
        /// The process the cursor is for.
        cursor: i32,
        /// The process asked for.
        pid: i32,
    },
    /// `waitMs` is not an integer in range.
    #[error("invalid arguments: `waitMs` must be a whole number of milliseconds from 0 to {max}")]
    BadWait {
        /// The longest wait.
        max: u64,
    },
    /// `signal` is not one of the signals a process may be sent.
    #[error("invalid arguments: `signal` must be one of {names} (TERM when absent), not {given}")]
    BadSignal {
        /// What was given, cut short.
        given: String,
        /// The signals' names.
        names: String,
    },
    /// `egress` is not a list of host names (at most the number given).
    #[error("invalid arguments: `egress` must be a list of at most {0} host names, such as [\"pypi.org\"]")]
    BadEgress(usize),
    /// A flag is not a boolean.
    #[error("invalid arguments: `{0}` must be true or false")]
    BadFlag(&'static str),
    /// `language` (run_code's) is not one the runner offers.
    #[error("invalid arguments: unknown language {given:?}: this server runs {offered}")]
    UnknownLanguage {
        /// What was given, cut short.
        given: String,
        /// The offered languages' names, comma-separated.
        offered: String,
    },
}
