//! `GET /sessions/{id}/processes/{pid}/output`: a process's output from byte offsets,
//! at once or once there is some (`waitMs`), or streamed as it comes (`follow=true`,
//! `application/x-ndjson`).
//!
//! The agent never waits: the runner asks it again every [`POLL_EVERY`] until there is
//! new output, the process ends, or the wait is over. A character is never split: while
//! the process runs, an incomplete UTF-8 sequence at the end of what it wrote is left for
//! the next answer (`stdoutTo` stops before it).

use super::error::ApiError;
use super::process_call::{ask, ProcessPath};
use super::state::AppState;
use crate::live::text::pieces;
use crate::pool::SandboxFactory;
use crate::session::SessionError;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandbox_protocol::agent::{decode_bytes, OUTPUT_CHUNK_BYTES};
use sandbox_protocol::process::{
    OutputSlice, ProcessAnswer, ProcessOutput, ProcessRequest, Stream, StreamLine,
};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use utoipa::IntoParams;

/// How often the agent is asked again while a reader waits.
const POLL_EVERY: Duration = Duration::from_millis(50);
/// The longest `waitMs`.
const MAX_WAIT_MS: u64 = 30_000;
/// The most bytes of each stream one answer carries (a reader asks again from where it
/// stopped).
const ANSWER_BYTES: u64 = 4 << 20;

/// Where to read from, and how.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutputQuery {
    /// The byte of standard output to start from (0 if absent).
    #[serde(default)]
    stdout_from: u64,
    /// The byte of standard error to start from (0 if absent).
    #[serde(default)]
    stderr_from: u64,
    /// Wait until there is new output or the process ends, at most this long (ms, at
    /// most 30000).
    #[serde(default)]
    wait_ms: u64,
    /// Stream the output as it comes (`application/x-ndjson`) until the process ends.
    #[serde(default)]
    follow: bool,
}

/// The process's output from the byte offsets asked for, as UTF-8 (invalid bytes
/// replaced); the newest `RUNNER_PROCESS_OUTPUT_BYTES` of each stream are kept, and an
/// offset before them answers from the oldest kept, `...Dropped` saying how many bytes
/// were skipped; at most 4 MiB of each stream per answer. With `follow=true`, a stream
/// of `{"stream", "data"}` lines as output comes, then `{"exitCode": N}` once the
/// process has ended and its output is all sent (or `{"error": {...}}` if the session
/// ends first).
#[utoipa::path(
    get,
    path = "/sessions/{id}/processes/{pid}/output",
    operation_id = "processOutput",
    tag = "processes",
    params(ProcessPath, OutputQuery),
    responses(
        (status = 200, description = "The output (or, with `follow=true`, a stream of \
            `application/x-ndjson` lines: `{\"stream\": \"stdout\"|\"stderr\", \"data\": \
            \"...\"}`, then `{\"exitCode\": N}`)", body = ProcessOutput),
        super::answers::OutputErrors,
    ),
    security(("bearer" = []))
)]
pub(super) async fn output<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(path): Path<ProcessPath>,
    query: Result<Query<OutputQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if query.wait_ms > MAX_WAIT_MS {
        return Err(ApiError::BadRequest(format!(
            "waitMs may be at most {MAX_WAIT_MS}, not {}",
            query.wait_ms
        )));
    }
    let reader = Reader {
        state,
        id: path.id.clone(),
        pid: path.pid()?,
    };
    let from = (query.stdout_from, query.stderr_from);
    if query.follow {
        // The first answer before the stream: an unknown pid is a 404, not a stream.
        let first = reader.read(from).await?;
        return Ok(follow(reader, first));
    }
    let deadline = Instant::now() + Duration::from_millis(query.wait_ms);
    let read = reader.read_until(from, deadline).await?;
    Ok(Json(read.answer(from)).into_response())
}

/// What reads one process's output.
struct Reader<B: SandboxFactory> {
    state: Arc<AppState<B>>,
    id: String,
    pid: i32,
}

/// One read: the bytes each stream had from the offsets, cut where a character would
/// be split while more may come.
struct Read {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_from: u64,
    stderr_from: u64,
    exit_code: Option<i32>,
    finished: bool,
}

impl Read {
    fn of(slice: OutputSlice) -> Result<Read, ApiError> {
        let bytes = |b64: &str| {
            decode_bytes(b64).map_err(|e| {
                ApiError::Session(SessionError::Sandbox(format!("the output's base64: {e}")))
            })
        };
        let (mut stdout, mut stderr) = (bytes(&slice.stdout)?, bytes(&slice.stderr)?);
        if !slice.finished {
            stdout.truncate(stdout.len() - incomplete_tail(&stdout));
            stderr.truncate(stderr.len() - incomplete_tail(&stderr));
        }
        Ok(Read {
            stdout,
            stderr,
            stdout_from: slice.stdout_from,
            stderr_from: slice.stderr_from,
            exit_code: slice.exit_code,
            finished: slice.finished,
        })
    }

    fn is_empty(&self) -> bool {
        self.stdout.is_empty() && self.stderr.is_empty()
    }

    /// Where the next read starts.
    fn next(&self) -> (u64, u64) {
        (
            self.stdout_from + self.stdout.len() as u64,
            self.stderr_from + self.stderr.len() as u64,
        )
    }

