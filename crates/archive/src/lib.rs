//! The session archive: a session's files (its home folder, `/home/sandbox`, and its
//! `/tmp`) as one tar stream, and the checks that make an untrusted one safe to unpack.
//!
//! The archive's entries are `home`, `home/...`, `tmp` and `tmp/...`: folders, regular
//! files and symbolic links only, each with its permission bits (setuid and setgid
//! dropped) and its time of last modification, and no owner (everything in a sandbox
//! belongs to its user). A symbolic link is kept as a link, whatever its target says,
//! and never followed. The format is GNU tar (long names as GNU long-name entries), as
//! [`Writer`] writes it; any tar stream is read (GNU and PAX extensions as the `tar`
//! crate reads them) and checked before it is used.
//!
//! What a reader checks, entry by entry ([`Checker`]), before any of its data is read:
//! its path (relative, only plain names, starting with `home` or `tmp`, no NUL, at most
//! [`MAX_PATH_BYTES`] bytes and [`MAX_DEPTH`] levels), its type (hard links, devices,
//! FIFOs, sockets and anything else are refused), a symlink's target (at most
//! [`MAX_PATH_BYTES`]), that no earlier entry has its path or was a symlink or a file
//! above it, and the [`Limits`]: the archive's bytes (each entry's declared size counted
//! before its data is read) and its entries. Every refusal is an [`ArchiveError`] that
//! names the entry and what is wrong with it.
//!
//! Who uses it: the runner, for an archive it is given ([`normalize`]: its output, a
//! fresh archive with headers built here, is all it keeps), and the agent inside a
//! sandbox, which writes a session's archive ([`Writer`]) and unpacks one
//! ([`each_entry`]), creating each entry itself, never through a path.
//!
//! Not for: creating files (the agent does, from descriptors, as the sandbox user), nor
//! compression, nor any other tar format's features (owners, extended attributes,
//! sparse files, hard links).

mod check;
mod entry;
mod error;
mod normalize;
mod read;
mod write;

pub use check::{cost, Candidate, Checker, Claimed, BLOCK, END_MARKER};
pub use entry::{kept_mode, Entry, Kind, Root};
pub use error::{ArchiveError, Problem};
pub use normalize::normalize;
pub use read::{each_entry, HEADERS_BUDGET};
pub use write::{AddError, Short, Writer};

/// The longest path (and symlink target) an archive may hold, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// The most levels a path may have (`home` is one, `home/a` two).
pub const MAX_DEPTH: usize = 64;

/// What an archive may hold at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The bytes the archive takes, written as [`Writer`] writes it (see [`cost`]):
    /// each entry's header and long names, its data padded to 512-byte blocks, and the
    /// end marker. Counted from each entry's declared size, before its data is read.
    pub max_bytes: u64,
    /// The entries.
    pub max_entries: u64,
}

/// What an archive operation read or wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The archive's bytes ([`normalize`]: written; [`each_entry`]: read).
    pub bytes: u64,
    /// Its entries.
    pub entries: u64,
}

#[cfg(test)]
mod tests;
