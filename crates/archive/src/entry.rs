//! One entry of a session archive once checked ([`Entry`]), and the checks of its words:
//! its path ([`parse_path`]) and a symlink's target ([`check_target`]).

use crate::error::Problem;
use crate::{MAX_DEPTH, MAX_PATH_BYTES};

/// An entry that passed the checks: a folder, a regular file or a symbolic link below
/// `home` or `tmp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its path in the archive, without a trailing slash: `home`, `tmp`, or one of them,
    /// a slash and plain names (`home/src/main.py`).
    pub path: Vec<u8>,
    /// What it is.
    pub kind: Kind,
    /// Its permission bits (setuid and setgid dropped; the sticky bit kept).
    pub mode: u32,
    /// When it was last modified, in seconds since the Unix epoch.
    pub mtime: u64,
}

/// What an [`Entry`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A folder.
    Dir,
    /// A regular file of `size` bytes.
    File {
        /// Its size, as its header declares it.
        size: u64,
    },
    /// A symbolic link, kept as one: its target is never followed.
    Symlink {
        /// What it points to (any words).
        target: Vec<u8>,
    },
}

/// Which of the session's folders an entry is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    /// The home folder (`/home/sandbox`).
    Home,
    /// `/tmp`.
    Tmp,
}

impl Root {
    /// The name the folder has in the archive.
    pub fn name(self) -> &'static str {
        match self {
            Root::Home => "home",
            Root::Tmp => "tmp",
        }
    }
}

/// The permission bits an archive keeps of a mode: setuid and setgid are dropped.
pub fn kept_mode(mode: u32) -> u32 {
    mode & 0o1777
}

impl Entry {
    /// The folder it is in, and the names below that folder (none for the folder itself).
    pub fn split(&self) -> (Root, Vec<&[u8]>) {
        let mut parts = self.path.split(|b| *b == b'/');
        let root = match parts.next() {
            Some(b"tmp") => Root::Tmp,
            _ => Root::Home,
        };
        (root, parts.collect())
    }

    /// The path for messages (lossy UTF-8).
    pub fn shown(&self) -> String {
        String::from_utf8_lossy(&self.path).into_owned()
    }
}

/// The path `raw` as an entry's path: relative, only plain names, below `home` or
/// `tmp`, no NUL, at most [`MAX_PATH_BYTES`] and [`MAX_DEPTH`] levels. One trailing
/// slash (a folder's, as many tar writers put it) is dropped.
pub fn parse_path(raw: &[u8]) -> Result<Vec<u8>, Problem> {
    if raw.contains(&0) {
        return Err(Problem::Nul);
    }
    if raw.len() > MAX_PATH_BYTES {
        return Err(Problem::PathTooLong(raw.len()));
    }
    let path = raw.strip_suffix(b"/").unwrap_or(raw);
    let mut depth = 0;
    for (i, part) in path.split(|b| *b == b'/').enumerate() {
        if part.is_empty() || part == b"." || part == b".." {
            return Err(Problem::NotNormal);
        }
        if i == 0 && part != b"home" && part != b"tmp" {
            return Err(Problem::Outside);
        }
        depth += 1;
    }
    if depth > MAX_DEPTH {
        return Err(Problem::TooDeep(depth));
    }
    Ok(path.to_vec())
}

/// Checks a symlink's target: any words, non-empty, no NUL, at most [`MAX_PATH_BYTES`].
pub fn check_target(target: &[u8]) -> Result<(), Problem> {
    if target.is_empty() || target.contains(&0) {
        return Err(Problem::BadTarget);
    }
    if target.len() > MAX_PATH_BYTES {
        return Err(Problem::TargetTooLong(target.len()));
    }
    Ok(())
}
