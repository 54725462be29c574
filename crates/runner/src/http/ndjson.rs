//! Streamed answers of a run (`POST /run` and a session's run with `Accept:
//! application/x-ndjson`): 200 and `Content-Type: application/x-ndjson`, one JSON object a
//! line ([`StreamLine`]):
//!
//! - `{"stream": "stdout"|"stderr", "data": "..."}` as the program writes: its chunks
//!   ([`crate::live`]) as UTF-8 text, a character split between chunks kept whole for the
//!   next line ([`Utf8Carry`]), at most [`OUTPUT_CHUNK_BYTES`] of text a line;
//! - `{"toolCall": {"runId", "id", "server", "tool", "arguments"}}` for each call of a
//!   program offered tools ([`crate::live::tools`]), which the caller answers at
//!   `POST /runs/{runId}/tool-results/{id}`;
//! - then one last line: `{"result": {...}}`, the plain answer's body, or, when the run
//!   failed after the answer began, `{"error": {"code", "message"}}`, the plain answer's
//!   error body.
//!
//! The stream of each kind of output concatenated is the result's `stdout` (`stderr`).
//! A handler answers so only once the run is on its way: what it refuses before (a bad
//! body, a busy pool, a draining runner, inline dependencies refused, a session that does
//! not exist or is busy) keeps its status and error body. The answer counts as a request
//! in flight until its last line is sent.

use super::error::ApiError;
use crate::lifecycle::InFlight;
use crate::live::text::{pieces, Utf8Carry};
use crate::live::{Chunk, Event, LiveChunks};
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper::body::Frame;
use sandbox_protocol::agent::OUTPUT_CHUNK_BYTES;
use sandbox_protocol::api::RunResponse;
use sandbox_protocol::process::{Stream, StreamLine};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// The media type of a streamed answer.
pub(super) const NDJSON: &str = "application/x-ndjson";

/// Lines sent ahead of a client that reads slowly; the run's chunks wait in their own
/// channel meanwhile (bounded by the job's caps).
const LINES_AHEAD: usize = 16;

/// Whether a request asks for a streamed answer: its `Accept` names
/// `application/x-ndjson` (parameters aside).
pub(super) fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|range| {
            let media = range.split(';').next().unwrap_or_default().trim();
            media.eq_ignore_ascii_case(NDJSON)
        })
}

/// One line on its way to the client; the last one ends the body.
struct Line {
    bytes: Bytes,
    last: bool,
}

/// The body of a streamed answer: the lines as they are sent, until the last one.
struct Lines {
    rx: mpsc::Receiver<Line>,
    ended: bool,
}

impl hyper::body::Body for Lines {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        self.rx.poll_recv(cx).map(|line| {
            line.map(|line| {
                self.ended = line.last;
                Ok(Frame::data(line.bytes))
            })
        })
    }
}

/// The writing end of a streamed answer.
pub(super) struct Writer {
    tx: mpsc::Sender<Line>,
    /// The client is gone: lines are no longer sent.
    gone: bool,
    texts: [Utf8Carry; 2],
    _in_flight: InFlight,
}

/// A streamed answer: its writer, and the response to hand to the client (200, with the
/// body the writer writes). `in_flight` is held until the last line is sent.
pub(super) fn answer(in_flight: InFlight) -> (Writer, Response) {
    let (tx, rx) = mpsc::channel(LINES_AHEAD);
    let body = Body::new(Lines { rx, ended: false });
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(NDJSON));
    let writer = Writer {
        tx,
        gone: false,
        texts: Default::default(),
        _in_flight: in_flight,
    };
    (writer, response)
}

impl Writer {
    /// Completes when the client has gone (it dropped the answer's body).
    pub(super) fn gone(&self) -> impl Future<Output = ()> + Send + 'static {
        let tx = self.tx.clone();
        async move { tx.closed().await }
    }

    /// Sends `chunks` as output lines while `run` goes on, then its last line. `run` is
    /// awaited to its end even when the client has gone.
    pub(super) async fn relay(
        mut self,
        mut chunks: LiveChunks,
        run: impl Future<Output = Result<RunResponse, ApiError>>,
    ) {
        tokio::pin!(run);
        let outcome = loop {
            tokio::select! {
                biased;
                Some(event) = chunks.recv() => self.event(event).await,
                outcome = &mut run => break outcome,
            }
        };
        // What the agent sent before its outcome is all in the channel by now.
        while let Ok(event) = chunks.try_recv() {
            self.event(event).await;
        }
        for stream in [Stream::Stdout, Stream::Stderr] {
            let rest = self.texts[index(stream)].finish();
            self.text(stream, &rest).await;
        }
        let last = match outcome {
            Ok(result) => line(&StreamLine::Result { result }),
            Err(e) => line(&StreamLine::<RunResponse>::Error {
                error: e.body().error,
            }),
        };
        self.send(last, true).await;
    }

    /// Sends an event as its line (a chunk as output lines).
    async fn event(&mut self, event: Event) {
        match event {
            Event::Output(chunk) => self.output(chunk).await,
            Event::ToolCall(tool_call) => {
                let call = line(&StreamLine::<RunResponse>::ToolCall { tool_call });
                self.send(call, false).await;
            }
        }
    }

    /// Sends a chunk as text: what of it makes whole characters.
    async fn output(&mut self, chunk: Chunk) {
        let text = self.texts[index(chunk.stream)].push(&chunk.bytes);
        self.text(chunk.stream, &text).await;
    }

    /// Sends `text` of `stream` as output lines of at most [`OUTPUT_CHUNK_BYTES`].
    async fn text(&mut self, stream: Stream, text: &str) {
        for data in pieces(text, OUTPUT_CHUNK_BYTES) {
            let output = line(&StreamLine::<RunResponse>::Output {
                stream,
                data: data.to_owned(),
            });
            self.send(output, false).await;
        }
    }

    async fn send(&mut self, bytes: Bytes, last: bool) {
        if self.gone {
            return;
        }
        if self.tx.send(Line { bytes, last }).await.is_err() {
            tracing::info!("the client of a streamed answer went away");
            self.gone = true;
        }
    }
}

fn index(stream: Stream) -> usize {
    match stream {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

/// A line's JSON and its newline.
fn line(value: &StreamLine<RunResponse>) -> Bytes {
    // A line holds strings, numbers, booleans and JSON values that came as JSON: it
    // always serializes.
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

#[cfg(test)]
mod tests;
