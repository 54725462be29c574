//! The newest output of a run in flight, for its progress notifications: the runner
//! client puts the output there as the runner streams it
//! ([`runner_client`](crate::runner_client)), and the progress reporter takes the newest
//! lines from there a few times a second ([`crate::server`]): at once when new output
//! came, and again with each notification after.
//!
//! Bounded: it keeps the last [`TAIL_BYTES`] bytes of output (both streams, as they
//! arrive), and gives at most the last [`TAIL_LINES`] lines of them.

use std::sync::{Mutex, PoisonError};

/// The most bytes of output a progress message carries.
pub const TAIL_BYTES: usize = 1024;
/// The most lines of output a progress message carries.
pub const TAIL_LINES: usize = 10;

/// The newest output of one run. Shared between the run and its progress reporter.
#[derive(Debug, Default)]
pub struct OutputTail {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The newest output, at most twice [`TAIL_BYTES`] (cut down to it when over).
    text: String,
    /// Output came since [`OutputTail::take_new`] last gave it.
    new: bool,
}

impl OutputTail {
    /// Adds what the program just wrote (either stream).
    pub fn push(&self, data: &str) {
        if data.is_empty() {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.text.push_str(last_bytes(data, TAIL_BYTES));
        if state.text.len() > 2 * TAIL_BYTES {
            state.text = last_bytes(&state.text, TAIL_BYTES).to_owned();
        }
        state.new = true;
    }

    /// The newest lines (at most [`TAIL_LINES`] and [`TAIL_BYTES`], a trailing newline
    /// left out), if output came since the last call of this or of
    /// [`newest`](Self::newest).
    pub fn take_new(&self) -> Option<String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut state.new).then(|| newest_lines(&state.text))
    }

    /// The newest lines, as [`take_new`](Self::take_new) gives them, whether or not new;
    /// `None` while the run has written nothing.
    pub fn newest(&self) -> Option<String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.new = false;
        (!state.text.is_empty()).then(|| newest_lines(&state.text))
    }
}

/// The last [`TAIL_LINES`] lines of `text`, at most [`TAIL_BYTES`], without a trailing
/// newline.
fn newest_lines(text: &str) -> String {
    let text = text.strip_suffix('\n').unwrap_or(text);
    let start = text
        .rmatch_indices('\n')
        .nth(TAIL_LINES - 1)
        .map_or(0, |(at, _)| at + 1);
    last_bytes(&text[start..], TAIL_BYTES).to_owned()
}

/// The end of `text`: at most `max` bytes, starting at a character boundary.
fn last_bytes(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_lines_are_given_once_each_time_output_came() {
        let tail = OutputTail::default();
        assert_eq!(tail.take_new(), None);
        tail.push("one\n");
        tail.push("two\nthr");
        assert_eq!(tail.take_new().as_deref(), Some("one\ntwo\nthr"));
        assert_eq!(tail.take_new(), None, "nothing new");
        tail.push("ee\n");
        assert_eq!(tail.take_new().as_deref(), Some("one\ntwo\nthree"));
        assert_eq!(tail.newest().as_deref(), Some("one\ntwo\nthree"), "again");
        tail.push("four");
        assert_eq!(tail.newest().as_deref(), Some("one\ntwo\nthree\nfour"));
        assert_eq!(tail.take_new(), None, "given by newest");
        assert_eq!(OutputTail::default().newest(), None, "nothing written");
    }

    #[test]
    fn the_tail_is_bounded_in_lines_and_bytes() {
        let tail = OutputTail::default();
        for i in 0..100 {
            tail.push(&format!("line {i}\n"));
        }
        let lines = tail.take_new().expect("new output");
        assert_eq!(lines.lines().count(), TAIL_LINES);
        assert!(
            lines.starts_with("line 90\n") && lines.ends_with("line 99"),
            "{lines}"
        );
        tail.push(&"é".repeat(5000));
        let long = tail.take_new().expect("new output");
        assert!(long.len() <= TAIL_BYTES, "{}", long.len());
        assert!(long.chars().all(|c| c == 'é'));
    }
}
