//! Length-prefixed JSON frames: a 4-byte big-endian length, then that many bytes of JSON.
//!
//! The blocking helpers here serve the agent; async users read the header themselves
//! and call [`payload_len`] and [`decode`].

use serde::{de::DeserializeOwned, Serialize};
use std::io::{self, Read, Write};

/// The largest payload either side accepts: a 1 MiB program escapes to at most 6 MiB of
/// JSON, and a session's file of at most 16 MiB is 21.4 MiB of base64.
pub const MAX_FRAME_LEN: usize = 24 * 1024 * 1024;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream failed.
    #[error("agent channel i/o: {0}")]
    Io(#[from] io::Error),
    /// The header announced more than [`MAX_FRAME_LEN`].
    #[error("frame of {0} bytes is over the {MAX_FRAME_LEN}-byte limit")]
    TooLarge(usize),
    /// The payload is not the JSON of the expected message.
    #[error("malformed frame: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Checks a frame header and returns the payload length it announces.
pub fn payload_len(header: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len)
}

/// Encodes a message as one frame (header and payload).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut buf = vec![0u8; 4];
    serde_json::to_writer(&mut buf, msg)?;
    let len = buf.len() - 4;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLarge(len));
    }
    buf[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(buf)
}

/// Decodes a payload (without its header).
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    Ok(serde_json::from_slice(payload)?)
}

/// Writes one frame and flushes.
pub fn write<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    w.write_all(&encode(msg)?)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame; `Ok(None)` when the stream ends cleanly before a header.
pub fn read<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<Option<T>, FrameError> {
    let mut header = [0u8; 4];
    match r.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let mut payload = vec![0u8; payload_len(header)?];
    r.read_exact(&mut payload)?;
    decode(&payload).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{AgentMessage, Job};
    use crate::Lang;

    #[test]
    fn round_trip() {
        let job = Job {
            lang: Lang::PYTHON,
            recipe: crate::language::Recipe {
                file: "main.py".into(),
                compile: Vec::new(),
                run: vec!["python3".into(), "{file}".into()],
                env: Default::default(),
                compile_timeout_ms: 0,
                loader: None,
                memory_mb: None,
            },
            code: "print('é\\n')\0".into(),
            timeout_ms: 5,
            stdout_cap: 1,
            stderr_cap: 2,
            session: false,
            sigstop_between_runs: false,
            outputs: None,
            python_paths: Vec::new(),
            stream: false,
            tools: None,
        };
        let bytes = encode(&job).unwrap();
        let back: Job = read(&mut bytes.as_slice()).unwrap().unwrap();
        assert_eq!(back, job);
    }

    #[test]
    fn clean_eof_is_none_and_torn_frame_is_error() {
        let none: Option<AgentMessage> = read(&mut &[][..]).unwrap();
        assert!(none.is_none());
        let bytes = encode(&AgentMessage::Ready).unwrap();
        let torn = &bytes[..bytes.len() - 1];
        assert!(read::<_, AgentMessage>(&mut &torn[..]).is_err());
    }

    #[test]
    fn oversized_header_is_refused_before_reading() {
        let header = ((MAX_FRAME_LEN + 1) as u32).to_be_bytes();
        assert!(matches!(payload_len(header), Err(FrameError::TooLarge(_))));
    }
}
