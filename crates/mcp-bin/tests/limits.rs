//! Limits against abuse, on the real `sandbox-mcp serve`: slow headers, large headers, too
//! many connections, slow bodies, large bodies, too many sessions, too many calls at once.

mod common;

use std::time::{Duration, Instant};

use common::{call, connect, raw_exchange, start_mcp, text, Answer, FakeRunner, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Writes a header line every 100 ms and returns how long the server took to close.
async fn close_time_of_slow_headers(server: &Server) -> Duration {
    let stream = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    let (mut reader, mut writer) = stream.into_split();
    let started = Instant::now();
    let trickle = tokio::spawn(async move {
        let _ = writer
            .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
            .await;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if writer.write_all(b"X-Slow: y\r\n").await.is_err() {
                return;
            }
        }
    });
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(8), reader.read_to_end(&mut rest)).await;
    trickle.abort();
    assert!(
        closed.is_ok(),
        "a connection sending headers slowly stays open"
    );
    started.elapsed()
}

#[tokio::test]
async fn headers_sent_slowly_get_the_connection_closed() {
    let server = start_mcp(&[("MCP_HEADER_TIMEOUT_MS", "500")]);
    let took = close_time_of_slow_headers(&server).await;
    assert!(took >= Duration::from_millis(400), "closed after {took:?}");
    assert!(took < Duration::from_secs(4), "closed after {took:?}");
}

#[tokio::test]
async fn oversized_headers_get_431() {
    let server = start_mcp(&[("MCP_MAX_HEADER_BYTES", "4096")]);
    let request = format!(
        "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\n\r\n",
        "a".repeat(6000)
    );
    let answer = raw_exchange(&server.addr(), request.as_bytes(), Duration::from_secs(5))
        .await
        .expect("the server answers and closes");
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    let fits = reqwest::get(format!("{}/health", server.base()))
        .await
        .expect("GET /health");
    assert_eq!(fits.status(), 200);
}

#[tokio::test]
async fn connections_beyond_the_cap_get_503() {
    let server = start_mcp(&[("MCP_MAX_CONNECTIONS", "2")]);
    let first = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    let _second = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let request = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let answer = raw_exchange(&server.addr(), request, Duration::from_secs(5))
        .await
        .expect("the server answers and closes");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.contains("too_many_connections"), "{answer:?}");
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = raw_exchange(
        &server.addr(),
        b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await
    .expect("answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

#[tokio::test]
async fn a_body_sent_slowly_gets_408() {
    let server = start_mcp(&[("MCP_BODY_TIMEOUT_MS", "500")]);
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"jsonrpc\"",
        server.token
    );
    let started = Instant::now();
    let answer = raw_exchange(&server.addr(), request.as_bytes(), Duration::from_secs(5))
        .await
        .expect("the server answers and closes");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("body_timeout"), "{answer:?}");
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413() {
    let server = start_mcp(&[("MCP_MAX_BODY_BYTES", "2048")]);
    let client = connect(&server, &server.token).await.expect("initialize");
    // rmcp 3.11's client leaves a call whose POST got 413 pending instead of failing it:
    // what matters here is that the call never runs.
    let refused = tokio::time::timeout(
        Duration::from_secs(3),
        client.call_tool(call("run_bash", &"echo x; ".repeat(1000), None)),
    )
    .await;
    assert!(!matches!(refused, Ok(Ok(_))), "{refused:?}");
    let fresh = connect(&server, &server.token).await.expect("initialize");
    let small = fresh
        .call_tool(call("run_bash", "echo small", None))
        .await
        .expect("a small call still goes through");
    assert!(
        text(&small).contains("SANDBOX_RUNNER_URL"),
        "{}",
        text(&small)
    );
    fresh.cancel().await.expect("close");
    let response = reqwest::Client::new()
        .post(&server.url)
        .bearer_auth(&server.token)
        .header("Accept", "application/json, text/event-stream")
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(4096)}}))
        .send()
        .await
        .expect("POST /mcp");
    assert_eq!(response.status(), 413);
    let body: serde_json::Value = response.json().await.expect("a JSON-RPC error");
    assert_eq!(body["jsonrpc"], "2.0");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("MCP_MAX_BODY_BYTES"), "{message}");
}

#[tokio::test]
async fn sessions_beyond_the_cap_get_503_until_one_closes() {
    let server = start_mcp(&[("MCP_MAX_SESSIONS", "2")]);
    let first = connect(&server, &server.token).await.expect("initialize");
    let second = connect(&server, &server.token).await.expect("initialize");
    assert!(connect(&server, &server.token).await.is_err());
    let response = reqwest::Client::new()
        .post(&server.url)
        .bearer_auth(&server.token)
        .header("Accept", "application/json, text/event-stream")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        )
        .send()
        .await
        .expect("POST /mcp");
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.expect("a JSON-RPC error");
    assert_eq!(body["id"], 7);
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("MCP_MAX_SESSIONS"), "{message}");
    second
        .list_all_tools()
        .await
        .expect("open sessions keep working");
    first.cancel().await.expect("close a session");
    let third = connect(&server, &server.token)
        .await
        .expect("a closed session frees its place");
    third.cancel().await.expect("close");
    second.cancel().await.expect("close");
}

#[tokio::test]
async fn calls_beyond_the_per_session_cap_get_an_error_result() {
    let runner = FakeRunner::start(Answer::Good, Duration::from_millis(1500)).await;
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", "fake"),
        ("MCP_MAX_CALLS_PER_SESSION", "1"),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let peer = client.peer().clone();
    let slow =
        tokio::spawn(async move { peer.call_tool(call("run_bash", "echo one", None)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = client
        .call_tool(call("run_bash", "echo two", None))
        .await
        .expect("tools/call");
    assert_eq!(refused.is_error, Some(true));
    assert!(
        text(&refused).contains("MCP_MAX_CALLS_PER_SESSION"),
        "{}",
        text(&refused)
    );
    let structured = refused.structured_content.expect("structuredContent");
    assert_eq!(structured["error"]["code"], "session_busy");
    let first = slow.await.expect("task").expect("the first call goes on");
    assert_eq!(first.is_error, Some(false), "{}", text(&first));
    let other = connect(&server, &server.token).await.expect("initialize");
    let again = client
        .call_tool(call("run_bash", "echo three", None))
        .await
        .expect("tools/call");
    assert_eq!(
        again.is_error,
        Some(false),
        "the place is free again: {}",
        text(&again)
    );
    other.cancel().await.expect("close");
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn a_call_longer_than_the_header_timeout_is_answered() {
    let runner = FakeRunner::start(Answer::Good, Duration::from_millis(2000)).await;
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", "fake"),
        ("MCP_HEADER_TIMEOUT_MS", "500"),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let result = client
        .call_tool(call("run_bash", "echo slow", None))
        .await
        .expect("tools/call");
    assert_eq!(result.is_error, Some(false), "{}", text(&result));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let again = client
        .call_tool(call("run_bash", "echo again", None))
        .await
        .expect("the session outlives idle connections");
    assert_eq!(again.is_error, Some(false), "{}", text(&again));
    client.cancel().await.expect("close");
}
