//! [`normalize`]: an untrusted tar stream rewritten as a session archive.

use crate::error::{ArchiveError, Problem};
use crate::read::each_entry;
use crate::write::{AddError, Short, Writer};
use crate::{Limits, Summary};
use std::io::{Read, Write};

/// Reads the untrusted tar stream `input` entry by entry, checks each within `limits`
/// ([`Checker`](crate::Checker)), and writes each to `output` as a fresh entry of a
/// session archive, with a header built here. On a refusal, what was written is of
/// no use: the caller deletes it. The summary counts the bytes written to `output` and
/// the entries.
pub fn normalize(
    input: impl Read,
    output: impl Write,
    limits: Limits,
) -> Result<Summary, ArchiveError> {
    let mut writer = Writer::new(output);
    let read = each_entry(input, limits, |entry, data| {
        writer.add(entry, data, Short::Fail).map_err(|e| match e {
            AddError::ShortData => ArchiveError::Entry {
                entry: entry.shown(),
                problem: Problem::ShortData(match entry.kind {
                    crate::Kind::File { size } => size,
                    _ => 0,
                }),
            },
            AddError::Data(source) => ArchiveError::Read {
                after: format!("the start of {:?}", entry.shown()),
                source,
            },
            AddError::Write(e) => ArchiveError::Write(e),
        })
    })?;
    let (_, bytes) = writer.finish().map_err(|e| match e {
        AddError::Write(e) | AddError::Data(e) => ArchiveError::Write(e),
        AddError::ShortData => ArchiveError::Write(std::io::Error::other(e)),
    })?;
    Ok(Summary {
        bytes,
        entries: read.entries,
    })
}
