//! Messages between the runner and the agent inside a sandbox.
//!
//! The exchange, over one stream (a socketpair in the process backend, a serial
//! console or vsock in a VM), each message one [`frame`](crate::frame):
//!
//! 1. agent -> runner: [`AgentMessage::Ready`] once the sandbox is set up;
//! 2. optionally, runner -> agent: [`Prepare`], and agent -> runner: [`AgentMessage::Ready`]
//!    again once the interpreter waits for its program;
//! 3. runner -> agent: one [`Job`];
//! 4. agent -> runner: [`AgentMessage::Done`] or [`AgentMessage::Failed`]; before it, for
//!    a job marked [`Job::stream`], [`AgentMessage::Output`] frames as the program writes,
//!    and for a job that offers [`Job::tools`], an [`AgentMessage::ToolCall`] for each call
//!    the program makes, which the runner answers (meanwhile, in any order) with a
//!    [`RunnerMessage::ToolReply`]. A reply that comes after the job's answer is dropped.
//!
//! Steps 2 and 3 travel as a [`RunnerMessage`].
//!
//! A session's sandbox may also get [`FileRequest`]s, before and between its jobs. Most
//! are one frame each way; the two that move a session archive (its home folder and
//! `/tmp` as one tar stream, see the `sandbox-archive` crate) take several:
//!
//! - [`FileRequest::Pack`]: the agent answers with [`AgentMessage::ArchiveChunk`] frames
//!   (each at most [`ARCHIVE_CHUNK_BYTES`] of archive), then [`AgentMessage::Packed`], or
//!   [`AgentMessage::FileFailed`] after any chunks (the archive is then of no use).
//! - [`FileRequest::Unpack`], then the archive as [`FileRequest::UnpackChunk`] frames,
//!   the last marked `last`; the agent reads every chunk up to the last, also after it
//!   has refused the archive, and answers once, after it: [`AgentMessage::Unpacked`] or
//!   [`AgentMessage::FileFailed`].
//!
//! After a one-shot job the agent waits for the runner to close the channel, and exits.
//! After a job marked [`Job::session`], steps 3 and 4 repeat: a session's sandbox takes
//! jobs until the runner closes the channel.
//!
//! A VM that is to become a snapshot template gets, before step 2, a [`Snapshot`]: the
//! agent answers Ready, closes the channel and keeps reconnecting. The runner snapshots
//! the VM meanwhile; every VM restored from it reconnects, gets a [`Reseed`] of fresh
//! entropy for its kernel (so that no two restored VMs share random-number state), and
//! answers Ready: from there on the exchange is steps 2 to 4.
//!
//! A session's VM may get a [`Snapshot`] marked [`Snapshot::session`] before or between
//! its calls, when the runner saves it whole (memory and devices): its init answers
//! Ready and waits, on the same channel where the VMM keeps it across a restore (QEMU's
//! serial port) or on a new connection where it does not (Firecracker's vsock), for a
//! [`Reseed`], which it applies before it answers Ready and serves the session on. A
//! save that fails is undone the same way: the runner lets the VM run and reseeds it.

use crate::files::OutputFile;
pub use crate::files::{FileEntry, FileKind};
use crate::language::{self, Recipe};
use crate::process::{ProcessAnswer, ProcessRequest, Stream};
use crate::tools::{ToolCall, ToolReply, ToolsOffer};
use crate::Lang;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One program to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// The language.
    pub lang: Lang,
    /// How the language runs (the runner's table row for it).
    pub recipe: Recipe,
    /// The program text, written to a file that the interpreter is given.
    pub code: String,
    /// Wall-clock limit for the whole process tree, in milliseconds.
    pub timeout_ms: u64,
    /// Bytes of standard output kept; more stops the program.
    pub stdout_cap: usize,
    /// Bytes of standard error kept; more stops the program.
    pub stderr_cap: usize,
    /// The sandbox lives on after this job (a session): more jobs may follow, and the
    /// processes the program leaves running in the background stay. A one-shot job
    /// (false) is the sandbox's only one, and nothing of it outlives its answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session: bool,
    /// A session's job in a sandbox that no cgroup freezer holds between its calls (one
    /// without cgroups: `--unsafe-no-resource-limits`): the agent stops the session's
    /// processes with SIGSTOP once the run ends, and wakes them with SIGCONT when the
    /// next starts. A stand-in only: a program can wake itself with a timer that sends
    /// it SIGCONT. Where there is a freezer (false), the runner (or a VM's init) freezes
    /// the sandbox's cgroup between calls and the agent stops nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sigstop_between_runs: bool,
    /// Collect the files the job writes under the home's `outputs/` folder into the
    /// answer, within these caps; absent: collect none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<OutputCaps>,
    /// Folders put on a Python program's import path ahead of the package set: the
    /// inline dependencies its PEP 723 block declared, mounted read-only for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python_paths: Vec<String>,
    /// Send the program's output as it comes ([`AgentMessage::Output`], before the
    /// answer), as well as in the answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// The tools the program may call ([`crate::tools`]): the agent writes the `tools`
    /// module for them, listens on [`SOCKET`](crate::tools::SOCKET) while the job runs,
    /// and sends each call as an [`AgentMessage::ToolCall`]; only for a streamed job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsOffer>,
}

