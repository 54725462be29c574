//! Egress on the vm backend: a program in a guest reaches the granted hosts through the
//! guest's tunnel to the runner's proxy (the guest still has no network card), and
//! nothing else; a session's tunnel works again after its VM is saved and restored.
//!
//! The origin is a small HTTP server of the test's on 127.0.0.2 (a loopback address the
//! proxy variables' NO_PROXY does not name), opened with RUNNER_EGRESS_ALLOW_CIDRS, so
//! that programs reach it by its IP literal; names are refused by the proxy before any
//! lookup.

use super::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The origin's address, and one the policy leaves closed.
const ORIGIN_IP: &str = "127.0.0.2";
const CLOSED_IP: &str = "127.0.0.3";
/// The body of `/big`: enough to go through many windows of the tunnel.
const BIG: usize = 3 << 20;

/// An HTTP origin: `/big` answers [`BIG`] bytes, anything else a line.
struct Origin {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn big_body() -> Vec<u8> {
    (0..BIG).map(|i| (i % 251) as u8).collect()
}

impl Origin {
    async fn start() -> Origin {
        let listener = tokio::net::TcpListener::bind((ORIGIN_IP, 0))
            .await
            .expect("an origin on 127.0.0.2");
        let port = listener.local_addr().expect("its address").port();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer(stream));
            }
        });
        Origin { port, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{ORIGIN_IP}:{}{path}", self.port)
    }
}

async fn answer(mut stream: tokio::net::TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let body = if head.starts_with(b"GET /big ") {
        big_body()
    } else {
        b"hello from the host\n".to_vec()
    };
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.write_all(&body).await;
}

/// A VM runner that opens the origin's address and, as a name, pypi.org (never granted
/// here: its refusal needs no lookup).
fn egress_runner(state: &Path) -> Runner {
    vm_runner_with(
        1,
        state,
        &[
            "--egress-allow",
            "pypi.org",
            "--egress-allow-cidrs",
            &format!("{ORIGIN_IP}/32"),
        ],
    )
}

async fn run_bash(runner: &Runner, code: &str, egress: Value) -> Value {
    let body = json!({"lang": "bash", "code": code, "egress": egress, "timeoutMs": 60_000});
    let (status, out) = tokio::time::timeout(REQUEST_BOUND, runner.post(&body))
        .await
        .expect("an answer within the bound");
    assert_eq!(status, 200, "{out}");
    out
}

/// The status line curl sees for `url` (through the proxy).
fn status_of(url: &str) -> String {
    format!("curl -s -o /dev/null -w '%{{http_code}}\\n' {url}\n")
}

#[tokio::test]
async fn a_guest_reaches_the_granted_host_through_its_tunnel_and_nothing_else() {
    let _serial = SERIAL.lock().await;
    let origin = Origin::start().await;
    let runner = egress_runner(&state_dir("egress"));
    wait_available(&runner).await;
    let expected_digest = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(big_body());
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let small = origin.url("/small");
    let code = format!(
        "set -e\ncurl -sS {small}\n\
         curl -sS {big} | sha256sum | cut -d' ' -f1\n\
         for i in 1 2 3 4 5 6; do curl -sS -o /tmp/p$i {small} & done; wait\n\
         cat /tmp/p* | wc -l\n\
         python3 -c \"import urllib.request as u; print(u.urlopen('{small}').read().decode(), end='')\"\n\
         {closed}{name}tail -n +3 /proc/net/dev | wc -l\n",
        big = origin.url("/big"),
        closed = status_of(&format!("http://{CLOSED_IP}:{}/", origin.port)),
        name = status_of("http://pypi.org/simple/"),
    );
    let out = run_bash(&runner, &code, json!([ORIGIN_IP])).await;
    let expected =
        format!("hello from the host\n{expected_digest}\n6\nhello from the host\n403\n403\n1\n");
    assert_eq!(stdout(&out), expected, "{out}");
    let used = &out["egress"];
    assert_eq!(used["connections"], 9, "{out}");
    assert_eq!(used["refused"], 2, "{out}");
    assert!(used["bytesIn"].as_u64().unwrap_or(0) > BIG as u64, "{out}");

    // A program that floods the proxy's address with idle connections takes nothing
    // from the next one: past the caps they are closed, and all are freed on close.
    let flood = format!(
        "python3 -c \"import socket; s = [socket.create_connection(('127.0.0.1', 3128)) \
         for _ in range(100)]; [c.close() for c in s]\"\ncurl -sS {small}\n"
    );
    let out = run_bash(&runner, &flood, json!([ORIGIN_IP])).await;
    assert_eq!(stdout(&out), "hello from the host\n", "{out}");

    // Without a grant the proxy is there, and refuses.
    let out = run_bash(&runner, &status_of(&small), Value::Null).await;
    assert_eq!(stdout(&out), "403\n", "{out}");
    let (status, refused) = runner
        .post(&json!({"lang": "bash", "code": "true", "egress": ["example.com"]}))
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "egress_not_allowed", "{refused}");
}

#[tokio::test]
async fn a_vm_sessions_tunnel_works_after_a_save_and_follows_its_grant() {
    let _serial = SERIAL.lock().await;
    let origin = Origin::start().await;
    let runner = egress_runner(&state_dir("egress-session"));
    let id = runner.open_session(json!({"egress": [ORIGIN_IP]})).await;
    let fetch = format!("curl -sS {}", origin.url("/small"));
    let out = runner.ok_in(&id, "bash", &fetch).await;
    assert_eq!(stdout(&out), "hello from the host\n", "{out}");
    let (status, paused) = runner
        .request("POST", &format!("/sessions/{id}/pause"), None)
        .await;
    assert_eq!(status, 200, "{paused}");
    let out = runner.ok_in(&id, "bash", &fetch).await;
    assert_eq!(out["resumed"], true, "{out}");
    assert_eq!(stdout(&out), "hello from the host\n", "{out}");
    let (status, patched) = runner
        .request(
            "PATCH",
            &format!("/sessions/{id}"),
            Some(&json!({"egress": []})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    let out = runner
        .ok_in(&id, "bash", &status_of(&origin.url("/small")))
        .await;
    assert_eq!(stdout(&out), "403\n", "{out}");
}
