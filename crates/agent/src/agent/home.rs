//! The home folder (and `/tmp`), opened as the program user: the descriptor from which a
//! session's file operations (`files/`) and a run's outputs (`outputs/`) reach what is
//! below it, so that neither opens a path of its own.

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
    #[error("opening {0}: {1}")]
    Open(&'static str, nix::Error),
}

/// The sandbox's `/tmp`, which a session archive holds with the home folder.
const TMP: &str = "/tmp";

/// Opens the home folder (never through a symlink), with the program user's
/// file-system ids.
pub(crate) fn open() -> Result<OwnedFd, HomeError> {
    open_folder(HOME)
}

/// Opens `/tmp` as [`open`] opens the home folder.
pub(crate) fn open_tmp() -> Result<OwnedFd, HomeError> {
    open_folder(TMP)
}

fn open_folder(path: &'static str) -> Result<OwnedFd, HomeError> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    as_program_user(|| nix::fcntl::open(path, flags, Mode::empty()))
        .map_err(HomeError::Ids)?
        .map_err(|e| HomeError::Open(path, e))
}