    fn answer(&self, asked: (u64, u64)) -> ProcessOutput {
        let (stdout_to, stderr_to) = self.next();
        ProcessOutput {
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&self.stderr).into_owned(),
            stdout_from: self.stdout_from,
            stdout_to,
            stderr_from: self.stderr_from,
            stderr_to,
            stdout_dropped: self.stdout_from.saturating_sub(asked.0),
            stderr_dropped: self.stderr_from.saturating_sub(asked.1),
            running: self.exit_code.is_none(),
            exit_code: self.exit_code,
        }
    }
}

impl<B: SandboxFactory> Reader<B> {
    async fn read(&self, (stdout_from, stderr_from): (u64, u64)) -> Result<Read, ApiError> {
        let request = ProcessRequest::Output {
            pid: self.pid,
            stdout_from,
            stderr_from,
            max_bytes: ANSWER_BYTES,
        };
        match ask(&self.state.sessions, &self.id, request).await? {
            ProcessAnswer::Output(slice) => Read::of(slice),
            _ => Err(ApiError::out_of_turn(&self.id, "a process operation")),
        }
    }

    /// Reads until there is output, the process has ended, or `deadline` passes (a run
    /// in flight that holds the session past it: 409 `session_busy`).
    async fn read_until(&self, from: (u64, u64), deadline: Instant) -> Result<Read, ApiError> {
        loop {
            match self.read(from).await {
                Ok(read) if !read.is_empty() || read.exit_code.is_some() => return Ok(read),
                Ok(read) if Instant::now() >= deadline => return Ok(read),
                Err(ApiError::Session(SessionError::Busy(_))) if Instant::now() < deadline => {}
                Err(e) => return Err(e),
                Ok(_) => {}
            }
            tokio::time::sleep(POLL_EVERY.min(deadline.saturating_duration_since(Instant::now())))
                .await;
        }
    }
}

/// Streams the output from `first` on until the process has ended and all of it is
/// sent; a reader that goes away stops it.
fn follow<B: SandboxFactory>(reader: Reader<B>, first: Read) -> Response {
    let (lines, receiver) = tokio::sync::mpsc::channel::<String>(16);
    tokio::spawn(async move {
        let mut read = first;
        loop {
            for line in output_lines(&read) {
                if lines.send(line).await.is_err() {
                    return; // the reader went away
                }
            }
            if read.finished {
                let exit_code = read.exit_code.unwrap_or(128 + libc::SIGKILL);
                let _ = lines
                    .send(line(&StreamLine::<()>::Exit { exit_code }))
                    .await;
                return;
            }
            if read.is_empty() {
                tokio::time::sleep(POLL_EVERY).await;
            }
            read = match reader.read(read.next()).await {
                Ok(next) => next,
                // A run in flight holds the session: ask again after it.
                Err(ApiError::Session(SessionError::Busy(_))) => Read {
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                    exit_code: None,
                    finished: false,
                    stdout_from: read.next().0,
                    stderr_from: read.next().1,
                },
                Err(e) => {
                    let error = e.body().error;
                    let _ = lines.send(line(&StreamLine::<()>::Error { error })).await;
                    return;
                }
            };
        }
    });
    let body = Body::from_stream(futures::stream::unfold(receiver, |mut r| async move {
        r.recv()
            .await
            .map(|line| (Ok::<_, std::io::Error>(line), r))
    }));
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

/// The lines of one read: each stream's text in pieces of at most 64 KiB, never
/// splitting a character (a read ends at one: [`Read::of`]).
fn output_lines(read: &Read) -> Vec<String> {
    let mut lines = Vec::new();
    for (stream, bytes) in [
        (Stream::Stdout, &read.stdout),
        (Stream::Stderr, &read.stderr),
    ] {
        let text = String::from_utf8_lossy(bytes);
        for piece in pieces(&text, OUTPUT_CHUNK_BYTES) {
            let data = piece.to_owned();
            lines.push(line(&StreamLine::<()>::Output { stream, data }));
        }
    }
    lines
}

fn line<R: serde::Serialize>(line: &StreamLine<R>) -> String {
    let mut text = serde_json::to_string(line).unwrap_or_default();
    text.push('\n');
    text
}

/// How many bytes at the end of `bytes` begin a UTF-8 character they do not finish.
pub(super) fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back
        }
        let needs = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0, // ASCII or not a leading byte: nothing to keep back
        };
        return if needs > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::incomplete_tail;

    #[test]
    fn an_unfinished_character_at_the_end_is_held_back() {
        let e_acute = "é".as_bytes(); // C3 A9
        let euro = "€".as_bytes(); // E2 82 AC
        assert_eq!(incomplete_tail(b"abc"), 0);
        assert_eq!(incomplete_tail(e_acute), 0);
        assert_eq!(incomplete_tail(&e_acute[..1]), 1);
        assert_eq!(incomplete_tail(&euro[..2]), 2);
        assert_eq!(incomplete_tail(&[b'a', euro[0]]), 1);
        assert_eq!(incomplete_tail("😀".as_bytes()), 0);
        assert_eq!(incomplete_tail(&"😀".as_bytes()[..3]), 3);
        assert_eq!(
            incomplete_tail(&[0x80, 0x80, 0x80]),
            0,
            "garbage is not held"
        );
        assert_eq!(incomplete_tail(b""), 0);
    }
}
