//! A session's files against what a hostile program leaves in its home folder: FIFOs,
//! sockets and devices, symlinks swapped for folders while a listing runs, listings too
//! large for the agent's channel. Each is refused or cut short with a clear answer, and
//! the session goes on with its programs and files (issue 28, points 7 to 9). Real runner,
//! real sandboxes.

mod common;

use common::{backend, host_processes_with, stdout, Runner, TOKEN};
use serde_json::{json, Value};
use std::time::Duration;

/// Longer than any file operation may take here: a request still pending then hung.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// A request with the token and, for a PUT, a body; the status and the raw body, or a
/// panic when no answer came within [`ANSWER_WITHIN`].
async fn send(runner: &Runner, method: &str, path: &str, body: Option<Vec<u8>>) -> (u16, Vec<u8>) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = runner
        .client
        .request(method.clone(), format!("{}{path}", runner.url))
        .bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.body(body);
    }
    let exchange = async {
        let resp = request.send().await.expect("the runner answered");
        let status = resp.status().as_u16();
        (status, resp.bytes().await.expect("a body").to_vec())
    };
    tokio::time::timeout(ANSWER_WITHIN, exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path} hung for {ANSWER_WITHIN:?}"))
}

/// The error code of an error answer's body.
fn error_code(body: &[u8]) -> String {
    let body: Value = serde_json::from_slice(body)
        .unwrap_or_else(|_| panic!("a JSON error, got {}", String::from_utf8_lossy(body)));
    body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("an error body, got {body}"))
        .to_owned()
}

/// Asserts that the session still runs programs and still has `~/kept`.
async fn still_works(runner: &Runner, id: &str, after: &str) {
    let (status, out) = runner.run_in(id, "bash", "cat ~/kept").await;
    assert_eq!(status, 200, "after {after} the session is gone: {out}");
    assert_eq!(stdout(&out), "kept\n", "after {after}: {out}");
    let (status, body) = send(runner, "GET", &format!("/sessions/{id}/files/kept"), None).await;
    assert_eq!(
        (status, body.as_slice()),
        (200, &b"kept\n"[..]),
        "after {after}"
    );
}

/// Makes a character device (1, 3: a null device) at `path` in the sandbox of process
/// `pid`, from the host: as the process's own user (the sandbox's user namespace maps no
/// other), with CAP_MKNOD.
fn make_device(pid: &str, path: &str) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let id = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|ids| ids.split_whitespace().next())
            .expect("an id")
            .to_owned()
    };
    let made = std::process::Command::new("setpriv")
        .args([
            "--reuid",
            &id("Uid:"),
            "--regid",
            &id("Gid:"),
            "--clear-groups",
        ])
        .args([
            "--inh-caps",
            "+mknod,+sys_ptrace",
            "--ambient-caps",
            "+mknod,+sys_ptrace",
        ])
        .arg("mknod")
        .arg(format!("/proc/{pid}/root{path}"))
        .args(["c", "1", "3"])
        .status()
        .expect("setpriv runs");
    assert!(made.success(), "mknod in the session's home: {made}");
}

