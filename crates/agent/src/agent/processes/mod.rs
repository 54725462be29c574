//! A session's processes: commands the API starts in the sandbox that keep running
//! between calls ([`ProcessRequest`]). Each runs `bash -c` as the program user, in a
//! session of its own; the agent keeps the newest bytes of each of its output streams
//! (`ring.rs`), feeds its standard input from a queue, and records how it ended: one
//! thread serves every process's pipes and pidfd (`io.rs`), so that a process costs the
//! session's process count nothing beyond itself.
//!
//! A run's cleanup (a timeout, an output cap) kills every other process of the sandbox
//! but these ([`tree`](super::tree) spares the sessions [`protected`] names); the
//! sandbox's end kills them all. Their statuses come from whoever reaps them first: the
//! I/O thread, when a pidfd says one exited, or a run's reaping, which hands them over
//! ([`reaped`]).
//!
//! Not for: limits (the sandbox's cgroup counts these processes as it counts a run's),
//! nor waiting for output (the runner asks again; no request here blocks).

mod io;
mod ring;
mod spawn;

use super::ended::Ended;
use ring::Ring;
use sandbox_protocol::agent::decode_bytes;
use sandbox_protocol::process::{
    OutputSlice, ProcessAnswer, ProcessEntry, ProcessFailure, ProcessRequest,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Ended processes kept in the list (the most recent).
pub const ENDED_KEPT: usize = 64;
/// Bytes queued for one process's standard input and not yet written, at most.
const STDIN_QUEUE_BYTES: usize = 4 << 20;
/// How long after a process ends its output is still awaited from what it left running
/// (which holds its pipes) before the output counts as finished.
const LINGER: Duration = Duration::from_secs(1);

/// Every process of the sandbox's session (one table per agent: the agent serves one
/// sandbox).
static TABLE: Mutex<Table> = Mutex::new(Table {
    entries: Vec::new(),
    unclaimed: None,
    retired: Vec::new(),
});

/// The processes, in the order they started.
struct Table {
    entries: Vec<Entry>,
    /// Statuses reaped by a run before the process's own reaping got to them.
    unclaimed: Option<HashMap<i32, Ended>>,
    /// Descriptors of forgotten entries, for the I/O thread to close (`io.rs`).
    retired: Vec<OwnedFd>,
}

/// One process.
struct Entry {
    pid: i32,
    command: String,
    started_at_ms: u64,
    ended: Option<(i32, u64, Instant)>,
    stdout: Output,
    stderr: Output,
    stdin: Stdin,
    /// Readable once it exits; dropped once its status is recorded.
    pidfd: Option<OwnedFd>,
}

/// One output stream: what is kept of it, and the pipe until its end.
struct Output {
    ring: Ring,
    pipe: Option<OwnedFd>,
}

/// A process's standard input, as the agent holds it.
struct Stdin {
    pipe: Option<OwnedFd>,
    /// Bytes queued and not written yet.
    pending: VecDeque<u8>,
    /// Close the pipe once `pending` is written.
    close_after: bool,
    /// More may be queued (false once closed by the caller or by the process).
    open: bool,
}

impl Entry {
    fn running(&self) -> bool {
        self.ended.is_none()
    }

    fn info(&self) -> ProcessEntry {
        ProcessEntry {
            pid: self.pid,
            command: self.command.clone(),
            started_at_ms: self.started_at_ms,
            exit_code: self.ended.map(|(code, _, _)| code),
            ended_at_ms: self.ended.map(|(_, at, _)| at),
        }
    }

    /// Ended, with both streams read to their end, or ended long enough ago that what
    /// it left running (holding its pipes) no longer counts.
    fn finished(&self) -> bool {
        self.ended.is_some_and(|(_, _, at)| {
            (self.stdout.pipe.is_none() && self.stderr.pipe.is_none()) || at.elapsed() >= LINGER
        })
    }

    /// Its descriptors, for the I/O thread to close.
    fn descriptors(self) -> impl Iterator<Item = OwnedFd> {
        [
            self.stdout.pipe,
            self.stderr.pipe,
            self.stdin.pipe,
            self.pidfd,
        ]
        .into_iter()
        .flatten()
    }
}

impl Table {
    fn running(&self) -> usize {
        self.entries.iter().filter(|e| e.running()).count()
    }

    /// Records that `pid` ended.
    fn end(&mut self, pid: i32, ended: Ended) {
        let code = match ended {
            Ended::Exited(code) => code,
            Ended::Signaled(signal) => 128 + signal,
        };
        if let Some(entry) = self.entries.iter_mut().find(|e| e.pid == pid) {
            entry.ended.get_or_insert((code, now_ms(), Instant::now()));
            entry.pidfd = None;
        }
        self.forget_oldest_ended();
    }

    /// Drops the oldest ended processes past [`ENDED_KEPT`].
    fn forget_oldest_ended(&mut self) {
        let mut ended = self.entries.iter().filter(|e| !e.running()).count();
        let mut kept = Vec::with_capacity(self.entries.len());
        for entry in std::mem::take(&mut self.entries) {
            if ended > ENDED_KEPT && !entry.running() {
                ended -= 1;
                self.retired.extend(entry.descriptors());
            } else {
                kept.push(entry);
            }
        }
        self.entries = kept;
    }

    /// Takes out the entry of `pid` (an ended process whose pid the kernel gave again).
    fn replace(&mut self, pid: i32) {
        if let Some(i) = self.entries.iter().position(|e| e.pid == pid) {
            let old = self.entries.remove(i);
            self.retired.extend(old.descriptors());
        }
    }
}

/// How many of the session's processes run.
pub(crate) fn running() -> usize {
    lock(&TABLE).running()
}

/// The sessions (by their leaders' pids) of the processes that run: a run's cleanup
/// spares every process in them.
pub(crate) fn protected() -> Vec<i32> {
    lock(&TABLE)
        .entries
        .iter()
        .filter(|e| e.running())
        .map(|e| e.pid)
        .collect()
}

/// A run's reaping found `pid` ended: if it is one of these processes, the I/O thread
/// finds the status here.
pub(crate) fn reaped(pid: i32, ended: Ended) {
    let mut table = lock(&TABLE);
    if table.entries.iter().any(|e| e.pid == pid && e.running()) {
        table
            .unclaimed
            .get_or_insert_with(HashMap::new)
            .insert(pid, ended);
    }
}

/// Does `request`; the answer, with how many processes run now.
pub(crate) fn handle(request: &ProcessRequest) -> ProcessAnswer {
    match request {
        ProcessRequest::Start {
            command,
            cwd,
            env,
            keep_bytes,
            max_running,
        } => start(command, cwd.as_deref(), env, *keep_bytes, *max_running),
        ProcessRequest::Output {
            pid,
            stdout_from,
            stderr_from,
            max_bytes,
        } => output(*pid, *stdout_from, *stderr_from, *max_bytes),
        ProcessRequest::Stdin { pid, data, eof } => stdin(*pid, data, *eof),
        ProcessRequest::Signal { pid, signal } => with_running(*pid, |_| {
            // The process's group is its pid (it leads its own session).
            let group = nix::unistd::Pid::from_raw(*pid);
            let number = nix::sys::signal::Signal::try_from(signal.number())
                .expect("every ProcessSignal is a Linux signal");
            match nix::sys::signal::killpg(group, number) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => ProcessAnswer::Done,
                Err(e) => failed(ProcessFailure::Io, format!("signalling {pid}: {e}")),
            }
        }),
        ProcessRequest::List => {
            ProcessAnswer::Listed(lock(&TABLE).entries.iter().map(Entry::info).collect())
        }
    }
}

