//! A stream's bytes as text, as they come: each chunk decoded as UTF-8 (invalid bytes
//! replaced, as the plain answer replaces them), an incomplete character at a chunk's end
//! carried over to the next chunk so that it is never split ([`Utf8Carry`]), and text
//! cut into pieces of a bounded size at character boundaries ([`pieces`]).
//!
//! Decoding a stream's chunks one after the other this way, then [`Utf8Carry::finish`],
//! gives exactly the text of all its bytes at once (`String::from_utf8_lossy`).

/// The UTF-8 decoder of one stream: the bytes of a character not complete yet.
#[derive(Debug, Default)]
pub struct Utf8Carry {
    carried: Vec<u8>,
}

impl Utf8Carry {
    /// The text of `bytes` after what was carried: every complete character, a
    /// replacement character for each invalid sequence; an incomplete character at the
    /// end (at most 3 bytes) is kept for the next chunk.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut input = std::mem::take(&mut self.carried);
        input.extend_from_slice(bytes);
        let mut text = String::with_capacity(input.len());
        let mut rest = input.as_slice();
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    return text;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // from_utf8 said these bytes are valid: this never falls back.
                    text.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        None => {
                            // The input ends in the middle of a character.
                            self.carried = after.to_vec();
                            return text;
                        }
                    }
                }
            }
        }
    }

    /// The text of what is still carried, the stream having ended (an incomplete
    /// character is replaced); empty when nothing is.
    pub fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.carried)).into_owned()
    }
}

/// `text` in consecutive pieces of at most `max` bytes (at least 4: a character's
/// most), each cut at a character boundary.
pub fn pieces(text: &str, max: usize) -> impl Iterator<Item = &str> {
    let max = max.max(4);
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(max);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, after) = rest.split_at(end);
        rest = after;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `bytes` cut at `cuts`, as chunks arriving one by one.
    fn decode_in_chunks(bytes: &[u8], cuts: &[usize]) -> Vec<String> {
        let mut carry = Utf8Carry::default();
        let mut from = 0;
        let mut texts = Vec::new();
        for &cut in cuts.iter().chain([&bytes.len()]) {
            texts.push(carry.push(&bytes[from..cut]));
            from = cut;
        }
        texts.push(carry.finish());
        texts
    }

    #[test]
    fn a_character_split_between_chunks_arrives_whole_in_the_second() {
        assert_eq!(
            decode_in_chunks("é".as_bytes(), &[1]),
            ["", "é", ""],
            "é is 0xc3 0xa9"
        );
        assert_eq!(
            decode_in_chunks("a€b".as_bytes(), &[2, 3]),
            ["a", "", "€b", ""],
            "€ is three bytes"
        );
        assert_eq!(
            decode_in_chunks("😀".as_bytes(), &[1, 2, 3]),
            ["", "", "", "😀", ""]
        );
    }

    #[test]
    fn invalid_bytes_are_replaced_and_an_unfinished_character_at_the_end_too() {
        assert_eq!(decode_in_chunks(b"a\xffb", &[]), ["a\u{fffd}b", ""]);
        assert_eq!(decode_in_chunks(b"a\xc3", &[]), ["a", "\u{fffd}"]);
        // A lead byte followed by one that cannot continue it: both stand, replaced.
        assert_eq!(decode_in_chunks(b"\xc3A", &[1]), ["", "\u{fffd}A", ""]);
    }

    #[test]
    fn chunks_wherever_cut_decode_to_the_text_of_the_whole() {
        let mut bytes = "ascii é € 😀 ".repeat(3).into_bytes();
        bytes.extend_from_slice(b"\xff\xc3\x28\xe2\x82\xf0\x9f\x98");
        for step in 1..=7 {
            let cuts: Vec<usize> = (step..bytes.len()).step_by(step).collect();
            let whole: String = decode_in_chunks(&bytes, &cuts).concat();
            assert_eq!(whole, String::from_utf8_lossy(&bytes), "cut every {step}");
        }
    }

    #[test]
    fn pieces_are_bounded_and_cut_between_characters() {
        let text = "ab€€😀c";
        let cut: Vec<&str> = pieces(text, 4).collect();
        assert_eq!(cut, ["ab", "€", "€", "😀", "c"]);
        assert!(cut.iter().all(|p| p.len() <= 4));
        assert_eq!(pieces("", 4).count(), 0);
        assert_eq!(pieces("abc", 64).collect::<Vec<_>>(), ["abc"]);
    }
}
