//! The archive on the channel: written as [`AgentMessage::ArchiveChunk`] frames
//! ([`ChunkWriter`]), read from [`FileRequest::UnpackChunk`] frames ([`ChunkReader`]).
//! A failure of the channel itself is kept aside from the archive's: the exchange
//! cannot go on after it.

use crate::agent::AgentError;
use sandbox_protocol::agent::{
    decode_bytes, encode_bytes, AgentMessage, FileRequest, RunnerMessage, ARCHIVE_CHUNK_BYTES,
};
use sandbox_protocol::frame::{self, FrameError};
use std::io::{self, Read, Write};

/// Bytes written to it go to the channel as chunk frames of at most
/// [`ARCHIVE_CHUNK_BYTES`].
pub(super) struct ChunkWriter<'a, C> {
    channel: &'a mut C,
    buf: Vec<u8>,
    /// The channel failed: nothing more is sent.
    failed: Option<FrameError>,
}

impl<'a, C: Write> ChunkWriter<'a, C> {
    pub(super) fn new(channel: &'a mut C) -> Self {
        ChunkWriter {
            channel,
            buf: Vec::with_capacity(ARCHIVE_CHUNK_BYTES),
            failed: None,
        }
    }

    /// Sends what is buffered.
    fn send(&mut self) -> io::Result<()> {
        if let Some(e) = &self.failed {
            return Err(io::Error::other(e.to_string()));
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = AgentMessage::ArchiveChunk {
            data: encode_bytes(&self.buf),
        };
        self.buf.clear();
        frame::write(self.channel, &chunk).map_err(|e| {
            let message = e.to_string();
            self.failed = Some(e);
            io::Error::other(message)
        })
    }

    /// Sends the rest, when `whole` (the archive is); the channel's failure, if it
    /// failed.
    pub(super) fn finish(mut self, whole: bool) -> Result<(), FrameError> {
        if whole {
            let _ = self.send();
        }
        self.failed.map_or(Ok(()), Err)
    }
}

impl<C: Write> Write for ChunkWriter<'_, C> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() == ARCHIVE_CHUNK_BYTES {
            self.send()?;
        }
        let n = data.len().min(ARCHIVE_CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads the archive of an Unpack from the UnpackChunk frames that follow it, to the
/// one marked last.
pub(super) struct ChunkReader<'a, C> {
    channel: &'a mut C,
    buf: Vec<u8>,
    at: usize,
    /// The last chunk came.
    ended: bool,
    /// The channel failed, or the runner sent something else than a chunk.
    failed: Option<AgentError>,
}

impl<'a, C: Read> ChunkReader<'a, C> {
    pub(super) fn new(channel: &'a mut C) -> Self {
        ChunkReader {
            channel,
            buf: Vec::new(),
            at: 0,
            ended: false,
            failed: None,
        }
    }

    /// Reads the next chunk into the buffer.
    fn next_chunk(&mut self) -> io::Result<()> {
        if let Some(e) = &self.failed {
            return Err(io::Error::other(e.to_string()));
        }
        let failed = match frame::read::<_, RunnerMessage>(self.channel) {
            Ok(Some(RunnerMessage::File(FileRequest::UnpackChunk { data, last }))) => {
                self.ended = last;
                self.at = 0;
                self.buf.clear();
                return match decode_bytes(&data) {
                    Ok(bytes) => {
                        self.buf = bytes;
                        Ok(())
                    }
                    // The runner's mistake: the archive is refused, the exchange goes on.
                    Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                };
            }
            Ok(Some(other)) => {
                AgentError::OutOfStep(format!("{other:?}").chars().take(80).collect())
            }
            Ok(None) => FrameError::Io(io::ErrorKind::UnexpectedEof.into()).into(),
            Err(e) => e.into(),
        };
        let message = failed.to_string();
        self.failed = Some(failed);
        Err(io::Error::other(message))
    }

    /// Reads (and drops) the chunks left, to the last; the channel's failure, if it
    /// failed or fell out of step.
    pub(super) fn finish(mut self) -> Result<(), AgentError> {
        while !self.ended && self.failed.is_none() {
            let _ = self.next_chunk();
        }
        self.failed.map_or(Ok(()), Err)
    }
}

impl<C: Read> Read for ChunkReader<'_, C> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.at == self.buf.len() {
            if self.ended || out.is_empty() {
                return Ok(0);
            }
            self.next_chunk()?;
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}
