//! `sandbox-agent`: the agent as its own (statically linkable) binary, for sandboxes
//! that start it by path. It serves one job on the channel inherited as file
//! descriptor 3.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;

/// The descriptor on which the channel is inherited.
const CHANNEL_FD: i32 = 3;

fn main() -> ExitCode {
    // SAFETY: descriptor 3 is the channel by this program's contract with its launcher,
    // and nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(CHANNEL_FD) };
    let mut channel = UnixStream::from(fd);
    match sandbox_agent::serve(&mut channel) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sandbox-agent: {e}");
            ExitCode::FAILURE
        }
    }
}
