//! The home folder, opened as the program user: the descriptor from which a session's
//! file operations (`files/`) and a run's outputs (`outputs/`) reach what is below it,
//! so that neither opens a path of its own.

use super::identity::as_program_user;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use sandbox_jail::layout::HOME;
use std::io;
use std::os::fd::OwnedFd;

/// Why the home folder could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HomeError {
    /// The thread could not take the program user's file-system ids.
    #[error("taking the program user's ids: {0}")]
    Ids(io::Error),
    /// The folder could not be opened (as the program user: one that took its own
    /// rights away cannot).
    #[error("opening the home folder: {0}")]
    Open(nix::Error),
}

/// Opens the home folder (never through a symlink), with the program user's
/// file-system ids.
pub(crate) fn open() -> Result<OwnedFd, HomeError> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    as_program_user(|| nix::fcntl::open(HOME, flags, Mode::empty()))
        .map_err(HomeError::Ids)?
        .map_err(HomeError::Open)
}
