//! The egress tunnel of a VM sandbox: the connections its programs make to the proxy's
//! address inside the guest, carried to the runner's proxy on the host over one stream
//! of their own (a second virtio serial port, `egress`, beside the agent's), so that the
//! guest needs no network card.
//!
//! The guest's init accepts a program's connection and opens it on the stream; the
//! runner hands it to its proxy as a connection of that VM's sandbox. Both sides then
//! move its bytes in [`Frame::Data`] frames, at most [`WINDOW`] bytes of a connection in
//! flight each way: a side sends more only as the other credits what it has delivered
//! ([`Frame::Credit`]), so one slow reader never stalls the others, and neither side
//! holds more than a window per connection. The runner holds the guest to this: a frame
//! that breaks it (an unknown kind, a payload over [`MAX_DATA`], a window overrun, an id
//! opened twice) ends the whole tunnel.
//!
//! Around a save of the VM, the runner quiesces the stream ([`Frame::Quiesce`], answered
//! by [`Frame::Quiesced`] once the guest has dropped every connection and will write no
//! more), so that both directions stop at a frame's end; whoever serves the stream next
//! (the restoring runner, or a fresh boot's) starts with [`Frame::Reset`].
//!
//! A frame is a header of 9 bytes, the kind (1), the connection's id (4, little endian)
//! and the payload's length (4, little endian), then the payload.

use std::io::{self, Read};

/// Inside a sandbox: the proxy's address, where programs connect (the proxy variables
/// name it), on either backend.
pub const PROXY_ADDR: &str = "127.0.0.1:3128";
/// The name the host gives the tunnel's virtio serial port.
pub const PORT_NAME: &str = "egress";
/// The most payload bytes of one frame.
pub const MAX_DATA: usize = 32 * 1024;
/// The most bytes of one connection either side may have sent and not had credited.
pub const WINDOW: usize = 256 * 1024;
/// The most connections the guest keeps open at once (the proxy's own cap, per
/// sandbox, is lower and answered by the proxy).
pub const MAX_CONNECTIONS: usize = 64;
/// Bytes of a frame's header.
pub const HEADER: usize = 9;

/// One frame of the tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Guest to host: a program connected; `id` is new.
    Open(u32),
    /// Either way: bytes of a connection.
    Data(u32, Vec<u8>),
    /// Either way: that many bytes of the connection were delivered.
    Credit(u32, u32),
    /// Either way: the sender will send no more bytes of the connection (the reader's
    /// end of the file); the connection ends once both sides have said it.
    Eof(u32),
    /// Either way: the connection is gone (an error, or the other end closed it
    /// abruptly); forget it.
    Close(u32),
    /// Host to guest: forget every connection; the host side is new.
    Reset,
    /// Host to guest: drop every connection and stop writing, then answer
    /// [`Frame::Quiesced`].
    Quiesce,
    /// Guest to host: quiesced; the guest writes nothing more until a [`Frame::Reset`].
    Quiesced,
}

/// Why bytes are not a frame.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TunnelError {
    /// An unknown kind.
    #[error("an unknown frame kind {0}")]
    Kind(u8),
    /// A payload over [`MAX_DATA`], or of the wrong size for its kind.
    #[error("a frame of kind {kind} with a payload of {len} bytes")]
    Length {
        /// The frame's kind.
        kind: u8,
        /// The length it gave.
        len: u32,
    },
}

const OPEN: u8 = 1;
const DATA: u8 = 2;
const CREDIT: u8 = 3;
const EOF: u8 = 4;
const CLOSE: u8 = 5;
const RESET: u8 = 6;
const QUIESCE: u8 = 7;
const QUIESCED: u8 = 8;

