//! A run's answer streamed as the program runs (`Accept: application/x-ndjson`): each
//! output line goes to the call's [`OutputTail`] as it arrives, each `toolCall` line (a
//! run that offered tools) to its [`ToolCallSink`], which answers it at
//! `POST /runs/{runId}/tool-results/{id}` while the answer goes on; the last line is the
//! run's result (the plain answer's body) or its error (`{"error": {code, message}}`, as
//! a plain 500 would say it). A runner that answers plain JSON instead (one that does not
//! stream) is read as usual.

use reqwest::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;
use sandbox_protocol::api::RunResponse;
use sandbox_protocol::process::StreamLine;
use sandbox_protocol::tools::ToolCallLine;

use super::answer::{classify, read_json, transport_error};
use super::{RunnerClient, RunnerError};
use crate::output_tail::OutputTail;

/// The media type of a streamed answer.
pub(super) const NDJSON: &str = "application/x-ndjson";

/// The longest line accepted: the result line carries the output (1 MiB a stream by
/// default, up to six times that as JSON) and the files of `outputs/` (8 MiB by default,
/// as base64), with room for a runner configured larger.
const MAX_LINE_BYTES: usize = 64 << 20;

/// Where a run's tool calls go as they come. `take` must not wait: it starts the call's
/// handling (which answers it through `runner`, the runner the answer streams from) and
/// returns.
pub trait ToolCallSink: Send + Sync {
    /// Takes one call of the run.
    fn take(&self, runner: &RunnerClient, line: ToolCallLine);
}

/// What reads a run's streamed answer as it comes; with neither, the answer is not
/// streamed.
#[derive(Clone, Copy, Default)]
pub struct Listeners<'a> {
    /// Gets the output.
    pub tail: Option<&'a OutputTail>,
    /// Gets the tool calls (a run that offers tools).
    pub tool_calls: Option<&'a dyn ToolCallSink>,
}

impl Listeners<'_> {
    /// Whether the answer is to be streamed.
    pub(super) fn stream(&self) -> bool {
        self.tail.is_some() || self.tool_calls.is_some()
    }
}

/// Asks for a streamed answer.
pub(super) fn accept_stream(builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    builder.header(ACCEPT, HeaderValue::from_static(NDJSON))
}

/// The run's result from `response`, which came from `runner`: streamed (its output and
/// tool calls to `listeners` as they come), or plain when the runner answered so (a
/// refusal, or a runner that does not stream).
pub(super) async fn read_streamed(
    mut response: reqwest::Response,
    listeners: Listeners<'_>,
    runner: &RunnerClient,
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
            if let Some(result) = take_line(&line[..end], listeners, runner)? {
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

/// One line: output goes to the tail, a tool call to its sink; the last line is the
/// result, or the error.
fn take_line(
    line: &[u8],
    listeners: Listeners<'_>,
    runner: &RunnerClient,
) -> Result<Option<RunResponse>, RunnerError> {
    let line: StreamLine<RunResponse> =
        serde_json::from_slice(line).map_err(|e| RunnerError::Malformed(e.to_string()))?;
    match line {
        StreamLine::Output { data, .. } => {
            if let Some(tail) = listeners.tail {
                tail.push(&data);
            }
            Ok(None)
        }
        StreamLine::ToolCall { tool_call } => match listeners.tool_calls {
            Some(sink) => {
                sink.take(runner, tool_call);
                Ok(None)
            }
            None => Err(RunnerError::Malformed(
                "the streamed answer of a run that offered no tools carried a toolCall line".into(),
            )),
        },
        StreamLine::Result { result } => Ok(Some(result)),
        StreamLine::Error { error } => Err(classify(
            StatusCode::INTERNAL_SERVER_ERROR,
            error.code,
            error.message,
            None,
        )),
        StreamLine::Exit { .. } => Err(RunnerError::Malformed(
            "a run's streamed answer carried a process's exit line".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::runner_target::RunnerTarget;

    fn runner() -> RunnerClient {
        let target = RunnerTarget::new("http://127.0.0.1:9", None).expect("a target");
        RunnerClient::new(target).expect("a client")
    }

    #[derive(Default)]
    struct Taken(Mutex<Vec<ToolCallLine>>);

    impl ToolCallSink for Taken {
        fn take(&self, _runner: &RunnerClient, line: ToolCallLine) {
            self.0.lock().expect("lock").push(line);
        }
    }

    #[test]
    fn output_lines_feed_the_tail_and_the_last_line_ends_the_answer() {
        let runner = runner();
        let tail = OutputTail::default();
        let listeners = Listeners {
            tail: Some(&tail),
            tool_calls: None,
        };
        let output = br#"{"stream":"stdout","data":"hello\n"}"#;
        assert!(take_line(output, listeners, &runner)
            .expect("a line")
            .is_none());
        assert_eq!(tail.take_new().as_deref(), Some("hello"));
        let result = br#"{"result":{"stdout":"hello\n","stderr":"","exitCode":0,"durationMs":3,"timedOut":false,"oomKilled":false,"stdoutTruncated":false,"stderrTruncated":false}}"#;
        let answer = take_line(result, listeners, &runner)
            .expect("a line")
            .expect("the result");
        assert_eq!(answer.stdout, "hello\n");
        let failed = br#"{"error":{"code":"sandbox_failed","message":"the sandbox failed"}}"#;
        let error = take_line(failed, listeners, &runner).expect_err("an error");
        assert!(
            matches!(error, RunnerError::Internal { status: 500, .. }),
            "{error:?}"
        );
        assert!(matches!(
            take_line(b"{\"exitCode\":1}", listeners, &runner),
            Err(RunnerError::Malformed(_))
        ));
        assert!(matches!(
            take_line(b"nope", listeners, &runner),
            Err(RunnerError::Malformed(_))
        ));
    }

    #[test]
    fn tool_calls_go_to_the_sink_of_a_run_that_offered_tools() {
        let runner = runner();
        let line = br#"{"toolCall":{"runId":"run_1","id":"3","server":"tracker","tool":"search","arguments":{"q":1}}}"#;
        let none = Listeners::default();
        assert!(!none.stream());
        assert!(matches!(
            take_line(line, none, &runner),
            Err(RunnerError::Malformed(_))
        ));
        let taken = Taken::default();
        let listeners = Listeners {
            tail: None,
            tool_calls: Some(&taken),
        };
        assert!(listeners.stream());
        assert!(take_line(line, listeners, &runner)
            .expect("a line")
            .is_none());
        let calls = taken.0.lock().expect("lock");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].run_id, "run_1");
        assert_eq!(calls[0].call.tool, "search");
        assert_eq!(calls[0].call.arguments, serde_json::json!({"q": 1}));
    }
}
