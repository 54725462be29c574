//! One call made to an upstream, and its result made the program's answer: the tool's
//! `structuredContent` when it gave one, else its text contents joined; `isError` or a
//! protocol error becomes an error carrying the upstream's text; a result over
//! [`MAX_RESULT_BYTES`] becomes an error saying so.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::ServiceError;
use rmcp::{Peer, RoleClient};
use sandbox_protocol::tools::{ToolAnswer, MAX_RESULT_BYTES};
use serde_json::Value;

use super::listed::cut;

/// The longest error text passed on to a program, in bytes.
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// How a call ended, as `/metrics` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// The upstream answered with a result.
    Ok,
    /// The upstream answered with an error, or could not be reached.
    Error,
    /// sandbox-mcp refused the call: it never reached the upstream.
    Refused,
    /// The upstream did not answer in time.
    Timeout,
}

impl Outcome {
    /// Its label in `/metrics` and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Refused => "refused",
            Outcome::Timeout => "timeout",
        }
    }
}

/// A call's answer and how it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    /// What the program gets.
    pub answer: ToolAnswer,
    /// How it ended.
    pub outcome: Outcome,
    /// The connection failed under the call: its keeper should reconnect.
    pub(super) connection_broken: bool,
}

impl Answered {
    /// A call refused before it reached the upstream.
    pub fn refused(message: impl Into<String>) -> Self {
        Self::ended(ToolAnswer::error(message), Outcome::Refused)
    }

    /// A call that failed.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::ended(ToolAnswer::error(message), Outcome::Error)
    }

    fn ended(answer: ToolAnswer, outcome: Outcome) -> Self {
        Answered {
            answer,
            outcome,
            connection_broken: false,
        }
    }

    /// Whether the program gets an error.
    pub fn is_error(&self) -> bool {
        self.answer.error.is_some()
    }
}

/// Calls `tool` through `peer` within `timeout`; a call given up on is cancelled at the
/// upstream (rmcp sends `notifications/cancelled` when its future is dropped).
pub(super) async fn call(
    peer: &Peer<RoleClient>,
    server: &str,
    tool: &str,
    arguments: Value,
    timeout: Duration,
) -> Answered {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params = match arguments {
        Value::Object(map) => params.with_arguments(map),
        Value::Null => params.with_arguments(JsonObject::new()),
        _ => {
            return Answered::refused(format!(
                "the arguments of {server}.{tool} must be an object of named arguments"
            ))
        }
    };
    match tokio::time::timeout(timeout, peer.call_tool(params)).await {
        Err(_) => Answered::ended(
            ToolAnswer::error(format!(
                "{server}.{tool} did not answer within {} ms",
                timeout.as_millis()
            )),
            Outcome::Timeout,
        ),
        Ok(Ok(result)) => from_result(server, tool, result),
        Ok(Err(error)) => from_error(server, tool, &error),
    }
}

/// The program's answer from the tool's result.
pub(super) fn from_result(server: &str, tool: &str, result: CallToolResult) -> Answered {
    let text = || {
        result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if result.is_error == Some(true) {
        let mut message = text();
        if message.is_empty() {
            message = match &result.structured_content {
                Some(value) => value.to_string(),
                None => "the tool failed and said nothing more".into(),
            };
        }
        return Answered::failed(format!(
            "{server}.{tool}: {}",
            cut(&message, MAX_ERROR_BYTES)
        ));
    }
    let value = match result.structured_content.clone() {
        Some(structured) => structured,
        None => Value::String(text()),
    };
    let bytes = serde_json::to_vec(&value).map_or(usize::MAX, |b| b.len());
    if bytes > MAX_RESULT_BYTES {
        return Answered::failed(format!(
            "the result of {server}.{tool} is {bytes} bytes of JSON, over the {} a call may return",
            crate::wording::bytes(MAX_RESULT_BYTES as u64)
        ));
    }
    Answered::ended(
        ToolAnswer {
            result: Some(value),
            error: None,
        },
        Outcome::Ok,
    )
}

/// The program's answer to a call that failed at the protocol or transport level. The
/// transport's own words (which may name the server's address) stay in the log.
fn from_error(server: &str, tool: &str, error: &ServiceError) -> Answered {
    match error {
        ServiceError::McpError(data) => Answered::failed(format!(
            "{server}.{tool}: {}",
            cut(&data.message, MAX_ERROR_BYTES)
        )),
        ServiceError::Timeout { .. } => Answered::ended(
            ToolAnswer::error(format!("{server}.{tool} did not answer in time")),
            Outcome::Timeout,
        ),
        other => {
            tracing::warn!(server, tool, error = %other, "upstream call failed");
            let mut answered = Answered::failed(format!(
                "{server}.{tool}: the connection to server {server:?} failed; sandbox-mcp reconnects, try again later"
            ));
            answered.connection_broken = matches!(
                other,
                ServiceError::TransportClosed | ServiceError::TransportSend(_)
            );
            answered
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;
    use serde_json::json;

    #[test]
    fn structured_content_first_then_text() {
        let mut result =
            CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        let answered = from_result("s", "t", result.clone());
        assert_eq!(answered.answer.result, Some(json!("a\nb")));
        assert_eq!(answered.outcome, Outcome::Ok);
        result.structured_content = Some(json!({"n": 1}));
        let answered = from_result("s", "t", result);
        assert_eq!(answered.answer.result, Some(json!({"n": 1})));
    }

    #[test]
    fn an_error_carries_the_upstreams_text() {
        let result = CallToolResult::error(vec![ContentBlock::text("no such issue")]);
        let answered = from_result("tracker", "get_issue", result);
        assert_eq!(answered.outcome, Outcome::Error);
        assert_eq!(
            answered.answer.error.as_deref(),
            Some("tracker.get_issue: no such issue")
        );
        let silent = CallToolResult::error(Vec::new());
        assert!(from_result("s", "t", silent).is_error());
        let protocol = ServiceError::McpError(rmcp::ErrorData::invalid_params("bad limit", None));
        let answered = from_error("s", "t", &protocol);
        assert_eq!(answered.answer.error.as_deref(), Some("s.t: bad limit"));
        assert!(!answered.connection_broken);
        let closed = from_error("s", "t", &ServiceError::TransportClosed);
        assert!(closed.connection_broken);
    }

    #[test]
    fn a_result_over_the_cap_is_an_error() {
        let big = "x".repeat(MAX_RESULT_BYTES + 1);
        let answered = from_result(
            "s",
            "t",
            CallToolResult::success(vec![ContentBlock::text(big)]),
        );
        assert_eq!(answered.outcome, Outcome::Error);
        let message = answered.answer.error.unwrap_or_default();
        assert!(message.contains("over the 1 MiB"), "{message}");
        let fits = "x".repeat(MAX_RESULT_BYTES - 2);
        let answered = from_result(
            "s",
            "t",
            CallToolResult::success(vec![ContentBlock::text(fits)]),
        );
        assert!(answered.answer.check().is_ok());
    }
}
