//! Where the output of a session's background processes goes between the runs that
//! read it: a thread that reads and discards everything from the pipes handed to it,
//! so that a background process never blocks on a full pipe nor dies of a broken one.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

/// The sink thread's mailbox: new pipes, and a pipe that wakes it to take them.
struct Mailbox {
    pipes: Sender<OwnedFd>,
    wake: File,
}

static SINK: OnceLock<Option<Mutex<Mailbox>>> = OnceLock::new();

/// Hands `pipe` to the sink thread (started on first use). If the thread cannot be
/// started the pipe is closed: its writers then get EPIPE rather than block.
pub(crate) fn discard(pipe: OwnedFd) {
    let Some(mailbox) = SINK.get_or_init(start) else {
        return;
    };
    let mut mailbox = mailbox.lock().unwrap_or_else(|p| p.into_inner());
    if mailbox.pipes.send(pipe).is_ok() {
        let _ = mailbox.wake.write_all(b"1");
    }
}

fn start() -> Option<Mutex<Mailbox>> {
    let (wake_rx, wake_tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
    let (tx, rx) = channel::<OwnedFd>();
    std::thread::Builder::new()
        .name("sink".into())
        .spawn(move || {
            let mut wake = File::from(wake_rx);
            let mut pipes: Vec<File> = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                pipes.extend(rx.try_iter().map(File::from));
                let ready = wait(&wake, &pipes);
                if ready.first() == Some(&true) {
                    let _ = wake.read(&mut buf);
                }
                let mut index = 0;
                pipes.retain_mut(|pipe| {
                    index += 1;
                    // End of file or an error: no writer is left.
                    !ready[index] || matches!(pipe.read(&mut buf), Ok(n) if n > 0)
                });
            }
        })
        .ok()?;
    Some(Mutex::new(Mailbox {
        pipes: tx,
        wake: File::from(wake_tx),
    }))
}

/// Waits until the wake pipe or a pipe is readable (or closed); which are, in order.
fn wait(wake: &File, pipes: &[File]) -> Vec<bool> {
    let mut fds: Vec<PollFd> = std::iter::once(wake)
        .chain(pipes)
        .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN))
        .collect();
    let _ = poll(&mut fds, PollTimeout::NONE);
    fds.iter()
        .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
        .collect()
}
