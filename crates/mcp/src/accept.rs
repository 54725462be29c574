//! Answers a `POST /mcp` in the form the client accepts.
//!
//! rmcp answers every request of a session as an SSE stream and refuses (406) a client whose
//! `Accept` does not list both `application/json` and `text/event-stream`. A client that
//! accepts only JSON (or anything, or sends no `Accept`) gets the JSON-RPC answer as one
//! `application/json` body instead; progress notifications, which only a stream can carry,
//! are then left out.

use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

const BOTH: &str = "application/json, text/event-stream";
const EVENT_STREAM: &str = "text/event-stream";
/// The largest SSE answer turned into JSON; tool results are cut far below this.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// What the client's `Accept` lists.
#[derive(Debug, PartialEq, Eq)]
enum Wants {
    /// Both JSON and SSE, as MCP clients send: rmcp decides.
    Both,
    /// SSE only: rmcp's stream is fine.
    Stream,
    /// JSON, anything, or nothing said: one JSON body.
    Json,
}

fn wants(accept: Option<&HeaderValue>) -> Wants {
    let accept = accept.and_then(|v| v.to_str().ok()).unwrap_or("");
    let types: Vec<&str> = accept
        .split(',')
        .map(|t| t.split(';').next().unwrap_or("").trim())
        .collect();
    let json = types.contains(&"application/json");
    let stream = types.contains(&EVENT_STREAM);
    match (json, stream) {
        (true, true) => Wants::Both,
        (false, true) => Wants::Stream,
        _ => Wants::Json,
    }
}

/// Middleware: lets rmcp answer, then hands a JSON-only client the JSON-RPC answer as JSON.
pub(crate) async fn answer_as_accepted(mut request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let wants = wants(request.headers().get(header::ACCEPT));
    if wants == Wants::Both {
        return next.run(request).await;
    }
    request
        .headers_mut()
        .insert(header::ACCEPT, HeaderValue::from_static(BOTH));
    let response = next.run(request).await;
    let is_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(EVENT_STREAM.as_bytes()));
    if wants == Wants::Stream || !is_stream {
        return response;
    }
    stream_to_json(response).await
}

/// Reads an SSE answer to its end and returns its JSON-RPC response as the body.
async fn stream_to_json(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = match to_bytes(body, MAX_ANSWER_BYTES).await {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::warn!(%error, "could not read the answer to turn it into JSON");
            return StatusCode::BAD_GATEWAY.into_response();
        }
    };
    let Some(answer) = jsonrpc_answer(&String::from_utf8_lossy(&bytes)) else {
        tracing::warn!("the SSE answer held no JSON-RPC response");
        return StatusCode::BAD_GATEWAY.into_response();
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CACHE_CONTROL);
    parts.headers.remove("x-accel-buffering");
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(answer))
}

/// The last event of an SSE body whose data is a JSON-RPC response (a result or an error).
fn jsonrpc_answer(stream: &str) -> Option<String> {
    let mut answer = None;
    for event in stream.replace("\r\n", "\n").split("\n\n") {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        let data = data.join("\n");
        let is_answer = serde_json::from_str::<Value>(&data).is_ok_and(|v| {
            v.get("id").is_some() && (v.get("result").is_some() || v.get("error").is_some())
        });
        if is_answer {
            answer = Some(data);
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_are_read_as_clients_mean_them() {
        let h = |s: &'static str| HeaderValue::from_static(s);
        assert_eq!(
            wants(Some(&h("application/json, text/event-stream"))),
            Wants::Both
        );
        assert_eq!(
            wants(Some(&h("text/event-stream;q=1, application/json;q=0.9"))),
            Wants::Both
        );
        assert_eq!(wants(Some(&h("text/event-stream"))), Wants::Stream);
        assert_eq!(wants(Some(&h("application/json"))), Wants::Json);
        assert_eq!(wants(Some(&h("*/*"))), Wants::Json);
        assert_eq!(wants(None), Wants::Json);
    }

    #[test]
    fn the_response_is_picked_out_of_the_stream() {
        let stream = "data: \nid: 0\nretry: 3000\n\n\
            data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n\
            id: 2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
        assert_eq!(
            jsonrpc_answer(stream).as_deref(),
            Some(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
        );
        assert_eq!(jsonrpc_answer("data: \n\n"), None);
    }
}
