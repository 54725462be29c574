//! Per-sandbox limits: bytes over the sandbox's life, connections at once, a slow client,
//! and the end of serving when the runner aborts the task.

mod support;

use std::time::{Duration, Instant};

use sandbox_egress::Timeouts;
use support::{curl, limits, HttpOrigin, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MIB: u64 = 1 << 20;

#[tokio::test]
async fn the_byte_cap_cuts_the_copy_then_refuses() {
    let origin = HttpOrigin::start("127.0.0.1", vec![b'x'; 100_000]).await;
    let proxy = Proxy::start(
        &format!("big.test:{}", origin.port),
        "",
        limits(10_000, 16),
        true,
    )
    .await;
    proxy.names.set("big.test", &[&["127.0.0.1"]]);
    let url = format!("http://big.test:{}/", origin.port);
    let outcome = curl(&proxy, &url, &[]).await;
    assert!(
        !outcome.success,
        "the copy stops short: {:?}",
        outcome.stderr
    );
    assert!(outcome.stdout.len() < 10_000, "{}", outcome.stdout.len());
    let usage = proxy.sandbox.usage();
    assert_eq!(usage.bytes_in + usage.bytes_out, 10_000, "{usage:?}");
    let outcome = curl(&proxy, &url, &["-i"]).await;
    assert!(
        outcome.stdout.starts_with("HTTP/1.1 403 Forbidden\r\n"),
        "{outcome:?}"
    );
    assert!(
        outcome.stdout.contains("used its 10000 bytes"),
        "{outcome:?}"
    );
    assert_eq!(origin.accepted(), 1);
}

/// A proxy for held.test on `origin`'s port whose tunnels wait 20 s for a ClientHello.
async fn held_proxy(origin: &HttpOrigin, max_connections: usize) -> Proxy {
    let timeouts = Timeouts {
        hello: Duration::from_secs(20),
        ..Timeouts::default()
    };
    let allow = format!("held.test:{}", origin.port);
    let limits = limits(MIB, max_connections);
    let proxy = Proxy::start_with(&allow, "", limits, true, timeouts).await;
    proxy.names.set("held.test", &[&["127.0.0.1"]]);
    proxy
}

#[tokio::test]
async fn the_connection_cap_refuses_the_next_and_frees_on_close() {
    let origin = HttpOrigin::start("127.0.0.1", b"ok\n".to_vec()).await;
    let proxy = held_proxy(&origin, 2).await;
    let connect = format!(
        "CONNECT held.test:{0} HTTP/1.1\r\nHost: held.test:{0}\r\n\r\n",
        origin.port
    );
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(proxy.address).await.unwrap();
        stream.write_all(connect.as_bytes()).await.unwrap();
        let mut answer = [0u8; 39];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"HTTP/1.1 200 Connection established\r\n\r\n");
        held.push(stream);
    }
    let answer = proxy.raw(&connect).await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer.contains("already has 2 connections open"),
        "{answer}"
    );
    drop(held.pop());
    let url = format!("http://held.test:{}/", origin.port);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let outcome = curl(&proxy, &url, &[]).await;
        if outcome.stdout == "ok\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot never came back: {outcome:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_slow_client_gets_408_in_bounded_time() {
    let timeouts = Timeouts {
        head: Duration::from_millis(300),
        ..Timeouts::default()
    };
    let proxy = Proxy::start_with("slow.test", "", limits(MIB, 16), true, timeouts).await;
    let started = Instant::now();
    let answer = proxy
        .raw("CONNECT slow.test:443 HTTP/1.1\r\nHost: slo")
        .await;
    assert!(
        answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{answer}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let answer = proxy
        .raw(&format!(
            "GET http://slow.test/ HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(17_000)
        ))
        .await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
}

#[tokio::test]
async fn narrowing_the_grant_refuses_the_next_request() {
    let origin = HttpOrigin::start("127.0.0.1", b"ok\n".to_vec()).await;
    let proxy = Proxy::start(
        &format!("pkg.test:{}", origin.port),
        "",
        limits(MIB, 16),
        true,
    )
    .await;
    proxy.names.set("pkg.test", &[&["127.0.0.1"]]);
    let url = format!("http://pkg.test:{}/", origin.port);
    assert_eq!(curl(&proxy, &url, &[]).await.stdout, "ok\n");
    proxy.sandbox.set_grant(sandbox_egress::Grant::none());
    let outcome = curl(&proxy, &url, &["-i"]).await;
    let expected = format!(
        "egress: pkg.test:{} is not allowed (allowed: nothing)\n",
        origin.port
    );
    assert!(outcome.stdout.ends_with(&expected), "{outcome:?}");
    let before = proxy.sandbox.usage();
    assert_eq!((before.connections, before.refused), (1, 1));
}

#[tokio::test]
async fn aborting_the_task_ends_its_connections() {
    let origin = HttpOrigin::start("127.0.0.1", b"ok\n".to_vec()).await;
    let mut proxy = held_proxy(&origin, 4).await;
    let mut stream = TcpStream::connect(proxy.address).await.unwrap();
    let connect = format!("CONNECT held.test:{0} HTTP/1.1\r\n\r\n", origin.port);
    stream.write_all(connect.as_bytes()).await.unwrap();
    let mut answer = [0u8; 39];
    stream.read_exact(&mut answer).await.unwrap();
    assert!(proxy.stop().await, "the serving task ends when aborted");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
}

#[tokio::test]
async fn a_tunnel_without_a_client_hello_is_closed_in_bounded_time() {
    let origin = HttpOrigin::start("127.0.0.1", b"ok\n".to_vec()).await;
    let timeouts = Timeouts {
        hello: Duration::from_millis(300),
        ..Timeouts::default()
    };
    let allow = format!("quiet.test:{}", origin.port);
    let proxy = Proxy::start_with(&allow, "", limits(MIB, 4), true, timeouts).await;
    proxy.names.set("quiet.test", &[&["127.0.0.1"]]);
    let started = Instant::now();
    let answer = proxy
        .raw(&format!(
            "CONNECT quiet.test:{} HTTP/1.1\r\n\r\n",
            origin.port
        ))
        .await;
    assert_eq!(answer, "HTTP/1.1 200 Connection established\r\n\r\n");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(proxy.sandbox.usage().refused, 1);
}
