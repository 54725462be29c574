//! The one thread that serves every process's pipes and sees each end: it polls their
//! output pipes (into the rings), their standard inputs with bytes waiting, their pidfds
//! and a wake pipe (a process started, bytes queued), and does each step without
//! blocking, so that a process that never reads or never writes holds nothing up.
//!
//! Descriptors are closed only by this thread (those of forgotten entries wait in the
//! table's `retired` until its next round), so that none it polls is closed under it.

use super::{lock, Ended, TABLE};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::OnceLock;

/// The most bytes read from one pipe in one round (then the others get their turn).
const ROUND_BYTES: usize = 1 << 20;
/// How long a round waits with nothing to do (only bounds how late a retired
/// descriptor is closed).
const IDLE_ROUND_MS: u16 = 1000;

/// The write end of the wake pipe, once the thread runs.
static WAKE: OnceLock<OwnedFd> = OnceLock::new();

/// What a polled descriptor is to its process.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stdout,
    Stderr,
    Stdin,
    Exit,
}

/// Starts the thread, once.
pub(super) fn start() -> io::Result<()> {
    if WAKE.get().is_some() {
        return Ok(());
    }
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
    std::thread::Builder::new()
        .name("processes".into())
        .stack_size(256 * 1024)
        .spawn(move || serve(read))?;
    let _ = WAKE.set(write);
    Ok(())
}

/// Has the thread look at the table again (a process started, bytes queued).
pub(super) fn wake() {
    if let Some(wake) = WAKE.get() {
        // A full pipe already holds a wake-up.
        let _ = nix::unistd::write(wake, &[1]);
    }
}

fn serve(wake: OwnedFd) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let watched = watched();
        let ready = wait(&wake, &watched);
        for (pid, kind, fd) in ready {
            step(pid, kind, fd, &mut buf);
        }
    }
}

/// Closes what was retired, and lists what to poll: every open output pipe, every
/// standard input with bytes waiting (or a close), every pidfd of a running process.
fn watched() -> Vec<(i32, Kind, RawFd)> {
    let mut table = lock(&TABLE);
    table.retired.clear();
    let mut watched = Vec::new();
    for e in &table.entries {
        let mut add = |kind, fd: &Option<OwnedFd>| {
            if let Some(fd) = fd {
                watched.push((e.pid, kind, fd.as_raw_fd()));
            }
        };
        add(Kind::Stdout, &e.stdout.pipe);
        add(Kind::Stderr, &e.stderr.pipe);
        if !e.stdin.pending.is_empty() || e.stdin.close_after {
            add(Kind::Stdin, &e.stdin.pipe);
        }
        add(Kind::Exit, &e.pidfd);
    }
    watched
}

/// Polls the wake pipe and `watched`; the ready ones.
fn wait(wake: &OwnedFd, watched: &[(i32, Kind, RawFd)]) -> Vec<(i32, Kind, RawFd)> {
    // SAFETY: every descriptor listed is owned by the table and closed only by this
    // thread (retired ones at the start of its next round), so each stays open for
    // the poll.
    let borrowed: Vec<BorrowedFd<'_>> = watched
        .iter()
        .map(|(_, _, fd)| unsafe { BorrowedFd::borrow_raw(*fd) })
        .collect();
    let mut fds = vec![PollFd::new(wake.as_fd(), PollFlags::POLLIN)];
    for ((_, kind, _), fd) in watched.iter().zip(&borrowed) {
        let events = if *kind == Kind::Stdin {
            PollFlags::POLLOUT
        } else {
            PollFlags::POLLIN
        };
        fds.push(PollFd::new(*fd, events));
    }
    match poll(&mut fds, PollTimeout::from(IDLE_ROUND_MS)) {
        Ok(_) | Err(Errno::EINTR) => {}
        Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
    }
    if fds[0].revents().is_some_and(|r| !r.is_empty()) {
        let mut drain = [0u8; 64];
        while matches!(nix::unistd::read(wake, &mut drain), Ok(n) if n > 0) {}
    }
    fds[1..]
        .iter()
        .zip(watched)
        .filter(|(fd, _)| fd.revents().is_some_and(|r| !r.is_empty()))
        .map(|(_, w)| *w)
        .collect()
}

/// Serves one ready descriptor of process `pid`, if it is still the one polled.
fn step(pid: i32, kind: Kind, fd: RawFd, buf: &mut [u8]) {
    let mut table = lock(&TABLE);
    if kind == Kind::Exit {
        let ended = reap(pid, &mut table.unclaimed);
        if let Some(ended) = ended {
            table.end(pid, ended);
        }
        return;
    }
    let Some(entry) = table.entries.iter_mut().find(|e| e.pid == pid) else {
        return;
    };
    match kind {
        Kind::Stdout | Kind::Stderr => {
            let output = if kind == Kind::Stdout {
                &mut entry.stdout
            } else {
                &mut entry.stderr
            };
            if output.pipe.as_ref().map(AsRawFd::as_raw_fd) == Some(fd) {
                output.drain(buf);
            }
        }
        Kind::Stdin => {
            if entry.stdin.pipe.as_ref().map(AsRawFd::as_raw_fd) == Some(fd) {
                entry.stdin.feed();
            }
        }
        Kind::Exit => {}
    }
}

/// How `pid` ended, if it has: reaped here, or by a run's reaping first.
fn reap(pid: i32, unclaimed: &mut Option<std::collections::HashMap<i32, Ended>>) -> Option<Ended> {
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid writes the status into a live local integer; WNOHANG never blocks.
    let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if got == pid {
        return Some(Ended::of(status));
    }
    if got < 0 && Errno::last() == Errno::ECHILD {
        // A run reaped it: its status is recorded, or is about to be (the pidfd stays
        // readable, so this is asked again next round).
        return unclaimed.as_mut().and_then(|u| u.remove(&pid));
    }
    None
}

impl super::Output {
    /// Reads what the pipe holds (at most [`ROUND_BYTES`]) into the ring; closes the
    /// pipe at its end.
    fn drain(&mut self, buf: &mut [u8]) {
        let mut taken = 0;
        while taken < ROUND_BYTES {
            let Some(pipe) = &self.pipe else { return };
            match nix::unistd::read(pipe, buf) {
                Ok(0) => self.pipe = None,
                Ok(n) => {
                    self.ring.push(&buf[..n]);
                    taken += n;
                    continue;
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => {}
                Err(_) => self.pipe = None,
            }
            return;
        }
    }
}

impl super::Stdin {
    /// Writes what waits, as much as the pipe takes; closes it when asked once all is
    /// written, or when the process no longer reads it.
    fn feed(&mut self) {
        while !self.pending.is_empty() {
            let Some(pipe) = &self.pipe else { return };
            let (front, _) = self.pending.as_slices();
            match nix::unistd::write(pipe, front) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return,
                Err(_) => {
                    self.pipe = None;
                    self.pending.clear();
                    self.open = false;
                    return;
                }
            }
        }
        if self.close_after {
            self.pipe = None;
            self.close_after = false;
        }
    }
}
