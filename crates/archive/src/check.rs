//! [`Checker`]: the check of each entry of an archive in turn, against its words, its
//! type, the entries before it and the archive's [`Limits`].
//!
//! The paths seen are kept as SHA-256 digests (32 bytes each, whatever a path's
//! length): a digest shared by two paths could only refuse an archive, never let a
//! wrong one through.

use crate::entry::{check_target, kept_mode, parse_path, Entry, Kind};
use crate::error::{ArchiveError, Problem};
use crate::Limits;
use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// The bytes of a tar block: every header, and the unit data is padded to.
pub const BLOCK: u64 = 512;

/// The end-of-archive marker: two zero blocks.
pub const END_MARKER: u64 = 2 * BLOCK;

/// What an entry read (or walked) claims to be, before the checks.
#[derive(Debug, Clone, Copy)]
pub enum Claimed<'a> {
    /// A folder.
    Dir,
    /// A regular file whose header declares `size` bytes.
    File {
        /// The declared size.
        size: u64,
    },
    /// A symbolic link to `target`.
    Symlink {
        /// Its target.
        target: &'a [u8],
    },
    /// Anything else (a hard link, a device, a FIFO...), described for the message.
    Other(&'static str),
}

/// One entry as read, before the checks.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// Its path, as the archive gives it.
    pub path: &'a [u8],
    /// What it claims to be.
    pub claimed: Claimed<'a>,
    /// Its mode bits as the header gives them.
    pub mode: u32,
    /// Its time of last modification, in seconds since the Unix epoch.
    pub mtime: u64,
}

/// The checks of an archive's entries, in order, with what they need of the entries
/// before: the paths seen, those that are not folders, and the totals.
#[derive(Debug)]
pub struct Checker {
    limits: Limits,
    seen: HashSet<[u8; 32]>,
    not_folders: HashSet<[u8; 32]>,
    bytes: u64,
    entries: u64,
}

impl Checker {
    /// A checker for an archive within `limits`.
    pub fn new(limits: Limits) -> Self {
        Checker {
            limits,
            seen: HashSet::new(),
            not_folders: HashSet::new(),
            bytes: END_MARKER,
            entries: 0,
        }
    }

    /// Checks the next entry: its path's words, its type, that no earlier entry had
    /// its path or was a symlink or file above it, and that it fits the limits (its
    /// declared size counted before any of its data is read). The checked entry, or
    /// why it is refused.
    pub fn check(&mut self, candidate: Candidate<'_>) -> Result<Entry, ArchiveError> {
        self.judge(candidate)
            .map_err(|problem| ArchiveError::Entry {
                entry: String::from_utf8_lossy(candidate.path).into_owned(),
                problem,
            })
    }

    /// Entries checked so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// The bytes the entries checked so far take in an archive written by
    /// [`Writer`](crate::Writer), with its end marker (see [`cost`]).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn judge(&mut self, candidate: Candidate<'_>) -> Result<Entry, Problem> {
        let path = parse_path(candidate.path)?;
        let kind = match candidate.claimed {
            Claimed::Dir => Kind::Dir,
            Claimed::File { size } => Kind::File { size },
            Claimed::Symlink { target } => {
                check_target(target)?;
                Kind::Symlink {
                    target: target.to_vec(),
                }
            }
            Claimed::Other(what) => return Err(Problem::Type(what)),
        };
        let keys = prefix_keys(&path);
        let (own, above) = keys.split_last().ok_or(Problem::NotNormal)?;
        if above.is_empty() && kind != Kind::Dir {
            return Err(Problem::RootNotFolder);
        }
        if let Some(at) = above.iter().position(|key| self.not_folders.contains(key)) {
            let shown = path.split(|b| *b == b'/').take(at + 1);
            let shown = shown.collect::<Vec<_>>().join(&b'/');
            return Err(Problem::BelowNonFolder(
                String::from_utf8_lossy(&shown).into_owned(),
            ));
        }
        if self.seen.contains(own) {
            return Err(Problem::Duplicate);
        }
        if self.entries >= self.limits.max_entries {
            return Err(Problem::TooMany(self.limits.max_entries));
        }
        let bytes = self.bytes.saturating_add(cost(path.len(), &kind));
        if bytes > self.limits.max_bytes {
            let size = match kind {
                Kind::File { size } => size,
                _ => 0,
            };
            return Err(Problem::TooLarge {
                size,
                limit: self.limits.max_bytes,
            });
        }
        self.seen.insert(*own);
        if kind != Kind::Dir {
            self.not_folders.insert(*own);
        }
        self.entries += 1;
        self.bytes = bytes;
        Ok(Entry {
            path,
            kind,
            mode: kept_mode(candidate.mode),
            mtime: candidate.mtime,
        })
    }
}

/// The bytes an entry takes in an archive written by [`Writer`](crate::Writer): its
/// header, a GNU long name (and long link name) where a name is over 100 bytes, and its
/// data padded to whole blocks.
pub fn cost(path_len: usize, kind: &Kind) -> u64 {
    let long = |len: usize| {
        if len > 100 {
            BLOCK + padded(len as u64 + 1)
        } else {
            0
        }
    };
    let rest = match kind {
        Kind::Dir => 0,
        Kind::File { size } => padded(*size),
        Kind::Symlink { target } => long(target.len()),
    };
    (BLOCK + long(path_len)).saturating_add(rest)
}

/// `n` rounded up to whole blocks.
fn padded(n: u64) -> u64 {
    n.div_ceil(BLOCK).saturating_mul(BLOCK)
}

/// The digest of each of the path's prefixes that ends at a component, the whole
/// path's last.
fn prefix_keys(path: &[u8]) -> Vec<[u8; 32]> {
    let mut hasher = Sha256::new();
    let mut keys = Vec::new();
    for (i, part) in path.split(|b| *b == b'/').enumerate() {
        if i > 0 {
            hasher.update(b"/");
        }
        hasher.update(part);
        keys.push(hasher.clone().finalize().into());
    }
    keys
}
