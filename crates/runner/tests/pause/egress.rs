//! A paused session's hosts at the runner's proxy across restarts (issue 33): the runner
//! saves its grant with its files, and a runner started on the same data folder gives it
//! back only within its own policy: all of it under the same policy, the names it still
//! allows under a narrower one (the others get the proxy's 403), nothing with egress off;
//! a grant narrowed while the session is paused is what a restart gives back.
//!
//! The test's host is a web server of its own on 127.0.0.1, named in a hosts file the
//! runner's mount namespace shows at /etc/hosts, and opened by `RUNNER_EGRESS_ALLOW_CIDRS`
//! (loopback is refused unless a range names it). Needs a root runner (the rootless
//! battery's refuses egress) and util-linux (`unshare`).

use crate::common::{stdout, test_uid, Options, Runner};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The name the session keeps through every policy here, and the one a narrower policy
/// drops.
const KEPT: &str = "kept.test";
const DROPPED: &str = "dropped.test";
/// What the test's web server answers.
const PAGE: &str = "hello from the test's host";

/// A web server on 127.0.0.1 answering [`PAGE`] to every request, until dropped.
struct Site {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Site {
    fn start() -> Site {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        listener.set_nonblocking(true).expect("non-blocking");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => answer(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Site { port, stop }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Reads a request's head (a little at most) and answers [`PAGE`].
fn answer(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{PAGE}",
        PAGE.len()
    );
    let _ = stream.write_all(answer.as_bytes());
}

/// A runner on `data` whose /etc/hosts is `hosts`, opening `allow` (empty: egress off)
/// and the loopback range the test's host is on.
fn runner_allowing(data: &Path, hosts: &Path, allow: &str) -> Runner {
    runner_capped(data, hosts, allow, None)
}

/// [`runner_allowing`], each sandbox's bytes capped at `max_bytes` when given.
fn runner_capped(data: &Path, hosts: &Path, allow: &str, max_bytes: Option<u64>) -> Runner {
    let script = format!(
        "mount --bind {} /etc/hosts && exec \"$0\" \"$@\"",
        hosts.display()
    );
    let wrapper = ["unshare", "--mount", "--propagation", "slave", "sh", "-c"]
        .into_iter()
        .map(String::from)
        .chain([script])
        .collect();
    let mut env = vec![("RUNNER_DATA_DIR".to_owned(), data.display().to_string())];
    if !allow.is_empty() {
        env.push(("RUNNER_EGRESS_ALLOW".to_owned(), allow.to_owned()));
        env.push((
            "RUNNER_EGRESS_ALLOW_CIDRS".to_owned(),
            "127.0.0.1/32".to_owned(),
        ));
    }
    if let Some(max) = max_bytes {
        env.push(("RUNNER_EGRESS_MAX_BYTES".to_owned(), max.to_string()));
    }
    Runner::with(Options {
        pool_size: 1,
        env,
        wrapper,
        ..Options::default()
    })
}

/// `GET /sessions/{id}`: it must be there.
async fn shown(runner: &Runner, id: &str) -> Value {
    let (status, info) = runner
        .request("GET", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(status, 200, "{info}");
    info
}

/// A bash run in session `id` fetching `host`'s page through the proxy: its stdout (the
/// body, then the status on a line of its own).
async fn fetch(runner: &Runner, id: &str, host: &str) -> String {
    let code = format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{host}/");
    stdout(&runner.ok_in(id, "bash", &code).await).to_owned()
}

#[tokio::test]
async fn a_paused_sessions_grant_comes_back_after_a_restart_within_the_policy_then() {
    if test_uid().is_some() {
        eprintln!("SKIPPED: the rootless battery's runner refuses egress");
        return;
    }
    let files = tempfile::tempdir().expect("the test's folder");
    let data = files.path().join("data");
    let hosts = files.path().join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 localhost {KEPT} {DROPPED}\n")).expect("hosts");
    let site = Site::start();
    let (kept, dropped) = (
        format!("{KEPT}:{}", site.port),
        format!("{DROPPED}:{}", site.port),
    );
    let both = format!("{kept},{dropped}");
    let reached = format!("{PAGE}\n200");

    let first = runner_allowing(&data, &hosts, &both);
    let id = first
        .open_session(json!({"egress": [&kept, &dropped]}))
        .await;
    assert_eq!(fetch(&first, &id, &dropped).await, reached);
    let (status, paused) = first
        .request("POST", &format!("/sessions/{id}/pause"), None)
        .await;
    assert_eq!(status, 200, "{paused}");
    assert!(first.stop().success(), "a clean stop");

    // The same policy: all of it back.
    let same = runner_allowing(&data, &hosts, &both);
    let info = shown(&same, &id).await;
    assert_eq!(info["state"], "paused", "{info}");
    assert_eq!(info["egress"], json!([&kept, &dropped]), "{info}");
    assert_eq!(fetch(&same, &id, &dropped).await, reached, "woken");
    assert!(same.stop().success(), "a clean stop (the session paused)");

    // A narrower policy: what it still allows, and the proxy's 403 for the rest.
    let narrower = runner_allowing(&data, &hosts, &kept);
    assert_eq!(shown(&narrower, &id).await["egress"], json!([&kept]));
    let refused = fetch(&narrower, &id, &dropped).await;
    assert!(refused.ends_with("\n403"), "{refused}");
    assert!(
        refused.contains(DROPPED),
        "the 403 names the host: {refused}"
    );
    assert_eq!(fetch(&narrower, &id, &kept).await, reached);
    let (status, widened) = narrower
        .request(
            "PATCH",
            &format!("/sessions/{id}"),
            Some(&json!({"egress": [&dropped]})),
        )
        .await;
    assert_eq!(status, 400, "{widened}");
    // Locked while paused: a restart gives it nothing back.
    let (status, _) = narrower
        .request("POST", &format!("/sessions/{id}/pause"), None)
        .await;
    assert_eq!(status, 200);
    let (status, locked) = narrower
        .request(
            "PATCH",
            &format!("/sessions/{id}"),
            Some(&json!({"egress": []})),
        )
        .await;
    assert_eq!(status, 200, "{locked}");
    assert!(narrower.stop().success(), "a clean stop");
    let locked = runner_allowing(&data, &hosts, &kept);
    assert_eq!(shown(&locked, &id).await["egress"], json!([]));
    let refused = fetch(&locked, &id, &kept).await;
    assert!(refused.ends_with("\n403"), "{refused}");
    assert!(locked.stop().success(), "a clean stop (the session paused)");

    // Egress off: no grant, no proxy. (A session's bash keeps the variables it exported
    // before, the proxy's among them; nothing answers at their address.)
    let off = runner_allowing(&data, &hosts, "");
    let info = shown(&off, &id).await;
    assert!(info.get("egress").is_none(), "{info}");
    let code = format!(
        "grep -c ':0C38 ' /proc/net/tcp; curl -s -m 5 -o /dev/null -w '%{{http_code}}' http://{kept}/; true"
    );
    let answer = off.ok_in(&id, "bash", &code).await;
    assert_eq!(answer["resumed"], true, "{answer}");
    assert_eq!(
        stdout(&answer).split_whitespace().collect::<Vec<_>>(),
        ["0", "000"],
        "a listener on 3128, or the host reached: {answer}"
    );
    let python = "import os; print(sorted(k for k in os.environ if 'proxy' in k.lower()))";
    let answer = off.ok_in(&id, "python", python).await;
    assert_eq!(stdout(&answer).trim(), "[]", "{answer}");
    drop(site);
}

/// A session's byte budget is over its whole life: each sandbox it has (woken after a
/// pause, or by a restarted runner) goes on counting from what the earlier ones used, so
/// that pausing gives it no fresh budget.
#[tokio::test]
async fn a_sessions_bytes_are_counted_across_its_pauses_and_a_restart() {
    if test_uid().is_some() {
        eprintln!("SKIPPED: the rootless battery's runner refuses egress");
        return;
    }
    let files = tempfile::tempdir().expect("the test's folder");
    let hosts = files.path().join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 localhost {KEPT}\n")).expect("hosts");
    let site = Site::start();
    let kept = format!("{KEPT}:{}", site.port);
    let reached = format!("{PAGE}\n200");

    // What one fetch moves, measured with no cap to speak of.
    let measure = runner_allowing(&files.path().join("measure"), &hosts, &kept);
    let id = measure.open_session(json!({"egress": [&kept]})).await;
    let code = format!("curl -s -m 10 -o /dev/null http://{kept}/");
    let used = measure.ok_in(&id, "bash", &code).await["egress"].clone();
    let one = used["bytesIn"].as_u64().unwrap_or(0) + used["bytesOut"].as_u64().unwrap_or(0);
    assert!(one > 0, "{used}");
    assert!(measure.stop().success());

    // Room for two fetches and a half: each sandbox alone would never reach it.
    let cap = Some(one * 5 / 2);
    let data = files.path().join("data");
    let first = runner_capped(&data, &hosts, &kept, cap);
    let id = first.open_session(json!({"egress": [&kept]})).await;
    assert_eq!(fetch(&first, &id, &kept).await, reached);
    let (status, _) = first
        .request("POST", &format!("/sessions/{id}/pause"), None)
        .await;
    assert_eq!(status, 200);
    assert!(first.stop().success(), "a clean stop");
    let next = runner_capped(&data, &hosts, &kept, cap);
    assert_eq!(
        fetch(&next, &id, &kept).await,
        reached,
        "woken after a restart"
    );
    for _ in 0..2 {
        let (status, _) = next
            .request("POST", &format!("/sessions/{id}/pause"), None)
            .await;
        assert_eq!(status, 200);
        let _ = fetch(&next, &id, &kept).await;
    }
    let refused = fetch(&next, &id, &kept).await;
    assert!(refused.ends_with("\n403"), "{refused}");
    assert!(refused.contains("RUNNER_EGRESS_MAX_BYTES"), "{refused}");
    drop(site);
}