/// A program's FIFOs (one with nobody at the other end, one held open at both ends by a
/// background process), its socket and a device node: GET and PUT of each answer at once
/// with 400 `not_a_file`, naming the kind, and write nothing; the session lives on.
#[tokio::test]
async fn fifos_sockets_and_devices_are_refused_at_once_and_the_session_lives_on() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    runner
        .ok_in(
            &id,
            "bash",
            "echo kept > ~/kept; mkdir ~/folder; mkfifo ~/fifo ~/held
             python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/home/sandbox/sock')\"
             (exec 3<>~/held; exec sleep 86397) >/dev/null 2>&1 &
             until grep -qs 86397 /proc/$!/cmdline; do sleep 0.02; done",
        )
        .await;
    let mut refused = vec![("fifo", "FIFO"), ("held", "FIFO"), ("sock", "socket")];
    // No program can make a device node (its home is nodev, and it has no CAP_MKNOD):
    // one made from the host stands for what a program might find there.
    if backend() == "process" {
        let holder = host_processes_with("sleep 86397");
        assert_eq!(holder.len(), 1, "{holder:?}");
        let pid = holder[0].split(':').next().expect("a pid");
        make_device(pid, "/home/sandbox/null");
        refused.push(("null", "device"));
    }
    for (name, kind) in &refused {
        let path = format!("/sessions/{id}/files/{name}");
        for (method, body) in [("GET", None), ("PUT", Some(b"written".to_vec()))] {
            let (status, answer) = send(&runner, method, &path, body).await;
            let text = String::from_utf8_lossy(&answer).into_owned();
            assert_eq!(status, 400, "{method} {name}: {text}");
            assert_eq!(error_code(&answer), "not_a_file", "{method} {name}: {text}");
            assert!(
                text.contains(kind),
                "{method} {name} names a {kind}: {text}"
            );
            still_works(&runner, &id, &format!("{method} {name}")).await;
        }
    }
    // A folder is not a file either, and a FIFO is no folder to write into.
    let (status, answer) = send(
        &runner,
        "GET",
        &format!("/sessions/{id}/files/folder"),
        None,
    )
    .await;
    assert_eq!((status, error_code(&answer).as_str()), (400, "not_a_file"));
    let (status, answer) = send(
        &runner,
        "PUT",
        &format!("/sessions/{id}/files/fifo/x"),
        Some(b"x".to_vec()),
    )
    .await;
    assert_eq!((status, error_code(&answer).as_str()), (400, "bad_path"));
    // Nothing went into the FIFO whose reader waits.
    let out = runner
        .ok_in(
            &id,
            "python",
            "import os\nfd = os.open('/home/sandbox/held', os.O_RDONLY | os.O_NONBLOCK)\n\
             try:\n    print(os.read(fd, 100))\nexcept BlockingIOError:\n    print('empty')",
        )
        .await;
    assert_eq!(stdout(&out), "empty\n", "{out}");
    still_works(&runner, &id, "every refusal").await;
}

/// A file a background program holds a lease on (fcntl F_SETLEASE; the program is
/// stopped between runs, so it never lets go): GET and PUT answer at once, 400
/// `file_error` saying so, instead of waiting out the kernel's lease-break-time (45 s);
/// the session lives on.
#[tokio::test]
async fn a_leased_file_is_refused_at_once_and_the_session_lives_on() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let hold = "import fcntl, os, signal, time\n\
                signal.signal(signal.SIGIO, signal.SIG_IGN)\n\
                fd = os.open('/home/sandbox/leased', os.O_RDONLY)\n\
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n\
                open('/home/sandbox/lease-held', 'w').close()\n\
                time.sleep(86395)";
    let out = runner
        .ok_in(
            &id,
            "bash",
            &format!(
                "echo kept > ~/kept; echo leased > ~/leased
                 python3 -c \"{hold}\" >/dev/null 2>&1 &
                 for i in $(seq 200); do [ -e ~/lease-held ] && break; sleep 0.05; done
                 ls ~/lease-held"
            ),
        )
        .await;
    assert_eq!(stdout(&out), "/home/sandbox/lease-held\n", "{out}");
    let path = format!("/sessions/{id}/files/leased");
    for (method, body) in [("GET", None), ("PUT", Some(b"written".to_vec()))] {
        let (status, answer) = send(&runner, method, &path, body).await;
        let text = String::from_utf8_lossy(&answer).into_owned();
        assert_eq!(status, 400, "{method}: {text}");
        assert_eq!(error_code(&answer), "file_error", "{method}: {text}");
        assert!(text.contains("leased"), "{method}: {text}");
        still_works(&runner, &id, &format!("{method} of a leased file")).await;
    }
}

/// The C program that swaps each of two folders with a symlink out of the home folder
/// (to `/` and to the agent's `/proc/1/task`) as fast as it can, in the background, past
/// its run and through the stop between runs: one-shot timers, re-armed while it runs,
/// send it SIGCONT from 0.25 ms to 1 s ahead (a SIGCONT it handles resumes it; a
/// periodic timer's would be dropped by the next SIGSTOP, and the timer with it).
const SWAPPER: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TIMERS 64

static void resumed(int signal) { (void)signal; }

