//! Starting a process of the API and the threads that serve it: one reads each output
//! stream into its ring, one feeds its standard input, one waits for its end.

use super::super::child::harden;
use super::super::environment::environment;
use super::super::identity::program_user;
use super::{Entry, Stdin, TABLE};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;

/// A small stack for the threads of a process: they only copy bytes.
const THREAD_STACK: usize = 64 * 1024;
/// How many bytes one read of an output pipe takes at most.
const READ_CHUNK: usize = 16 * 1024;

/// Starts `command` under `bash -c` as the program user, in a session of its own (so
/// that its process group is its pid, and no signal of a run's cleanup reaches it), in
/// `cwd` (relative to the home folder) with `env` added to a program's environment.
/// Returns its pid and the entry's parts that serve it.
pub(super) fn start(
    command: &str,
    cwd: Option<&str>,
    env: &BTreeMap<String, String>,
) -> io::Result<Started> {
    let cwd = cwd
        .map(|c| CString::new(c).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput)))
        .transpose()?;
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(command)
        .env_clear()
        .envs(environment(&BTreeMap::new(), &[]))
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let user = program_user();
    // SAFETY: between fork and exec the child makes only async-signal-safe calls and
    // allocates nothing: setsid, `harden` (see there), and chdir on a string made
    // before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            harden(user)?;
            if let Some(cwd) = &cwd {
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as i32;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        unreachable!("every stream is piped above");
    };
    // The child is dropped without a wait: its status comes from the agent's reaping.
    drop(child);
    Ok(Started {
        pid,
        stdin,
        stdout: Box::new(stdout),
        stderr: Box::new(stderr),
    })
}

/// A process just started, with its pipes.
pub(super) struct Started {
    pub(super) pid: i32,
    pub(super) stdin: ChildStdin,
    pub(super) stdout: Box<dyn Read + Send>,
    pub(super) stderr: Box<dyn Read + Send>,
}

/// Starts the threads that serve process `pid` (already in the table): its two readers
/// and its standard input's feeder, which `entry.stdin` then holds.
pub(super) fn serve(started: Started, entry: &mut Entry) -> io::Result<()> {
    let pid = started.pid;
    spawn_thread("out", move || read_into(pid, started.stdout, true))?;
    spawn_thread("err", move || read_into(pid, started.stderr, false))?;
    let (queue, feed) = mpsc::channel::<Feed>();
    let mut pipe = started.stdin;
    spawn_thread("in", move || feed_stdin(pid, &mut pipe, feed))?;
    entry.stdin = Stdin::Open(queue);
    Ok(())
}

/// What the feeder of a standard input is handed.
pub(super) enum Feed {
    /// Bytes to write.
    Bytes(Vec<u8>),
    /// Close the pipe.
    Close,
}

fn spawn_thread(name: &str, body: impl FnOnce() + Send + 'static) -> io::Result<()> {
    std::thread::Builder::new()
        .name(format!("process-{name}"))
        .stack_size(THREAD_STACK)
        .spawn(body)
        .map(drop)
}

/// Reads a stream into its ring until end of file.
fn read_into(pid: i32, mut pipe: Box<dyn Read + Send>, stdout: bool) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => 0,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        let mut table = super::lock(&TABLE);
        let Some(entry) = table.entry_mut(pid) else {
            return;
        };
        let stream = if stdout {
            &mut entry.stdout
        } else {
            &mut entry.stderr
        };
        if n == 0 {
            stream.closed = true;
            return;
        }
        stream.ring.push(&buf[..n]);
    }
}

/// Writes what it is handed to a standard input, in order, until told to close it, the
/// process stops reading it (a broken pipe), or the entry lets go of the queue.
fn feed_stdin(pid: i32, pipe: &mut ChildStdin, feed: mpsc::Receiver<Feed>) {
    while let Ok(next) = feed.recv() {
        match next {
            Feed::Bytes(bytes) => {
                let written = pipe.write_all(&bytes);
                super::lock(&TABLE).fed(pid, bytes.len());
                if written.is_err() {
                    break;
                }
            }
            Feed::Close => break,
        }
    }
    super::lock(&TABLE).stdin_closed(pid);
}
