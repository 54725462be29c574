//! The newest bytes of one output stream, addressed by their offset in everything the
//! stream ever produced.

use std::collections::VecDeque;

/// Keeps the last `keep` bytes of a stream.
pub(super) struct Ring {
    bytes: VecDeque<u8>,
    keep: usize,
    /// Bytes the stream produced in all (the offset one past the newest).
    total: u64,
}

impl Ring {
    /// Nothing yet; keeps at most `keep` bytes.
    pub(super) fn new(keep: usize) -> Self {
        Ring {
            bytes: VecDeque::new(),
            keep,
            total: 0,
        }
    }

    /// Appends what the stream produced, dropping the oldest bytes past the window.
    pub(super) fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        let chunk = &chunk[chunk.len().saturating_sub(self.keep)..];
        let over = (self.bytes.len() + chunk.len()).saturating_sub(self.keep);
        self.bytes.drain(..over);
        self.bytes.extend(chunk);
    }

    /// The offset of the oldest byte kept.
    pub(super) fn first(&self) -> u64 {
        self.total - self.bytes.len() as u64
    }

    /// The kept bytes from offset `from` (from the oldest kept when `from` is older),
    /// at most `max`; and the offset they start at.
    pub(super) fn read(&self, from: u64, max: u64) -> (Vec<u8>, u64) {
        let start = from.clamp(self.first(), self.total);
        let skip = (start - self.first()) as usize;
        let take = (self.total - start).min(max) as usize;
        (
            self.bytes.range(skip..skip + take).copied().collect(),
            start,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;

    #[test]
    fn a_ring_keeps_the_newest_bytes_at_their_offsets() {
        let mut ring = Ring::new(4);
        ring.push(b"abc");
        assert_eq!(ring.read(0, 100), (b"abc".to_vec(), 0));
        ring.push(b"defg");
        assert_eq!(ring.first(), 3);
        assert_eq!(
            ring.read(0, 100),
            (b"defg".to_vec(), 3),
            "older: from the oldest"
        );
        assert_eq!(ring.read(5, 100), (b"fg".to_vec(), 5));
        assert_eq!(ring.read(5, 1), (b"f".to_vec(), 5), "at most max");
        assert_eq!(
            ring.read(99, 100),
            (Vec::new(), 7),
            "past the end: nothing, at the end"
        );
        ring.push(b"0123456789");
        assert_eq!(
            ring.read(0, 100),
            (b"6789".to_vec(), 13),
            "a chunk over the window"
        );
    }
}
