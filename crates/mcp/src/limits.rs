//! Limits on `/mcp` POSTs: the body size (413), the number of sessions (503 on a new
//! `initialize`), and the tracking of responses in flight, which shutdown waits for.
//!
//! Runs after the Origin check and authentication, so that only a client with the token
//! can make the server buffer a body.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio::sync::Mutex;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

/// JSON-RPC's code for a request that is not acceptable.
const INVALID_REQUEST: i32 = -32600;
/// The code, in JSON-RPC's range for server errors, for "no room for another session".
const SERVER_BUSY: i32 = -32000;
/// Seconds a client refused a session is asked to wait.
const SESSION_RETRY_AFTER: &str = "5";

/// What the `/mcp` limits need.
pub(crate) struct McpLimits {
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Sessions open at once.
    pub max_sessions: usize,
    /// rmcp's sessions, to count them.
    pub sessions: Arc<LocalSessionManager>,
    /// POST responses not yet sent to the end.
    pub in_flight: TaskTracker,
    /// Held from counting the sessions to the new one's answer, so that two `initialize`
    /// requests cannot both take the last place.
    initializing: Mutex<()>,
}

impl McpLimits {
    /// Limits over `sessions`, tracking POSTs in `in_flight`.
    pub(crate) fn new(
        max_body_bytes: usize,
        max_sessions: usize,
        sessions: Arc<LocalSessionManager>,
        in_flight: TaskTracker,
    ) -> Self {
        McpLimits {
            max_body_bytes,
            max_sessions,
            sessions,
            in_flight,
            initializing: Mutex::new(()),
        }
    }
}

/// The parts of a JSON-RPC message these limits look at.
#[derive(serde::Deserialize)]
struct Probe {
    #[serde(default)]
    id: serde_json::Value,
    #[serde(default)]
    method: Option<String>,
}

/// Buffers a POST's body within the size limit, refuses a session beyond the cap, and
/// tracks the response until it has been sent.
pub(crate) async fn limit_posts(
    State(limits): State<Arc<McpLimits>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let in_flight = limits.in_flight.token();
    let (parts, body) = request.into_parts();
    let body = match read_body(body, declared_length(&parts.headers), limits.max_body_bytes).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let probe = serde_json::from_slice::<Probe>(&body).ok();
    let request = Request::from_parts(parts, Body::from(body));
    let response = match probe {
        Some(probe) if probe.method.as_deref() == Some("initialize") => {
            let _initializing = limits.initializing.lock().await;
            let open = limits.sessions.sessions.read().await.len();
            if open >= limits.max_sessions {
                tracing::warn!(open, "initialize refused: too many sessions");
                return too_many_sessions(probe.id, limits.max_sessions);
            }
            next.run(request).await
        }
        _ => next.run(request).await,
    };
    response.map(|inner| {
        Body::new(Tracked {
            inner,
            _in_flight: in_flight,
        })
    })
}

fn declared_length(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

async fn read_body(body: Body, declared: Option<u64>, max: usize) -> Result<Bytes, Response> {
    if declared.is_some_and(|length| length > max as u64) {
        return Err(too_large(max));
    }
    let limited = http_body_util::Limited::new(body, max);
    match http_body_util::BodyExt::collect(limited).await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large(max)),
        Err(error) => Err(rpc_error(
            StatusCode::BAD_REQUEST,
            serde_json::Value::Null,
            INVALID_REQUEST,
            format!("the request body could not be read: {error}"),
        )),
    }
}

fn too_large(max: usize) -> Response {
    let mut response = rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        serde_json::Value::Null,
        INVALID_REQUEST,
        format!("the request body is over this server's limit of {max} bytes (MCP_MAX_BODY_BYTES)"),
    );
    // The rest of the body is unread: the connection cannot carry another request.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn too_many_sessions(id: serde_json::Value, max: usize) -> Response {
    let mut response = rpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        SERVER_BUSY,
        format!(
            "this server has {max} MCP sessions open, its limit (MCP_MAX_SESSIONS); \
             close one (DELETE /mcp) or retry later"
        ),
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(SESSION_RETRY_AFTER),
    );
    response
}

fn rpc_error(status: StatusCode, id: serde_json::Value, code: i32, message: String) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    });
    (status, axum::Json(body)).into_response()
}

/// A response body that counts as in flight until it is dropped.
struct Tracked {
    inner: Body,
    _in_flight: TaskTrackerToken,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
