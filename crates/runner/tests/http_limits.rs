//! HTTP limits on the real `sandbox-runner serve`: slow headers, large headers, too many
//! connections, slow bodies (see the http-limits crate).

mod common;

use common::Runner;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn runner_with(flags: &[&str]) -> Runner {
    Runner::with(common::Options {
        pool_size: 1,
        extra: flags.iter().map(|f| f.to_string()).collect(),
        env: Vec::new(),
        ..Default::default()
    })
}

fn addr(runner: &Runner) -> String {
    runner.url.trim_start_matches("http://").to_owned()
}

/// Sends `request` on a new connection and reads until the server closes it.
async fn exchange(addr: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("send");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .expect("the server answers and closes")
        .expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn headers_sent_slowly_get_the_connection_closed() {
    let runner = runner_with(&["--header-timeout-ms", "500"]);
    let stream = TcpStream::connect(addr(&runner)).await.expect("connect");
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
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(4),
        "{took:?}"
    );
}

#[tokio::test]
async fn oversized_headers_get_431() {
    let runner = runner_with(&["--max-header-bytes", "4096"]);
    let request = format!(
        "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\n\r\n",
        "a".repeat(6000)
    );
    let answer = exchange(&addr(&runner), request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    assert_eq!(runner.health().await["status"], "ok");
}

#[tokio::test]
async fn connections_beyond_the_cap_get_503() {
    let runner = runner_with(&["--max-connections", "2"]);
    let first = TcpStream::connect(addr(&runner)).await.expect("connect");
    let _second = TcpStream::connect(addr(&runner)).await.expect("connect");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let request = b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let answer = exchange(&addr(&runner), request).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.contains("too_many_connections"), "{answer:?}");
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = exchange(&addr(&runner), request).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

#[tokio::test]
async fn a_body_sent_slowly_gets_408() {
    let runner = runner_with(&["--body-timeout-ms", "500"]);
    let request = format!(
        "POST /run HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"lang\"",
        common::TOKEN
    );
    let started = Instant::now();
    let answer = exchange(&addr(&runner), request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("body_timeout"), "{answer:?}");
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(common::stdout(&runner.run("bash", "echo ok").await), "ok\n");
}
