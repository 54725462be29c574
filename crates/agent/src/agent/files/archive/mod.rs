//! A session's files as one session archive (the `sandbox-archive` crate): written from
//! the home folder and `/tmp` ([`pack`], `pack.rs`), restored into them ([`unpack`],
//! `unpack.rs`), as the program user, from the two folders' descriptors, the archive
//! moving over the channel in chunk frames (`chunks.rs`).

mod chunks;
mod pack;
mod unpack;

use super::beneath::Refusal;
use crate::agent::identity::as_program_user;
use crate::agent::AgentError;
use chunks::{ChunkReader, ChunkWriter};
use sandbox_archive::Limits;
use sandbox_protocol::agent::{AgentMessage, FileFailure};
use sandbox_protocol::frame;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};

/// Sends the session archive of `home` and `tmp` (at most `max_bytes` of it) on
/// `channel` as chunk frames, then Packed, or FileFailed after any chunks. `folders`
/// are `home` and `tmp`, or why they could not be opened. An error is the channel's:
/// the exchange cannot go on.
pub(crate) fn pack<C: Write>(
    folders: Result<(OwnedFd, OwnedFd), Refusal>,
    max_bytes: u64,
    channel: &mut C,
) -> Result<(), AgentError> {
    let walked = match folders {
        Ok((home, tmp)) => {
            let done = as_program_user(|| {
                let mut out = ChunkWriter::new(channel);
                let walked = pack::write(home.as_fd(), tmp.as_fd(), max_bytes, &mut out);
                let sent = out.finish(walked.is_ok());
                (walked, sent)
            });
            match done {
                Ok((walked, sent)) => {
                    sent?;
                    walked
                }
                Err(e) => Err(ids_failed(e)),
            }
        }
        Err(refusal) => Err(refusal),
    };
    let answer = match walked {
        Ok(packed) => AgentMessage::Packed {
            bytes: packed.bytes,
            entries: packed.entries,
            skipped: packed.skipped,
        },
        Err(refusal) => failed(refusal),
    };
    frame::write(channel, &answer)?;
    Ok(())
}

/// Restores the session archive that follows on `channel` (UnpackChunk frames, within
/// `limits`) into `home` and `tmp`, reads every chunk to the last, and answers once:
/// Unpacked or FileFailed. `folders` are `home` and `tmp`, or why they could not be
/// opened. An error is the channel's: the exchange cannot go on.
pub(crate) fn unpack<C: Read + Write>(
    folders: Result<(OwnedFd, OwnedFd), Refusal>,
    limits: Limits,
    channel: &mut C,
) -> Result<(), AgentError> {
    let mut input = ChunkReader::new(channel);
    let restored = folders.and_then(|(home, tmp)| {
        as_program_user(|| unpack::restore(home.as_fd(), tmp.as_fd(), limits, &mut input))
            .unwrap_or_else(|e| Err(ids_failed(e)))
    });
    input.finish()?;
    let answer = match restored {
        Ok(summary) => AgentMessage::Unpacked {
            bytes: summary.bytes,
            entries: summary.entries,
        },
        Err(refusal) => failed(refusal),
    };
    frame::write(channel, &answer)?;
    Ok(())
}

fn failed((reason, message): Refusal) -> AgentMessage {
    AgentMessage::FileFailed { reason, message }
}

fn ids_failed(e: std::io::Error) -> Refusal {
    (
        FileFailure::Io,
        format!("taking the program user's ids: {e}"),
    )
}

#[cfg(test)]
mod tests;
