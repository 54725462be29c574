//! The runner's end of the tunnel against a guest the test plays, frame by frame, over a
//! socket pair, with the real proxy and an origin on loopback (opened by a range).

use super::*;
use sandbox_egress::{Limits, Policy};
use sandbox_protocol::tunnel::HEADER;
use std::io::ErrorKind;
use tokio::net::TcpListener;

const BOUND: Duration = Duration::from_secs(10);

/// An origin that answers every request with `body`.
async fn origin(body: Vec<u8>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
            });
        }
    });
    port
}

/// A tunnel served by a proxy that opens 127.0.0.1, granted; the test's end.
fn tunnel() -> (Tunnel, UnixStream) {
    let policy = Policy::parse("", "127.0.0.1/32").unwrap();
    let limits = Limits {
        max_bytes: 64 << 20,
        max_connections: 16,
    };
    let egress = Egress::new(policy.clone(), limits);
    let handle = egress.sandbox();
    handle.set_grant(policy.grant_all());
    let (ours, guest) = UnixStream::pair().unwrap();
    (Tunnel::open(&egress, handle, ours), guest)
}

async fn next(guest: &mut UnixStream) -> Option<Frame> {
    let mut header = [0u8; HEADER];
    match tokio::time::timeout(BOUND, guest.read_exact(&mut header)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) if e.kind() == ErrorKind::UnexpectedEof => return None,
        other => panic!("no frame: {other:?}"),
    }
    let (kind, id, len) = Frame::parse_header(&header).unwrap();
    let mut payload = vec![0u8; len];
    guest.read_exact(&mut payload).await.unwrap();
    Some(Frame::from_parts(kind, id, payload).unwrap())
}

async fn send(guest: &mut UnixStream, frame: Frame) {
    guest.write_all(&frame.encode()).await.unwrap();
}

fn request(port: u16) -> Vec<u8> {
    format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").into_bytes()
}

#[tokio::test]
async fn a_guests_connection_is_served_within_its_window() {
    let body: Vec<u8> = (0..WINDOW * 2).map(|i| (i % 253) as u8).collect();
    let port = origin(body.clone()).await;
    let (_tunnel, mut guest) = tunnel();
    assert_eq!(next(&mut guest).await, Some(Frame::Reset));
    send(&mut guest, Frame::Open(1)).await;
    let asked = request(port);
    send(&mut guest, Frame::Data(1, asked.clone())).await;
    // No credit given: the runner stops at one window.
    let mut received = Vec::new();
    let mut credited = 0;
    while received.len() < WINDOW {
        match next(&mut guest).await {
            Some(Frame::Data(1, bytes)) => received.extend(bytes),
            Some(Frame::Credit(1, n)) => credited += n as usize,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(received.len(), WINDOW);
    assert_eq!(
        credited,
        asked.len(),
        "the request was credited as delivered"
    );
    let quiet = tokio::time::timeout(Duration::from_millis(300), next(&mut guest)).await;
    assert!(quiet.is_err(), "more than a window: {quiet:?}");
    // Credit as it is delivered: the rest comes, then the end.
    send(&mut guest, Frame::Credit(1, WINDOW as u32)).await;
    loop {
        match next(&mut guest).await {
            Some(Frame::Data(1, bytes)) => {
                received.extend_from_slice(&bytes);
                send(&mut guest, Frame::Credit(1, bytes.len() as u32)).await;
            }
            Some(Frame::Eof(1)) => break,
            other => panic!("{other:?}"),
        }
    }
    let text = String::from_utf8_lossy(&received[..64]).into_owned();
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(received.ends_with(&body), "the whole body, in order");
}

#[tokio::test]
async fn a_guest_that_breaks_the_protocol_loses_its_tunnel() {
    let mut header = Frame::Open(1).encode();
    header[0] = 99;
    for broken in [
        vec![Frame::Open(1).encode(), Frame::Open(1).encode()],
        vec![Frame::Quiesce.encode()],
        // Credit for more than the runner could have sent.
        vec![
            Frame::Open(1).encode(),
            Frame::Credit(1, WINDOW as u32 + 1).encode(),
        ],
        vec![Frame::Credit(7, 1).encode(), header],
    ] {
        let (_tunnel, mut guest) = tunnel();
        assert_eq!(next(&mut guest).await, Some(Frame::Reset));
        for bytes in broken {
            guest.write_all(&bytes).await.unwrap();
        }
        loop {
            match next(&mut guest).await {
                None => break,
                Some(Frame::Close(_)) => {}
                other => panic!("{other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn a_quiesced_tunnel_stops_at_a_frames_end_and_resumes_with_a_reset() {
    let port = origin(b"hello".to_vec()).await;
    let (tunnel, mut guest) = tunnel();
    assert_eq!(next(&mut guest).await, Some(Frame::Reset));
    send(&mut guest, Frame::Open(1)).await;
    let guest_side = async {
        assert_eq!(next(&mut guest).await, Some(Frame::Quiesce));
        // Frames the guest sent before its answer are dropped.
        send(&mut guest, Frame::Data(1, b"late".to_vec())).await;
        send(&mut guest, Frame::Quiesced).await;
        guest
    };
    let (quiesced, mut guest) = tokio::join!(tunnel.quiesce(), guest_side);
    let resumed = quiesced.expect("the guest answered").resume();
    assert_eq!(next(&mut guest).await, Some(Frame::Reset));
    send(&mut guest, Frame::Open(2)).await;
    send(&mut guest, Frame::Data(2, request(port))).await;
    let mut answer = Vec::new();
    loop {
        match next(&mut guest).await {
            Some(Frame::Data(2, bytes)) => answer.extend(bytes),
            Some(Frame::Credit(2, _)) => {}
            Some(Frame::Eof(2)) => break,
            other => panic!("{other:?}"),
        }
    }
    assert!(answer.ends_with(b"hello"), "{answer:?}");
    assert_eq!(resumed.handle.usage().connections, 1);
}