int main(void) {
    int ready[2];
    char byte = 0;
    pipe(ready);
    /* The run ends once the swapper is set up: stopped before, it would stay stopped. */
    if (fork() != 0) return read(ready[0], &byte, 1) == 1 ? 0 : 1;
    setsid();
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0); dup2(null, 1); dup2(null, 2);
    signal(SIGCONT, resumed);
    timer_t timers[TIMERS];
    struct sigevent event = {0};
    event.sigev_notify = SIGEV_SIGNAL;
    event.sigev_signo = SIGCONT;
    for (int i = 0; i < TIMERS; i++) timer_create(CLOCK_MONOTONIC, &event, &timers[i]);
    for (int told = 0;; told = 1) {
        for (int i = 0; i < TIMERS; i++) {
            struct itimerspec left;
            timer_gettime(timers[i], &left);
            if (left.it_value.tv_sec == 0 && left.it_value.tv_nsec == 0) {
                long ns = (long)(i + 1) * (i + 1) * 250000;
                struct itimerspec once = {{0, 0}, {ns / 1000000000, ns % 1000000000}};
                timer_settime(timers[i], 0, &once, 0);
            }
        }
        if (!told) write(ready[1], &byte, 1);
        syscall(SYS_renameat2, AT_FDCWD, "/home/sandbox/race/d1", AT_FDCWD,
                "/home/sandbox/race/l1", 2 /* RENAME_EXCHANGE */);
        syscall(SYS_renameat2, AT_FDCWD, "/home/sandbox/race/d2", AT_FDCWD,
                "/home/sandbox/race/l2", 2);
    }
}
"#;

/// Listings while a program swaps folders for symlinks out of the home folder: no
/// listing ever has an entry from beyond them (a symlink is listed as one, never
/// followed), and the session lives on.
#[tokio::test]
async fn a_symlink_swapped_in_during_a_listing_is_never_followed() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    runner
        .ok_in(
            &id,
            "bash",
            "echo kept > ~/kept; mkdir -p ~/race/d1 ~/race/d2
             touch ~/race/d1/inside ~/race/d2/inside
             ln -s / ~/race/l1; ln -s /proc/1/task ~/race/l2",
        )
        .await;
    let out = runner.ok_in(&id, "c", SWAPPER).await;
    assert_eq!(out["exitCode"], 0, "{out}");
    let allowed: Vec<String> = ["d1", "l1", "d2", "l2"]
        .iter()
        .flat_map(|n| [format!("race/{n}"), format!("race/{n}/inside")])
        .chain(["race".to_owned()])
        .collect();
    let mut symlinks_seen = 0;
    let mut d1_kinds = std::collections::HashSet::new();
    for round in 0..1000 {
        let (status, body) = send(&runner, "GET", &format!("/sessions/{id}/files"), None).await;
        let listing: Value = serde_json::from_slice(&body).expect("a JSON listing");
        assert_eq!(status, 200, "listing {round}: {listing}");
        for entry in listing["files"].as_array().expect("files") {
            let path = entry["path"].as_str().expect("a path");
            assert!(
                !path.starts_with("race") || allowed.iter().any(|a| a == path),
                "listing {round} went beyond the home folder: {path} in {listing}"
            );
            symlinks_seen += usize::from(entry["kind"] == "symlink");
            if path == "race/d1" {
                d1_kinds.insert(entry["kind"].as_str().unwrap_or_default().to_owned());
            }
        }
    }
    assert!(
        d1_kinds.len() > 1,
        "the swaps went on between the listings: {d1_kinds:?}"
    );
    assert!(symlinks_seen > 0, "the symlinks were listed as symlinks");
    still_works(&runner, &id, "the listings").await;
}

