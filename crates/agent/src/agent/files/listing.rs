//! The home folder's listing: a walk from descriptors, each folder opened from the one
//! that holds it with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` of its one name
//! and each entry looked at with `fstatat(AT_SYMLINK_NOFOLLOW)`, so that a symlink is
//! listed as one and never followed, also when the program swaps one in for a folder
//! while the walk runs (the folder's open then fails, and it is not entered).
//!
//! Bounded in entries listed, in the bytes they take as JSON (so that the answer fits a
//! frame), in depth, in the names held at once and in the names read; a listing cut
//! short by any of them says `truncated`. Each folder's entries come in the order of their
//! names, each folder's before what it holds; a listing cut short gives the first ones.

use super::beneath::{kind_of, open_in};
use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::fstatat;
use sandbox_protocol::agent::{AgentMessage, FileEntry, FileKind};
use std::collections::BinaryHeap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// How deep a listing goes: the folders this many levels down are listed, what they
/// hold is not.
pub(super) const DEPTH: usize = 32;

/// The most names held at once, across the folders being walked (each name at most
/// 255 bytes).
const NAMES_HELD: usize = 50_000;

/// The most names read in one listing (from folders that hold more than it lists, only
/// the first in order are kept): what bounds its time.
const NAMES_READ: usize = 1_000_000;

/// Lists the folder `home`, at most `limit` entries taking at most `max_bytes` as JSON.
pub(super) fn list(home: BorrowedFd<'_>, limit: usize, max_bytes: usize) -> AgentMessage {
    let mut walk = Walk {
        files: Vec::new(),
        bytes: 0,
        limit,
        max_bytes,
        held: 0,
        read: 0,
        stopped: false,
        truncated: false,
    };
    if let Ok(root) = open_in(home, OsStr::new("."), OFlag::O_DIRECTORY | OFlag::O_RDONLY) {
        walk.folder(root, "", 0);
    }
    AgentMessage::Files {
        files: walk.files,
        truncated: walk.truncated,
    }
}

/// One listing.
struct Walk {
    files: Vec<FileEntry>,
    /// The bytes the listed entries take as JSON, with their commas.
    bytes: usize,
    limit: usize,
    max_bytes: usize,
    /// Names read and not yet listed, in the folders being walked.
    held: usize,
    /// Names read so far.
    read: usize,
    /// No entry more is listed.
    stopped: bool,
    /// Something was left out.
    truncated: bool,
}

impl Walk {
    /// Lists the folder `fd` (at `rel`, `depth` levels down) and, as they come, the
    /// folders it holds.
    fn folder(&mut self, fd: OwnedFd, rel: &str, depth: usize) {
        let Ok(mut dir) = Dir::from_fd(fd) else {
            return;
        };
        let room = self
            .limit
            .saturating_sub(self.files.len())
            .min(NAMES_HELD.saturating_sub(self.held));
        let names = self.names(&mut dir, room);
        self.held += names.len();
        for name in names {
            self.held -= 1;
            if !self.stopped {
                self.entry(&dir, &name, rel, depth);
            }
        }
    }

    /// The first `room` names of `dir` (but `.` and `..`) in order; more, or a folder
    /// that could not be read to its end, set `truncated`.
    fn names(&mut self, dir: &mut Dir, room: usize) -> Vec<OsString> {
        // The `room` smallest names seen, the largest on top.
        let mut kept: BinaryHeap<OsString> = BinaryHeap::new();
        for entry in dir.iter() {
            let Ok(entry) = entry else {
                self.truncated = true;
                break;
            };
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            if self.read == NAMES_READ {
                self.truncated = true;
                break;
            }
            self.read += 1;
            if kept.len() < room {
                kept.push(name.to_owned());
                continue;
            }
            self.truncated = true;
            if kept
                .peek()
                .is_some_and(|largest| name < largest.as_os_str())
            {
                kept.pop();
                kept.push(name.to_owned());
            }
        }
        kept.into_sorted_vec()
    }

    /// Lists `name` of `dir` and, if it is a folder, what it holds.
    fn entry(&mut self, dir: &Dir, name: &OsStr, rel: &str, depth: usize) {
        // Gone meanwhile: not listed.
        let Ok(stat) = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            return;
        };
        let kind = kind_of(stat.st_mode);
        let shown = name.to_string_lossy();
        let path = if rel.is_empty() {
            shown.into_owned()
        } else {
            format!("{rel}/{shown}")
        };
        let size = match kind {
            FileKind::Dir => 0,
            _ => stat.st_size.max(0) as u64,
        };
        let entry = FileEntry { path, size, kind };
        let path = entry.path.clone();
        if !self.add(entry) || kind != FileKind::Dir {
            return;
        }
        // A symlink swapped in since the fstatat fails to open (ELOOP), and one swapped in
        // for a folder above was never entered: what the walk holds is a real folder below
        // the home folder. Not entered either: one gone meanwhile.
        let Ok(sub) = open_in(dir.as_fd(), name, OFlag::O_DIRECTORY | OFlag::O_RDONLY) else {
            return;
        };
        if depth + 1 < DEPTH {
            self.folder(sub, &path, depth + 1);
        } else if holds_anything(sub) {
            self.truncated = true;
        }
    }

    /// Adds `entry` if the limits leave room for it; otherwise stops the listing.
    fn add(&mut self, entry: FileEntry) -> bool {
        let cost = serde_json::to_vec(&entry).map_or(usize::MAX, |json| json.len() + 1);
        if self.files.len() >= self.limit || cost > self.max_bytes.saturating_sub(self.bytes) {
            self.stopped = true;
            self.truncated = true;
            return false;
        }
        self.bytes += cost;
        self.files.push(entry);
        true
    }
}

/// Whether the folder `fd` holds any entry.
fn holds_anything(fd: OwnedFd) -> bool {
    let Ok(mut dir) = Dir::from_fd(fd) else {
        return false;
    };
    let any = dir.iter().filter_map(Result::ok).any(|entry| {
        let name = entry.file_name().to_bytes();
        name != b"." && name != b".."
    });
    any
}