impl Job {
    /// The longest the agent takes over the job ([`language::run_time`]): its compile
    /// step's timeout and its own.
    pub fn run_time(&self) -> Duration {
        language::run_time(self.timeout_ms, self.recipe.compile_timeout_ms)
    }
}

/// How much of `outputs/` a job's answer may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OutputCaps {
    /// A file larger than this is listed without its bytes.
    pub file_cap: u64,
    /// The bytes of all files carried together; files past it are listed without theirs.
    pub total_cap: u64,
    /// Files listed at most; more set `outputs_truncated`.
    pub max_files: usize,
}

/// Asks the agent to start the interpreter of `prepare` ahead of the job, so that a job in
/// that language pays no interpreter start-up. A job in another language still runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prepare {
    /// The language whose interpreter to start.
    pub prepare: Lang,
    /// How it runs: its [`Recipe::loader`] is what starts.
    pub recipe: Recipe,
    /// Modules a Python interpreter imports while it waits (warm imports), so that the
    /// program's own imports of them cost nothing; one that fails to import is skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warm_imports: Vec<String>,
    /// Whether the agent then runs its side of a job's exchange once on samples, while
    /// the sandbox waits: under emulation (QEMU's TCG) a process translates the code it
    /// runs for the first time, which the job would otherwise pay. A VM's init sets it
    /// for its sandbox's agent; the runner never does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rehearse: bool,
}

/// Tells the agent of a VM that it is about to be snapshotted (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// Always true (the field names the message).
    pub snapshot: bool,
    /// A session's VM, saved with its interpreters and processes on purpose (a
    /// template's snapshot, unmarked, comes before any Prepare).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session: bool,
}

/// What a VM restored from a snapshot needs first: fresh entropy for its kernel, and
/// the time (its clock stopped when the snapshot was taken).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reseed {
    /// Random bytes from the host, at least [`Reseed::MIN_BYTES`].
    pub reseed: Vec<u8>,
    /// The host's wall-clock time, in milliseconds since the Unix epoch.
    pub unix_time_ms: u64,
}

impl Reseed {
    /// The fewest bytes a reseed carries (256 bits).
    pub const MIN_BYTES: usize = 32;
}

/// A file operation in a session's home folder (`/home/sandbox`), done by the agent
/// inside the sandbox, as the program's user, never following a path out of the home.
/// Paths are relative to the home folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "file", rename_all = "snake_case", deny_unknown_fields)]
pub enum FileRequest {
    /// Write a file (its folders made as needed); answered by [`AgentMessage::Stored`].
    Put {
        /// Where, relative to the home folder.
        path: String,
        /// The bytes, as base64 ([`encode_bytes`]).
        data: String,
    },
    /// Read a file of at most `cap` bytes; answered by [`AgentMessage::File`].
    Get {
        /// Which, relative to the home folder.
        path: String,
        /// The most bytes accepted; a larger file is refused.
        cap: u64,
    },
    /// List the home folder, recursively, at most `limit` entries and `max_bytes` of
    /// entries' JSON (the agent lowers it to [`LISTING_BYTES_CEILING`]); answered by
    /// [`AgentMessage::Files`].
    List {
        /// The most entries listed.
        limit: usize,
        /// The most bytes the listed entries take as JSON.
        max_bytes: usize,
    },
    /// Write the session archive of the home folder and `/tmp`, at most `max_bytes` of
    /// it (the entries it may hold follow: each takes at least a 512-byte header);
    /// answered by [`AgentMessage::ArchiveChunk`] frames, then [`AgentMessage::Packed`]
    /// or [`AgentMessage::FileFailed`].
    Pack {
        /// The most bytes of archive.
        max_bytes: u64,
    },
    /// Restore a session archive into the home folder and `/tmp`; the archive follows as
    /// [`FileRequest::UnpackChunk`] frames. Answered once, after the last chunk, by
    /// [`AgentMessage::Unpacked`] or [`AgentMessage::FileFailed`].
    Unpack {
        /// The most bytes of archive.
        max_bytes: u64,
        /// The most entries.
        max_entries: u64,
    },
    /// A piece of the archive of an [`Unpack`](FileRequest::Unpack), in order.
    UnpackChunk {
        /// The bytes, as base64 ([`encode_bytes`]), at most [`ARCHIVE_CHUNK_BYTES`].
        data: String,
        /// The archive's last piece: the answer follows.
        last: bool,
    },
}

