//! [`ArchiveError`]: why an archive was refused, naming the entry and what is wrong.

use std::io;

/// Why a session archive was refused, or could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// One entry is not allowed: the message names it.
    #[error("entry {entry:?}: {problem}")]
    Entry {
        /// The entry's path, as the archive gives it (lossy UTF-8).
        entry: String,
        /// What is wrong with it.
        problem: Problem,
    },
    /// The stream could not be read as a tar archive: garbled (a bad checksum, a header
    /// that is not one) or cut short.
    #[error("the archive is garbled or truncated after {after}: {source}")]
    Read {
        /// The last entry read whole, or "its start".
        after: String,
        /// What the reader said.
        source: io::Error,
    },
    /// The stream ended without the end-of-archive marker (two zero blocks): it was cut
    /// short between two entries.
    #[error("the archive ends without its end marker after {after}: it is truncated")]
    Truncated {
        /// The last entry read whole, or "its start".
        after: String,
    },
    /// The archive could not be written.
    #[error("writing the archive: {0}")]
    Write(io::Error),
}

/// What is wrong with one entry of an archive.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// Its path is empty, absolute, or has an empty, `.` or `..` component.
    #[error(
        "the path must be relative, with only plain names between its slashes (no '', '.' or '..')"
    )]
    NotNormal,
    /// Its path holds a NUL byte.
    #[error("the path holds a NUL byte")]
    Nul,
    /// Its path starts with something else than `home` or `tmp`.
    #[error("the path must start with 'home' or 'tmp'")]
    Outside,
    /// Its path is too long.
    #[error("the path is {0} bytes long; at most {max} are allowed", max = crate::MAX_PATH_BYTES)]
    PathTooLong(usize),
    /// Its path is too deep.
    #[error("the path is {0} levels deep; at most {max} are allowed", max = crate::MAX_DEPTH)]
    TooDeep(usize),
    /// It is of a type the archive does not carry.
    #[error("it is {0}: only folders, regular files and symbolic links are allowed")]
    Type(&'static str),
    /// A folder or symlink whose header declares data.
    #[error("a folder or symbolic link may not declare data ({0} bytes declared)")]
    DataOnNonFile(u64),
    /// It is `home` or `tmp` itself but not a folder.
    #[error("'home' and 'tmp' themselves must be folders")]
    RootNotFolder,
    /// A symlink without a target, or whose target holds a NUL byte.
    #[error("a symbolic link's target must be non-empty and hold no NUL byte")]
    BadTarget,
    /// A symlink whose target is too long.
    #[error("the symbolic link's target is {0} bytes long; at most {max} are allowed", max = crate::MAX_PATH_BYTES)]
    TargetTooLong(usize),
    /// Its path goes through an earlier entry that is not a folder.
    #[error("it lies below {0:?}, which is not a folder (a symbolic link or a file): nothing is written through one")]
    BelowNonFolder(String),
    /// The same path came earlier.
    #[error("the same path came earlier in the archive")]
    Duplicate,
    /// Its declared size takes the archive over its byte limit.
    #[error("its declared size ({size} bytes) takes the archive over its limit of {limit} bytes")]
    TooLarge {
        /// The size its header declares.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// It is one entry more than the limit.
    #[error("the archive holds more than {0} entries")]
    TooMany(u64),
    /// Its data ended before the size its header declared.
    #[error("its data ends before the {0} bytes its header declares")]
    ShortData(u64),
    /// Its extension headers (GNU long name, PAX) are larger than any allowed path needs.
    #[error("its extension headers (GNU long names, PAX) are over {0} bytes")]
    Extensions(u64),
    /// Its header's mode or time cannot be read.
    #[error("its header is garbled: {0}")]
    Header(io::Error),
}
