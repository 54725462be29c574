//! [`each_entry`]: an untrusted tar stream read entry by entry, each checked
//! ([`Checker`]) before a byte of its data is read, then handed on with its data.
//!
//! The `tar` crate reads GNU long names and PAX headers by itself, before the entry
//! they describe; it would read one of any declared size into memory. So the stream is
//! metered: while the next entry's headers are read, at most [`HEADERS_BUDGET`] bytes may
//! come, more than any allowed path and link target need.

use crate::check::{Candidate, Checker, Claimed};
use crate::entry::Entry;
use crate::error::{ArchiveError, Problem};
use crate::{Limits, Summary};
use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

/// The most bytes read for one entry's headers: its own, a GNU long name and long link
/// name of the longest allowed path (with their headers), a PAX header of up to 64 KiB,
/// and the padding of the entry before.
pub const HEADERS_BUDGET: u64 = 8 * 512 + 2 * (512 + 4608) + 64 * 1024;

/// Reads the tar stream `input` entry by entry, checks each within `limits`, and hands
/// it to `visit` with its data (a file's, exactly its size of it; `visit` may read less,
/// the rest is then read and dropped). Stops at the first refusal, of the checks or of
/// `visit`. A stream cut short, garbled, or without its end marker is refused too; what
/// follows the end marker is read and dropped (at most `limits.max_bytes` of it). The
/// summary counts the stream's bytes and its entries.
pub fn each_entry<R, E>(
    input: R,
    limits: Limits,
    mut visit: impl FnMut(&Entry, &mut dyn Read) -> Result<(), E>,
) -> Result<Summary, E>
where
    R: Read,
    E: From<ArchiveError>,
{
    let meter = Rc::new(Meter::default());
    let mut archive = tar::Archive::new(Metered {
        inner: input,
        meter: meter.clone(),
    });
    let mut after = String::from("its start");
    let mut entries = archive.entries().map_err(|source| ArchiveError::Read {
        after: after.clone(),
        source,
    })?;
    let mut checker = Checker::new(limits);
    loop {
        meter.budget.set(HEADERS_BUDGET);
        let mut entry = match entries.next() {
            None if meter.ended.get() => return Err(ArchiveError::Truncated { after }.into()),
            None => break,
            Some(Err(_)) if meter.exhausted.get() => {
                return Err(ArchiveError::Entry {
                    entry: format!("(the one after {after})"),
                    problem: Problem::Extensions(HEADERS_BUDGET),
                }
                .into());
            }
            Some(Err(source)) => return Err(ArchiveError::Read { after, source }.into()),
            Some(Ok(entry)) => entry,
        };
        let checked = check(&mut checker, &entry)?;
        meter.budget.set(u64::MAX);
        let size = entry.size();
        let mut data = Counting {
            inner: &mut entry,
            read: 0,
        };
        visit(&checked, &mut data)?;
        let read = data.read;
        let rest = io::copy(&mut entry, &mut io::sink()).map_err(|source| ArchiveError::Read {
            after: after.clone(),
            source,
        })?;
        if read + rest < size {
            return Err(ArchiveError::Entry {
                entry: checked.shown(),
                problem: Problem::ShortData(size),
            }
            .into());
        }
        after = format!("{:?}", checked.shown());
    }
    // What follows the end marker (its second block, a tar writer's padding to whole
    // records) is read and dropped, up to the archive's size limit.
    meter.budget.set(limits.max_bytes);
    let mut rest = archive.into_inner();
    io::copy(&mut rest, &mut io::sink()).map_err(|source| ArchiveError::Read {
        after: format!("the end marker, {after}"),
        source,
    })?;
    Ok(Summary {
        bytes: meter.read.get(),
        entries: checker.entries(),
    })
}

/// Checks the entry `entry` as read.
fn check<R: Read>(checker: &mut Checker, entry: &tar::Entry<'_, R>) -> Result<Entry, ArchiveError> {
    let path = entry.path_bytes();
    let refuse = |problem| ArchiveError::Entry {
        entry: String::from_utf8_lossy(&path).into_owned(),
        problem,
    };
    let header = entry.header();
    let mode = header.mode().map_err(|e| refuse(Problem::Header(e)))?;
    let mtime = header.mtime().map_err(|e| refuse(Problem::Header(e)))?;
    let size = entry.size();
    let target = entry.link_name_bytes();
    let claimed = match header.entry_type() {
        tar::EntryType::Regular => Claimed::File { size },
        tar::EntryType::Directory | tar::EntryType::Symlink if size > 0 => {
            return Err(refuse(Problem::DataOnNonFile(size)))
        }
        tar::EntryType::Directory => Claimed::Dir,
        tar::EntryType::Symlink => Claimed::Symlink {
            target: target.as_deref().unwrap_or_default(),
        },
        other => Claimed::Other(described(other)),
    };
    checker.check(Candidate {
        path: &path,
        claimed,
        mode,
        mtime,
    })
}

/// An entry type the archive does not carry, for a sentence.
fn described(kind: tar::EntryType) -> &'static str {
    match kind {
        tar::EntryType::Link => "a hard link",
        tar::EntryType::Char => "a character device",
        tar::EntryType::Block => "a block device",
        tar::EntryType::Fifo => "a FIFO (named pipe)",
        tar::EntryType::Continuous => "a contiguous file",
        tar::EntryType::GNUSparse => "a sparse file",
        tar::EntryType::XGlobalHeader => "a PAX global header",
        _ => "an entry of an unknown type",
    }
}

/// What the metered stream saw.
#[derive(Debug, Default)]
struct Meter {
    /// Bytes that may still be read.
    budget: Cell<u64>,
    /// A read was refused for the budget.
    exhausted: Cell<bool>,
    /// The stream ended (a read gave nothing).
    ended: Cell<bool>,
    /// Bytes read.
    read: Cell<u64>,
}

/// The input stream, metered.
struct Metered<R> {
    inner: R,
    meter: Rc<Meter>,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let budget = self.meter.budget.get();
        if budget == 0 && !buf.is_empty() {
            self.meter.exhausted.set(true);
            return Err(io::Error::other("over the budget of an entry's headers"));
        }
        let want = buf.len().min(usize::try_from(budget).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 && want > 0 {
            self.meter.ended.set(true);
        }
        self.meter.budget.set(budget - n as u64);
        self.meter.read.set(self.meter.read.get() + n as u64);
        Ok(n)
    }
}

/// A reader that counts what it gives.
struct Counting<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}
