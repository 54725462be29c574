//! [`Writer`]: a session archive written from checked entries, with headers built here
//! (GNU format, long names as GNU long-name entries), never copied from elsewhere.

use crate::entry::{Entry, Kind};
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What to do when a file's data ends before the size its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// Fill the rest with zeros (a file that shrank while it was archived: the archive
    /// stays whole).
    Pad,
    /// Fail with [`AddError::ShortData`] (an archive read that was cut short).
    Fail,
}

/// Why an entry could not be added.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// Reading the entry's data failed.
    #[error("reading its data: {0}")]
    Data(io::Error),
    /// The entry's data ended before its size (with [`Short::Fail`]).
    #[error("its data ended before its size")]
    ShortData,
    /// Writing the archive failed.
    #[error("writing the archive: {0}")]
    Write(io::Error),
}

/// A session archive being written to `W`. Dropped without [`finish`](Self::finish)
/// (a refusal), it writes nothing more: not the end marker that the `tar` crate's
/// builder writes when it is dropped, so that what was written never reads as a whole
/// archive.
pub struct Writer<W: Write> {
    /// Taken by `finish`.
    builder: Option<tar::Builder<Counted<W>>>,
}

impl<W: Write> Writer<W> {
    /// An archive written to `out`.
    pub fn new(out: W) -> Self {
        Writer {
            builder: Some(tar::Builder::new(Counted {
                inner: out,
                bytes: 0,
                closed: false,
            })),
        }
    }

    /// Adds `entry`; a file's data comes from `data`, exactly its size of it: more is
    /// left unread, less is padded or refused as `short` says. After a failure the
    /// archive takes nothing more.
    pub fn add(
        &mut self,
        entry: &Entry,
        data: &mut dyn Read,
        short: Short,
    ) -> Result<(), AddError> {
        let added = self.append(entry, data, short);
        if let (Err(_), Some(builder)) = (&added, &mut self.builder) {
            builder.get_mut().closed = true;
        }
        added
    }

    fn append(&mut self, entry: &Entry, data: &mut dyn Read, short: Short) -> Result<(), AddError> {
        let builder = self.builder()?;
        let mut header = tar::Header::new_gnu();
        header.set_mode(entry.mode);
        header.set_mtime(entry.mtime);
        header.set_uid(0);
        header.set_gid(0);
        let path = Path::new(OsStr::from_bytes(&entry.path));
        let written = match &entry.kind {
            Kind::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, path, io::empty())
            }
            Kind::Symlink { target } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                link_target(builder, &mut header, target)
                    .and_then(|()| builder.append_data(&mut header, path, io::empty()))
            }
            Kind::File { size } => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(*size);
                let mut exact = Exactly {
                    data: data.take(*size),
                    left: *size,
                    short,
                    failed: None,
                };
                let written = builder.append_data(&mut header, path, &mut exact);
                match exact.failed {
                    Some(e) => return Err(e),
                    None => written,
                }
            }
        };
        written.map_err(AddError::Write)
    }

    /// The builder, until `finish` takes it.
    fn builder(&mut self) -> Result<&mut tar::Builder<Counted<W>>, AddError> {
        self.builder
            .as_mut()
            .ok_or_else(|| AddError::Write(io::Error::other("the archive is finished")))
    }

    /// The bytes written so far.
    pub fn written(&self) -> u64 {
        self.builder.as_ref().map_or(0, |b| b.get_ref().bytes)
    }

    /// Writes the end marker; the output and the archive's bytes.
    pub fn finish(mut self) -> Result<(W, u64), AddError> {
        let builder = self.builder.take();
        let counted = builder
            .ok_or_else(|| io::Error::other("the archive is finished"))
            .and_then(tar::Builder::into_inner)
            .map_err(AddError::Write)?;
        Ok((counted.inner, counted.bytes))
    }
}

/// Puts a symlink's target in `header` word for word (the `tar` crate's own setter
/// tidies it, as a path: `/` would become `//`), in a GNU long link entry written first
/// when it does not fit.
fn link_target<W: Write>(
    builder: &mut tar::Builder<W>,
    header: &mut tar::Header,
    target: &[u8],
) -> io::Result<()> {
    let room = header.as_old().linkname.len();
    if target.len() <= room {
        return header.set_link_name_literal(target);
    }
    let mut long = tar::Header::new_gnu();
    long.set_path("././@LongLink")?;
    long.set_entry_type(tar::EntryType::GNULongLink);
    long.set_size(target.len() as u64 + 1);
    long.set_mode(0o644);
    long.set_cksum();
    builder.append(&long, target.chain(&[0u8][..]))?;
    header.set_link_name_literal(&target[..room - 1])
}

impl<W: Write> Drop for Writer<W> {
    fn drop(&mut self) {
        if let Some(builder) = &mut self.builder {
            builder.get_mut().closed = true;
        }
    }
}

/// A writer that counts what goes through it, and takes nothing once closed.
struct Counted<W> {
    inner: W,
    bytes: u64,
    closed: bool,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Err(io::Error::other(
                "the archive failed: nothing more is written",
            ));
        }
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Exactly `left` bytes of `data`, padded with zeros or failing when it ends early; a
/// failure of the data (not of the archive's writing) is kept in `failed`.
struct Exactly<R> {
    data: R,
    left: u64,
    short: Short,
    failed: Option<AddError>,
}

impl<R: Read> Read for Exactly<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = match self.data.read(&mut buf[..want]) {
            Ok(0) if self.short == Short::Pad => {
                buf[..want].fill(0);
                want
            }
            Ok(0) => return Err(self.fail(AddError::ShortData)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Err(e),
            Err(e) => return Err(self.fail(AddError::Data(e))),
        };
        self.left -= n as u64;
        Ok(n)
    }
}

impl<R> Exactly<R> {
    fn fail(&mut self, e: AddError) -> io::Error {
        let message = e.to_string();
        self.failed = Some(e);
        io::Error::other(message)
    }
}