/// The most bytes of archive one [`AgentMessage::ArchiveChunk`] or
/// [`FileRequest::UnpackChunk`] carries (1.4 MiB of base64: far below a frame's cap).
pub const ARCHIVE_CHUNK_BYTES: usize = 1024 * 1024;

/// The most bytes of entries a listing carries, whatever the request asks: half a frame,
/// so that a listing's answer always fits one with room to spare.
pub const LISTING_BYTES_CEILING: usize = crate::frame::MAX_FRAME_LEN / 2;

/// Why a file operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFailure {
    /// The path leaves the home folder (through `..`), goes through or to a symlink, or
    /// through something that is not a folder.
    BadPath,
    /// No such file.
    NotFound,
    /// Not a regular file (a folder, a FIFO, a socket, a device): refused without
    /// reading or writing it.
    NotAFile,
    /// Over the cap, or the home folder is full.
    TooLarge,
    /// Another failure.
    Io,
}

/// Bytes as the base64 that file messages carry.
pub fn encode_bytes(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The bytes of a file message's base64.
pub fn decode_bytes(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text)
}

/// What the runner sends: a [`Prepare`], a [`Job`], a [`Snapshot`], a [`Reseed`], a
/// [`ToolReply`] or a [`FileRequest`] (told apart by their fields, so a plain Job frame is a valid
/// RunnerMessage).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RunnerMessage {
    /// A file operation (a session's).
    File(FileRequest),
    /// A process operation (a session's).
    Process(ProcessRequest),
    /// Start an interpreter ahead of the job.
    Prepare(Prepare),
    /// Get ready to be snapshotted.
    Snapshot(Snapshot),
    /// Mix this into the kernel's random pool (after a restore).
    Reseed(Reseed),
    /// The answer to a program's call ([`AgentMessage::ToolCall`]), while its job runs
    /// (or, late, after it ended: the agent then drops it).
    ToolReply(ToolReply),
    /// Run this.
    Job(Job),
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
    /// A file was written.
    Stored,
    /// A file's bytes, as base64.
    File {
        /// The bytes ([`decode_bytes`]).
        data: String,
    },
    /// The home folder's listing.
    Files {
        /// Its entries, each folder's by name and before what they hold.
        files: Vec<FileEntry>,
        /// The listing stopped at one of its bounds (entries, bytes, depth): more exist.
        truncated: bool,
    },
    /// A file operation was refused.
    FileFailed {
        /// Why, for the API's error code.
        reason: FileFailure,
        /// A sentence for people.
        message: String,
    },
    /// A process operation's answer.
    Process {
        /// What it did.
        answer: ProcessAnswer,
        /// How many of the session's processes run now: none, and the session may be
        /// frozen between its calls.
        running: usize,
    },
    /// A piece of the session archive a [`FileRequest::Pack`] asked for, in order.
    ArchiveChunk {
        /// The bytes, as base64 ([`encode_bytes`]), at most [`ARCHIVE_CHUNK_BYTES`].
        data: String,
    },
    /// The session archive of a [`FileRequest::Pack`] was sent whole.
    Packed {
        /// Its bytes.
        bytes: u64,
        /// Its entries.
        entries: u64,
        /// Entries left out, as the archive carries none of their kind: FIFOs, sockets,
        /// devices.
        #[serde(default, skip_serializing_if = "is_zero_u64")]
        skipped: u64,
    },
    /// The session archive of a [`FileRequest::Unpack`] was restored.
    Unpacked {
        /// Its bytes.
        bytes: u64,
        /// Its entries.
        entries: u64,
    },
    /// Output of the job in flight (one marked [`Job::stream`]), as the program wrote it.
    Output {
        /// Which stream.
        stream: Stream,
        /// The bytes, as base64 ([`encode_bytes`]), at most [`OUTPUT_CHUNK_BYTES`].
        data: String,
    },
    /// A call the program made to an offered tool ([`Job::tools`]), before the job's
    /// answer; the runner answers with a [`RunnerMessage::ToolReply`] of the same id.
    ToolCall(ToolCall),
}

