//! Files as both exchanges carry them: the files a run wrote under its `outputs/`
//! folder ([`OutputFile`], in the agent's [`JobOutcome`](crate::agent::JobOutcome) and
//! the API's [`RunResponse`](crate::api::RunResponse)), and the entries of a session's
//! listing ([`FileEntry`], in the agent's answer and the API's
//! [`FileList`](crate::api::FileList)).

use serde::{Deserialize, Serialize};

/// A file a run wrote under `/home/sandbox/outputs/`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputFile {
    /// Relative to the outputs folder.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// The media type, from the file's first bytes and its name (see [`crate::media`]).
    pub mime_type: String,
    /// The bytes in standard base64; absent when the file is over the per-file cap or
    /// the answer's total was reached (a session's file can still be downloaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

/// One entry of a listing.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative to the home folder.
    pub path: String,
    /// Bytes (0 for a folder; a symlink's is the length of what it points to).
    pub size: u64,
    /// What it is.
    pub kind: FileKind,
}

/// What an entry of a listing is. Only a [`FileKind::File`] can be read or written.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// A symbolic link: listed as itself, never followed.
    Symlink,
    /// A FIFO (a named pipe).
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character or block device.
    Device,
}

impl FileKind {
    /// The kind, for a sentence ("a FIFO (named pipe)").
    pub fn described(self) -> &'static str {
        match self {
            FileKind::File => "a regular file",
            FileKind::Dir => "a folder",
            FileKind::Symlink => "a symlink",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::Socket => "a socket",
            FileKind::Device => "a device",
        }
    }
}