fn start(
    command: &str,
    cwd: Option<&str>,
    env: &BTreeMap<String, String>,
    keep_bytes: u64,
    max_running: usize,
) -> ProcessAnswer {
    if let Some(cwd) = cwd {
        if !inside_home(cwd) {
            return failed(
                ProcessFailure::BadPath,
                format!("{cwd:?} is not a folder inside the home folder (relative, without '..')"),
            );
        }
    }
    let mut table = lock(&TABLE);
    if table.running() >= max_running {
        return failed(
            ProcessFailure::TooMany,
            format!(
                "{max_running} processes run in this session, the most it may have; stop one first"
            ),
        );
    }
    if let Err(e) = io::start() {
        return failed(
            ProcessFailure::Io,
            format!("starting the agent's process thread: {e}"),
        );
    }
    let started = match spawn::start(command, cwd, env) {
        Ok(started) => started,
        Err(e) if cwd.is_some() && e.kind() == std::io::ErrorKind::NotFound => {
            return failed(
                ProcessFailure::BadPath,
                format!("no folder {:?} in the home folder", cwd.unwrap_or_default()),
            )
        }
        Err(e) => return failed(ProcessFailure::Io, format!("starting the command: {e}")),
    };
    let pid = started.pid;
    table.replace(pid);
    let keep = usize::try_from(keep_bytes).unwrap_or(usize::MAX);
    let entry = Entry {
        pid,
        command: command.to_owned(),
        started_at_ms: now_ms(),
        ended: None,
        stdout: Output {
            ring: Ring::new(keep),
            pipe: Some(started.stdout),
        },
        stderr: Output {
            ring: Ring::new(keep),
            pipe: Some(started.stderr),
        },
        stdin: Stdin {
            pipe: Some(started.stdin),
            pending: VecDeque::new(),
            close_after: false,
            open: true,
        },
        pidfd: Some(started.pidfd),
    };
    let info = entry.info();
    table.entries.push(entry);
    drop(table);
    io::wake();
    ProcessAnswer::Started(info)
}