impl Frame {
    /// The frame's bytes, header and payload.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, id, payload): (u8, u32, &[u8]) = match self {
            Frame::Open(id) => (OPEN, *id, &[]),
            Frame::Data(id, bytes) => (DATA, *id, bytes),
            Frame::Credit(id, _) => (CREDIT, *id, &[]),
            Frame::Eof(id) => (EOF, *id, &[]),
            Frame::Close(id) => (CLOSE, *id, &[]),
            Frame::Reset => (RESET, 0, &[]),
            Frame::Quiesce => (QUIESCE, 0, &[]),
            Frame::Quiesced => (QUIESCED, 0, &[]),
        };
        let credit;
        let payload = match self {
            Frame::Credit(_, n) => {
                credit = n.to_le_bytes();
                &credit[..]
            }
            _ => payload,
        };
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.push(kind);
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// Reads a header: the kind, the id and the payload's length, checked against the
    /// kind (so that a reader never allocates more than [`MAX_DATA`]).
    pub fn parse_header(header: &[u8; HEADER]) -> Result<(u8, u32, usize), TunnelError> {
        let kind = header[0];
        let id = u32::from_le_bytes([header[1], header[2], header[3], header[4]]);
        let len = u32::from_le_bytes([header[5], header[6], header[7], header[8]]);
        let fits = match kind {
            DATA => (1..=MAX_DATA as u32).contains(&len),
            CREDIT => len == 4,
            OPEN | EOF | CLOSE | RESET | QUIESCE | QUIESCED => len == 0,
            other => return Err(TunnelError::Kind(other)),
        };
        if !fits {
            return Err(TunnelError::Length { kind, len });
        }
        Ok((kind, id, len as usize))
    }

    /// The frame of a checked header and its payload.
    pub fn from_parts(kind: u8, id: u32, payload: Vec<u8>) -> Result<Frame, TunnelError> {
        Ok(match kind {
            OPEN => Frame::Open(id),
            DATA => Frame::Data(id, payload),
            CREDIT => {
                let bytes: [u8; 4] =
                    payload
                        .as_slice()
                        .try_into()
                        .map_err(|_| TunnelError::Length {
                            kind,
                            len: payload.len() as u32,
                        })?;
                Frame::Credit(id, u32::from_le_bytes(bytes))
            }
            EOF => Frame::Eof(id),
            CLOSE => Frame::Close(id),
            RESET => Frame::Reset,
            QUIESCE => Frame::Quiesce,
            QUIESCED => Frame::Quiesced,
            other => return Err(TunnelError::Kind(other)),
        })
    }

    /// Reads one frame from a blocking reader; `Ok(None)` at the end of the stream
    /// before a frame begins.
    pub fn read(reader: &mut impl Read) -> io::Result<Option<Frame>> {
        let mut header = [0u8; HEADER];
        match reader.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let (kind, id, len) = Frame::parse_header(&header).map_err(invalid)?;
        let mut payload = vec![0u8; len];
        reader.read_exact(&mut payload)?;
        Frame::from_parts(kind, id, payload)
            .map(Some)
            .map_err(invalid)
    }
}

fn invalid(e: TunnelError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Splits bytes read from the stream into frames, keeping an incomplete one for the
/// next bytes (for a reader that cannot block, as the guest's). Frames are taken from a
/// read offset; the bytes before it are dropped once per push, not once per frame.
#[derive(Debug, Default)]
pub struct Decoder {
    pending: Vec<u8>,
    /// Where the next frame begins in `pending`.
    start: usize,
}

impl Decoder {
    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.drain(..self.start);
        self.start = 0;
        self.pending.extend_from_slice(bytes);
    }

    /// The next whole frame, if the bytes so far hold one.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, TunnelError> {
        let rest = &self.pending[self.start..];
        let Some(header) = rest.first_chunk::<HEADER>() else {
            return Ok(None);
        };
        let (kind, id, len) = Frame::parse_header(header)?;
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            return Ok(None);
        };
        let payload = payload.to_vec();
        self.start += HEADER + len;
        Frame::from_parts(kind, id, payload).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Frame> {
        vec![
            Frame::Open(7),
            Frame::Data(7, b"GET / HTTP/1.1\r\n".to_vec()),
            Frame::Credit(7, 16),
            Frame::Eof(7),
            Frame::Close(u32::MAX),
            Frame::Reset,
            Frame::Quiesce,
            Frame::Quiesced,
        ]
    }

    #[test]
    fn frames_read_back_as_written_whole_or_byte_by_byte() {
        let bytes: Vec<u8> = every_kind().iter().flat_map(Frame::encode).collect();
        let mut reader = &bytes[..];
        let mut read = Vec::new();
        while let Some(frame) = Frame::read(&mut reader).unwrap() {
            read.push(frame);
        }
        assert_eq!(read, every_kind());
        let mut decoder = Decoder::default();
        let mut decoded = Vec::new();
        for byte in &bytes {
            decoder.push(&[*byte]);
            while let Some(frame) = decoder.next_frame().unwrap() {
                decoded.push(frame);
            }
        }
        assert_eq!(decoded, every_kind());
    }

    #[test]
    fn a_bad_header_is_refused_before_its_payload_is_read() {
        let header = |kind: u8, len: u32| {
            let mut h = [0u8; HEADER];
            h[0] = kind;
            h[5..].copy_from_slice(&len.to_le_bytes());
            h
        };
        assert_eq!(
            Frame::parse_header(&header(9, 0)),
            Err(TunnelError::Kind(9))
        );
        let too_long = header(DATA, MAX_DATA as u32 + 1);
        assert!(Frame::parse_header(&too_long).is_err());
        assert!(Frame::parse_header(&header(DATA, 0)).is_err(), "empty data");
        assert!(Frame::parse_header(&header(OPEN, 1)).is_err());
        assert!(Frame::parse_header(&header(CREDIT, 8)).is_err());
        let mut decoder = Decoder::default();
        decoder.push(&header(DATA, u32::MAX));
        assert!(decoder.next_frame().is_err());
    }
}
