//! A run's answer streamed as the program runs (`Accept: application/x-ndjson`): each
//! output line goes to the call's [`OutputTail`] as it arrives, and the last line is
//! the run's result (the plain answer's body) or its error (`{"error": {code, message}}`,
//! as a plain 500 would say it). A runner that answers plain JSON instead (one that does
//! not stream) is read as usual.

use reqwest::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;
use sandbox_protocol::api::RunResponse;
use sandbox_protocol::process::StreamLine;

use super::answer::{classify, read_json, transport_error};
use super::RunnerError;
use crate::output_tail::OutputTail;

/// The media type of a streamed answer.
pub(super) const NDJSON: &str = "application/x-ndjson";

/// The longest line accepted: the result line carries the output (1 MiB a stream by
/// default, up to six times that as JSON) and the files of `outputs/` (8 MiB by default,
/// as base64), with room for a runner configured larger.
const MAX_LINE_BYTES: usize = 64 << 20;

/// Asks for a streamed answer.
pub(super) fn accept_stream(builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    builder.header(ACCEPT, HeaderValue::from_static(NDJSON))
}

/// The run's result from `response`: streamed (its output to `tail` as it comes), or
/// plain when the runner answered so (a refusal, or a runner that does not stream).
pub(super) async fn read_streamed(
    mut response: reqwest::Response,
    tail: &OutputTail,
) -> Result<RunResponse, RunnerError> {
    let streamed = response.status() == StatusCode::OK
        && response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(NDJSON));
    if !streamed {
        return read_json(response, StatusCode::OK).await;
    }
    let mut pending: Vec<u8> = Vec::new();
    while let Some(bytes) = response.chunk().await.map_err(transport_error)? {
        pending.extend_from_slice(&bytes);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            if let Some(result) = take_line(&line[..end], tail)? {
                return Ok(result);
            }
        }
        if pending.len() > MAX_LINE_BYTES {
            return Err(RunnerError::Malformed(format!(
                "a line of the runner's streamed answer is over {MAX_LINE_BYTES} bytes"
            )));
        }
    }
    Err(RunnerError::ConnectionLost(
        "the runner's streamed answer ended before its result".into(),
    ))
}

/// One line: output goes to `tail`; the last line is the result, or the error.
fn take_line(line: &[u8], tail: &OutputTail) -> Result<Option<RunResponse>, RunnerError> {
    let line: StreamLine<RunResponse> =
        serde_json::from_slice(line).map_err(|e| RunnerError::Malformed(e.to_string()))?;
    match line {
        StreamLine::Output { data, .. } => {
            tail.push(&data);
            Ok(None)
        }
        StreamLine::Result { result } => Ok(Some(result)),
        StreamLine::Error { error } => Err(classify(
            StatusCode::INTERNAL_SERVER_ERROR,
            error.code,
            error.message,
            None,
        )),
        StreamLine::Exit { .. } | StreamLine::ToolCall { .. } => Err(RunnerError::Malformed(
            "a run's streamed answer carried a process's exit line".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lines_feed_the_tail_and_the_last_line_ends_the_answer() {
        let tail = OutputTail::default();
        let output = br#"{"stream":"stdout","data":"hello\n"}"#;
        assert!(take_line(output, &tail).expect("a line").is_none());
        assert_eq!(tail.take_new().as_deref(), Some("hello"));
        let result = br#"{"result":{"stdout":"hello\n","stderr":"","exitCode":0,"durationMs":3,"timedOut":false,"oomKilled":false,"stdoutTruncated":false,"stderrTruncated":false}}"#;
        let answer = take_line(result, &tail)
            .expect("a line")
            .expect("the result");
        assert_eq!(answer.stdout, "hello\n");
        let failed = br#"{"error":{"code":"sandbox_failed","message":"the sandbox failed"}}"#;
        let error = take_line(failed, &tail).expect_err("an error");
        assert!(
            matches!(error, RunnerError::Internal { status: 500, .. }),
            "{error:?}"
        );
        assert!(matches!(
            take_line(b"{\"exitCode\":1}", &tail),
            Err(RunnerError::Malformed(_))
        ));
        assert!(matches!(
            take_line(b"nope", &tail),
            Err(RunnerError::Malformed(_))
        ));
    }
}