fn output(pid: i32, stdout_from: u64, stderr_from: u64, max_bytes: u64) -> ProcessAnswer {
    let table = lock(&TABLE);
    let Some(entry) = table.entries.iter().find(|e| e.pid == pid) else {
        return not_found(pid);
    };
    // Read `finished` first: output read after it is complete when it says so.
    let finished = entry.finished();
    let (stdout, stdout_from) = entry.stdout.ring.read(stdout_from, max_bytes);
    let (stderr, stderr_from) = entry.stderr.ring.read(stderr_from, max_bytes);
    ProcessAnswer::Output(OutputSlice {
        stdout: sandbox_protocol::agent::encode_bytes(&stdout),
        stderr: sandbox_protocol::agent::encode_bytes(&stderr),
        stdout_from,
        stderr_from,
        // Ended only once its output is all in: a reader that stops at the exit code
        // has read everything.
        exit_code: entry.ended.filter(|_| finished).map(|(code, _, _)| code),
        finished,
    })
}

fn stdin(pid: i32, data: &str, eof: bool) -> ProcessAnswer {
    let Ok(bytes) = decode_bytes(data) else {
        return failed(ProcessFailure::Io, "the bytes are not base64".into());
    };
    let mut table = lock(&TABLE);
    let Some(entry) = table.entries.iter_mut().find(|e| e.pid == pid) else {
        return not_found(pid);
    };
    if !entry.running() || !entry.stdin.open {
        return failed(
            ProcessFailure::Ended,
            format!("process {pid} has ended, or its standard input is closed"),
        );
    }
    if entry.stdin.pending.len() + bytes.len() > STDIN_QUEUE_BYTES {
        return failed(
            ProcessFailure::StdinFull,
            format!(
                "process {pid} has not read what was written before: at most \
                 {STDIN_QUEUE_BYTES} bytes wait for it; try again once it has read them"
            ),
        );
    }
    entry.stdin.pending.extend(bytes);
    if eof {
        entry.stdin.open = false;
        entry.stdin.close_after = true;
    }
    drop(table);
    io::wake();
    ProcessAnswer::Done
}

/// `f` on a process that runs; a failure for one that ended or never was.
fn with_running(pid: i32, f: impl FnOnce(&Entry) -> ProcessAnswer) -> ProcessAnswer {
    let table = lock(&TABLE);
    match table.entries.iter().find(|e| e.pid == pid) {
        Some(entry) if entry.running() => f(entry),
        Some(_) => failed(ProcessFailure::Ended, format!("process {pid} has ended")),
        None => not_found(pid),
    }
}

fn not_found(pid: i32) -> ProcessAnswer {
    failed(
        ProcessFailure::NotFound,
        format!("no process {pid} in this session: list them with GET /sessions/{{id}}/processes"),
    )
}

fn failed(reason: ProcessFailure, message: String) -> ProcessAnswer {
    ProcessAnswer::Failed { reason, message }
}

/// A working folder by its words: relative, without `..`.
fn inside_home(cwd: &str) -> bool {
    use std::path::{Component, Path};
    !cwd.contains('\0')
        && Path::new(cwd)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Locks the table; one poisoned by a panic goes on with its data.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
