//! The MCP server's HTTP handling, in-process, through the real router (Origin check, auth,
//! limits, rmcp's Streamable HTTP service): any method, path, headers and body give an
//! answer, never a panic, and no 5xx but the 503 of the session cap.
//!
//! An input reads like a request, so that seeds can be written by hand:
//!
//! ```text
//! P/mcp                      <- method letter (P, G, D, anything else: OPTIONS) and path
//! authorization: Bearer $TOKEN
//! content-type: application/json
//!                            <- an empty line, then the body
//! {"jsonrpc":"2.0","id":1,"method":"ping"}
//! ```
//!
//! `$TOKEN` stands for the server's token. Lines that are not a valid header are skipped.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request};
use libfuzzer_sys::fuzz_target;
use sandbox_mcp::{AuthToken, McpConfig, ToolConfig};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

const TOKEN: &str = "fuzz-token-0123456789";
/// Time allowed to read an answer; an SSE stream that stays open is cut there.
const READ_TIME: Duration = Duration::from_millis(200);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

fn config() -> &'static McpConfig {
    static CONFIG: OnceLock<McpConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let token = AuthToken::new(TOKEN).expect("a token");
        let mut config = McpConfig::new(token, ToolConfig::default());
        config.max_body_bytes = 64 * 1024;
        config.max_sessions = 4;
        config
    })
}

fn split_head(data: &[u8]) -> (&[u8], &[u8]) {
    match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[]),
    }
}

fn request(data: &[u8]) -> Option<Request<Body>> {
    let (head, body) = split_head(data);
    let mut lines = head.split(|b| *b == b'\n');
    let first = lines.next().unwrap_or_default();
    let method = match first.first() {
        Some(b'P') => Method::POST,
        Some(b'G') => Method::GET,
        Some(b'D') => Method::DELETE,
        _ => Method::OPTIONS,
    };
    let path = std::str::from_utf8(first.get(1..).unwrap_or_default()).ok()?;
    let mut request = Request::builder()
        .method(method)
        .uri(if path.is_empty() { "/mcp" } else { path })
        .header("host", "localhost")
        .body(Body::from(body.to_vec()))
        .ok()?;
    for line in lines {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let value = line[colon + 1..].trim_ascii();
        let value = String::from_utf8_lossy(value).replace("$TOKEN", TOKEN);
        // Bytes that cannot be a header never reach a server.
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(line[..colon].trim_ascii()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            request.headers_mut().append(name, value);
        }
    }
    Some(request)
}

fuzz_target!(|data: &[u8]| {
    let Some(request) = request(data) else {
        return;
    };
    runtime().block_on(async {
        let sessions_end = CancellationToken::new();
        let app = sandbox_mcp::app(config(), sessions_end.clone()).expect("the router");
        let response = app
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        assert!(
            !status.is_server_error() || status == 503,
            "{status} for {:?}",
            String::from_utf8_lossy(data)
        );
        let _ = tokio::time::timeout(
            READ_TIME,
            axum::body::to_bytes(response.into_body(), 1 << 20),
        )
        .await;
        sessions_end.cancel();
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
    });
});