/// The most bytes one [`AgentMessage::Output`] carries.
pub const OUTPUT_CHUNK_BYTES: usize = 64 * 1024;

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
    /// Wall-clock time from spawn to exit, in milliseconds (a compile step's included).
    pub duration_ms: u64,
    /// The timeout expired and the process tree was killed.
    pub timed_out: bool,
    /// The program did not compile: the output and exit code are the compiler's, and
    /// the program never ran.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compile_error: bool,
    /// Standard output went over its cap and the process tree was killed.
    pub stdout_truncated: bool,
    /// Standard error went over its cap and the process tree was killed.
    pub stderr_truncated: bool,
    /// The out-of-memory killer ended a process of the job. Only what can read the
    /// sandbox's cgroup can tell: a VM's init adds it (the cgroup is the guest's); the
    /// agent itself leaves it absent, and on a host the runner reads the cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_killed: Option<bool>,
    /// The files the job wrote under `outputs/` (see [`Job::outputs`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<OutputFile>,
    /// More files were written under `outputs/` than the answer lists.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outputs_truncated: bool,
    /// A session's interpreter ended with this job (a timeout, an output cap, running out
    /// of memory, or the program ending it): what the earlier jobs left in it is gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub state_lost: bool,
    /// How many of the session's processes ([`ProcessRequest`]) run after the job: none,
    /// and the session may be frozen until its next call.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub processes_running: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn python() -> Recipe {
        Recipe {
            file: "main.py".into(),
            compile: Vec::new(),
            run: vec!["python3".into(), "{file}".into()],
            env: Default::default(),
            compile_timeout_ms: 0,
            loader: None,
            memory_mb: None,
        }
    }

    fn decode(text: &str) -> RunnerMessage {
        serde_json::from_str(text).expect("decodes")
    }

    #[test]
    fn each_runner_message_is_told_apart_by_its_fields() {
        assert_eq!(
            decode(
                r#"{"prepare":"python","recipe":{"file":"main.py","run":["python3","{file}"]}}"#
            ),
            RunnerMessage::Prepare(Prepare {
                prepare: Lang::PYTHON,
                recipe: python(),
                warm_imports: Vec::new(),
                rehearse: false,
            })
        );
        assert_eq!(
            decode(r#"{"snapshot":true}"#),
            RunnerMessage::Snapshot(Snapshot {
                snapshot: true,
                session: false,
            })
        );
        assert_eq!(
            decode(r#"{"snapshot":true,"session":true}"#),
            RunnerMessage::Snapshot(Snapshot {
                snapshot: true,
                session: true,
            })
        );
        assert_eq!(
            decode(r#"{"reseed":[1,2,3],"unix_time_ms":5}"#),
            RunnerMessage::Reseed(Reseed {
                reseed: vec![1, 2, 3],
                unix_time_ms: 5
            })
        );
        let job = Job {
            lang: Lang::BASH,
            recipe: python(),
            code: "echo 1".into(),
            timeout_ms: 1000,
            stdout_cap: 10,
            stderr_cap: 10,
            session: false,
            sigstop_between_runs: false,
            outputs: None,
            python_paths: Vec::new(),
            stream: false,
            tools: None,
        };
        let text = serde_json::to_string(&RunnerMessage::Job(job.clone())).unwrap();
        assert_eq!(decode(&text), RunnerMessage::Job(job));
    }

    #[test]
    fn archive_requests_are_file_requests() {
        assert_eq!(
            decode(r#"{"file":"pack","max_bytes":10}"#),
            RunnerMessage::File(FileRequest::Pack { max_bytes: 10 })
        );
        assert_eq!(
            decode(r#"{"file":"unpack_chunk","data":"","last":true}"#),
            RunnerMessage::File(FileRequest::UnpackChunk {
                data: String::new(),
                last: true
            })
        );
    }

    #[test]
    fn a_full_archive_chunk_fits_a_frame() {
        let chunk = AgentMessage::ArchiveChunk {
            data: encode_bytes(&vec![0xff; ARCHIVE_CHUNK_BYTES]),
        };
        let frame = crate::frame::encode(&chunk).expect("fits");
        assert!(frame.len() < crate::frame::MAX_FRAME_LEN / 8);
    }
}