/// A home folder whose listing would be far larger than the agent's channel carries
/// (9,000 files at the bottom of fifteen folders with long names), then one deeper than
/// a listing goes: each listing is cut short, says `truncated`, stays within its byte
/// bound, and the session lives on.
#[tokio::test]
async fn oversized_and_overdeep_listings_are_cut_and_say_truncated() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let make = "import os\n\
                os.chdir('/home/sandbox')\n\
                open('kept', 'w').write('kept\\n')\n\
                os.mkdir('deep'); os.chdir('deep')\n\
                for i in range(15):\n    name = '%02d' % i + 'd' * 240\n    os.mkdir(name); os.chdir(name)\n\
                for i in range(9000):\n    open('%05d' % i + 'f' * 245, 'w').close()\n\
                print('made')";
    let out = runner.ok_in(&id, "python", make).await;
    assert_eq!(stdout(&out), "made\n", "{out}");
    let (status, body) = send(&runner, "GET", &format!("/sessions/{id}/files"), None).await;
    let text = String::from_utf8_lossy(&body[..body.len().min(2000)]).into_owned();
    assert_eq!(status, 200, "{text}");
    assert!(
        body.len() <= (4 << 20) + 1024,
        "a listing of {} bytes",
        body.len()
    );
    let listing: Value = serde_json::from_slice(&body).expect("a JSON listing");
    assert_eq!(listing["truncated"], true);
    let files = listing["files"].as_array().expect("files");
    assert!(files.len() > 100, "{} entries", files.len());
    still_works(&runner, &id, "an oversized listing").await;

    // Deeper than a listing goes: the folders past the depth are left out, and it says so.
    runner
        .ok_in(
            &id,
            "bash",
            "rm -rf ~/deep; mkdir -p ~/nest/$(printf 'n/%.0s' {1..40}); touch ~/nest/n/file",
        )
        .await;
    let (status, body) = send(&runner, "GET", &format!("/sessions/{id}/files"), None).await;
    let listing: Value = serde_json::from_slice(&body).expect("a JSON listing");
    assert_eq!(status, 200, "{listing}");
    assert_eq!(listing["truncated"], true, "{listing}");
    let paths: Vec<&str> = listing["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert!(paths.contains(&"nest/n/file"), "{paths:?}");
    still_works(&runner, &id, "an overdeep listing").await;
}

/// The host pid of the agent of the session whose background `sleep SECONDS` runs (the
/// sleep's parent once the shell that started it has exited).
fn agent_of_sleep(seconds: u32) -> i32 {
    let sleeper = host_processes_with(&format!("sleep {seconds}"));
    assert_eq!(sleeper.len(), 1, "{sleeper:?}");
    let pid = sleeper[0].split(':').next().expect("a pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|p| p.trim().parse().ok())
        .expect("a parent")
}

/// An agent that does not answer a file operation (stopped from the host: nothing in a
/// sandbox can make it wait): the caller gets 504 `file_timeout` after the runner's wait,
/// the session stays (busy until the answer comes), and once the agent answers the
/// session runs programs and keeps its files.
#[tokio::test]
async fn a_file_operation_without_an_answer_times_out_and_the_session_lives_on() {
    if backend() != "process" {
        eprintln!("SKIPPED: the agent is stopped from the host, which needs the process backend");
        return;
    }
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    runner
        .ok_in(
            &id,
            "bash",
            "echo kept > ~/kept; sleep 86396 >/dev/null 2>&1 &
             until grep -qs 86396 /proc/$!/cmdline; do sleep 0.02; done",
        )
        .await;
    let agent = nix::unistd::Pid::from_raw(agent_of_sleep(86396));
    nix::sys::signal::kill(agent, nix::sys::signal::Signal::SIGSTOP).expect("agent stopped");
    let url = format!("{}/sessions/{id}/files/kept", runner.url);
    let started = std::time::Instant::now();
    let resp = runner.client.get(&url).bearer_auth(TOKEN).send().await;
    let waited = started.elapsed();
    let resp = resp.expect("an answer");
    let status = resp.status().as_u16();
    let body = resp.bytes().await.expect("a body");
    assert_eq!(
        (status, error_code(&body).as_str()),
        (504, "file_timeout"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(
        waited < Duration::from_secs(40),
        "answered after {waited:?}"
    );
    let (status, body) = send(&runner, "GET", &format!("/sessions/{id}/files/kept"), None).await;
    assert_eq!((status, error_code(&body).as_str()), (409, "session_busy"));
    nix::sys::signal::kill(agent, nix::sys::signal::Signal::SIGCONT).expect("agent resumed");
    let deadline = std::time::Instant::now() + ANSWER_WITHIN;
    loop {
        let (_, info) = runner
            .request("GET", &format!("/sessions/{id}"), None)
            .await;
        if info["busy"] == false {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still busy: {info}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    still_works(&runner, &id, "a file operation that timed out").await;
}
