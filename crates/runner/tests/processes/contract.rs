//! The processes' contract: start, list, output by offsets (at once, waiting, followed),
//! stdin, signals, exit codes, the kept window, and the errors.

use super::common::{stdout, Options, Runner, TOKEN};
use super::{code, ended, list, output, read_to_end, signal, start, started, write_stdin};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_server_started_as_a_process_answers_a_run_of_the_same_session() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let (status, answer) = start(
        &runner,
        &id,
        json!({"command": "mkdir -p site && echo hello from the server > site/index.html \
                 && cd site && exec python3 -m http.server 8000 --bind 127.0.0.1"}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let pid = answer["pid"].as_i64().expect("an integer pid");
    assert!(
        answer["startedAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{answer}"
    );
    assert!(answer["command"]
        .as_str()
        .is_some_and(|c| c.contains("http.server")));
    let fetch = "import time, urllib.request\n\
                 for _ in range(100):\n\
                 \x20   try:\n\
                 \x20       print(urllib.request.urlopen('http://127.0.0.1:8000/index.html').read().decode(), end='')\n\
                 \x20       break\n\
                 \x20   except OSError:\n\
                 \x20       time.sleep(0.1)\n";
    let fetched = runner.ok_in(&id, "python", fetch).await;
    assert_eq!(stdout(&fetched), "hello from the server\n", "{fetched}");
    // The run sees the process in its /proc, by the pid the API gave.
    let seen = runner
        .ok_in(
            &id,
            "bash",
            &format!("cat /proc/{pid}/cmdline | tr '\\0' ' '"),
        )
        .await;
    assert!(stdout(&seen).contains("http.server"), "{seen}");
    // The server logged the request on its standard error.
    let (_, logged) = output(&runner, &id, pid, "").await;
    assert!(
        logged["stderr"]
            .as_str()
            .unwrap_or("")
            .contains("GET /index.html"),
        "{logged}"
    );
    assert_eq!(logged["running"], true);
    assert_eq!(logged["exitCode"], serde_json::Value::Null);
}

#[tokio::test]
async fn output_is_read_by_offsets_waiting_for_more_and_nothing_repeats_or_is_lost() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let pid = started(
        &runner,
        &id,
        "for i in 1 2 3 4; do echo line $i; echo warn $i >&2; sleep 0.7; done; exit 3",
    )
    .await;
    // A wait answers as soon as output comes, not at the end of the wait.
    let asked = Instant::now();
    let (status, first) = output(&runner, &id, pid, "waitMs=10000").await;
    assert_eq!(status, 200, "{first}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        first["stdout"]
            .as_str()
            .unwrap_or("")
            .starts_with("line 1\n"),
        "{first}"
    );
    let (last, out, err) = read_to_end(&runner, &id, pid, Duration::from_secs(30)).await;
    assert_eq!(out, "line 1\nline 2\nline 3\nline 4\n");
    assert_eq!(err, "warn 1\nwarn 2\nwarn 3\nwarn 4\n");
    assert_eq!(last["exitCode"], 3, "{last}");
    assert_eq!(last["stdoutDropped"], 0);
    // From an offset: the rest; past the end: nothing, at the end.
    let (_, tail) = output(&runner, &id, pid, "stdoutFrom=14&stderrFrom=100").await;
    assert_eq!(tail["stdout"], "line 3\nline 4\n", "{tail}");
    assert_eq!(tail["stdoutFrom"], 14);
    assert_eq!(tail["stdoutTo"], 28);
    assert_eq!(tail["stderr"], "");
    assert_eq!(tail["stderrFrom"], 28);
    let entry = ended(&runner, &id, pid).await;
    assert_eq!(entry["exitCode"], 3, "{entry}");
    assert!(
        entry["endedAt"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{entry}"
    );
}

#[tokio::test]
async fn followed_output_streams_as_it_comes_then_the_exit_code() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let pid = started(
        &runner,
        &id,
        "for i in 1 2 3; do echo tick $i; sleep 1; done; exit 4",
    )
    .await;
    let started_at = Instant::now();
    let mut resp = runner
        .client
        .get(format!(
            "{}/sessions/{id}/processes/{pid}/output?follow=true",
            runner.url
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let mut text = String::new();
    let mut first_at = None;
    while let Some(chunk) = resp.chunk().await.expect("a chunk") {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if first_at.is_none() && text.contains("tick 1") {
            first_at = Some(started_at.elapsed());
        }
    }
    let total = started_at.elapsed();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.last(), Some(&json!({"exitCode": 4})), "{text}");
    let data: String = lines
        .iter()
        .filter(|l| l["stream"] == "stdout")
        .map(|l| l["data"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(data, "tick 1\ntick 2\ntick 3\n", "{text}");
    let first_at = first_at.expect("the first line came");
    assert!(
        total - first_at > Duration::from_millis(1500),
        "live: {first_at:?} of {total:?}"
    );
    // From offsets: only what follows them, and at once for an ended process.
    let rest = runner
        .client
        .get(format!(
            "{}/sessions/{id}/processes/{pid}/output?follow=true&stdoutFrom=7",
            runner.url
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("a body");
    assert_eq!(
        rest,
        "{\"stream\":\"stdout\",\"data\":\"tick 2\\ntick 3\\n\"}\n{\"exitCode\":4}\n"
    );
}

#[tokio::test]
async fn stdin_is_fed_and_closed_and_an_ended_process_refuses_more() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let pid = started(&runner, &id, "cat; echo done reading").await;
    let (status, answer) = write_stdin(&runner, &id, pid, "", b"hello\n").await;
    assert_eq!(status, 204, "{answer}");
    let (_, echoed) = output(&runner, &id, pid, "waitMs=5000").await;
    assert_eq!(echoed["stdout"], "hello\n", "{echoed}");
    let (status, _) = write_stdin(&runner, &id, pid, "eof=true", b"bye\n").await;
    assert_eq!(status, 204);
    let entry = ended(&runner, &id, pid).await;
    assert_eq!(entry["exitCode"], 0, "{entry}");
    let (_, all) = output(&runner, &id, pid, "").await;
    assert_eq!(all["stdout"], "hello\nbye\ndone reading\n", "{all}");
    let (status, refused) = write_stdin(&runner, &id, pid, "", b"more").await;
    assert_eq!(
        (status, code(&refused)),
        (409, "process_ended"),
        "{refused}"
    );
    let (status, refused) = signal(&runner, &id, pid, "TERM").await;
    assert_eq!(
        (status, code(&refused)),
        (409, "process_ended"),
        "{refused}"
    );
}

#[tokio::test]
async fn each_signal_reaches_the_process_group_and_ends_it_with_128_plus_its_number() {
    // Started as `nohup` or a supervisor may start it, the runner inherits ignored
    // signals: no sandbox may (every program's dispositions start at their default).
    // SAFETY: process-wide dispositions of signals this test binary never relies on.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGUSR1, libc::SIG_IGN);
    }
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let signals = [
        ("INT", 2),
        ("TERM", 15),
        ("KILL", 9),
        ("HUP", 1),
        ("QUIT", 3),
        ("USR1", 10),
        ("USR2", 12),
    ];
    for (name, number) in signals {
        // `bash -c` runs a lone command in its own process.
        let pid = started(&runner, &id, "sleep 300").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (status, answer) = signal(&runner, &id, pid, name).await;
        assert_eq!(status, 204, "{name}: {answer}");
        let entry = ended(&runner, &id, pid).await;
        assert_eq!(entry["exitCode"], 128 + number, "{name}: {entry}");
    }
    // The signal goes to the process's group: a shell's child in the foreground gets it
    // too (bash waits for it, then ends by the same signal).
    let pid = started(&runner, &id, "sleep 300; echo after").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(signal(&runner, &id, pid, "TERM").await.0, 204);
    assert_eq!(ended(&runner, &id, pid).await["exitCode"], 143);
    let left = runner
        .ok_in(&id, "bash", "ps -eo args | grep -c '^sleep 300'")
        .await;
    assert_eq!(stdout(&left).trim(), "0", "{left}");
    // Every disposition starts at its default: a program may trap one and carry on.
    let pid = started(
        &runner,
        &id,
        "trap 'echo caught; exit 7' TERM; while :; do sleep 0.1; done",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(signal(&runner, &id, pid, "TERM").await.0, 204);
    assert_eq!(ended(&runner, &id, pid).await["exitCode"], 7);
    let (_, out) = output(&runner, &id, pid, "").await;
    assert_eq!(out["stdout"], "caught\n", "{out}");
    // No other name; no process that is not one.
    let pid = started(&runner, &id, "sleep 300").await;
    for bad in [
        json!({"signal": "STOP"}),
        json!({"signal": "term"}),
        json!({}),
        json!({"signal": 9}),
    ] {
        let (status, answer) = runner
            .request(
                "POST",
                &format!("/sessions/{id}/processes/{pid}/signal"),
                Some(&bad),
            )
            .await;
        assert_eq!(
            (status, code(&answer)),
            (400, "bad_request"),
            "{bad}: {answer}"
        );
    }
    let (status, answer) = signal(&runner, &id, 999_999, "TERM").await;
    assert_eq!(
        (status, code(&answer)),
        (404, "process_not_found"),
        "{answer}"
    );
}

#[tokio::test]
async fn only_the_newest_bytes_are_kept_and_the_dropped_ones_are_counted() {
    let runner = Runner::with(Options {
        env: vec![("RUNNER_PROCESS_OUTPUT_BYTES".into(), "1000".into())],
        ..Options::default()
    });
    let id = runner.open_session(json!({})).await;
    let pid = started(
        &runner,
        &id,
        "head -c 5000 /dev/zero | tr '\\0' x; printf END",
    )
    .await;
    ended(&runner, &id, pid).await;
    let (_, kept) = output(&runner, &id, pid, "").await;
    assert_eq!(kept["stdoutFrom"], 4003, "{kept}");
    assert_eq!(kept["stdoutTo"], 5003);
    assert_eq!(kept["stdoutDropped"], 4003);
    let text = kept["stdout"].as_str().expect("stdout");
    assert_eq!(text.len(), 1000);
    assert!(text.ends_with("xxEND"), "{text}");
    let (_, later) = output(&runner, &id, pid, "stdoutFrom=4500").await;
    assert_eq!(later["stdoutDropped"], 0, "{later}");
    assert_eq!(later["stdout"].as_str().map(str::len), Some(503));
}

#[tokio::test]
async fn a_timed_out_run_ends_its_own_processes_and_spares_the_sessions() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let pid = started(&runner, &id, "sleep 300").await;
    let body = json!({"lang": "bash", "code": "sleep 200 & sleep 100", "timeoutMs": 1000});
    let (status, timed) = runner
        .request("POST", &format!("/sessions/{id}/run"), Some(&body))
        .await;
    assert_eq!(status, 200, "{timed}");
    assert_eq!(timed["timedOut"], true, "{timed}");
    let after = runner
        .ok_in(&id, "bash", "ps -eo args | grep -c '^sleep'")
        .await;
    assert_eq!(
        stdout(&after).trim(),
        "1",
        "only the process's sleep is left: {after}"
    );
    let entry = list(&runner, &id).await;
    assert_eq!(entry[0]["pid"], pid);
    assert_eq!(entry[0]["running"], true, "{entry:?}");
}

#[tokio::test]
async fn bad_requests_are_refused_with_their_codes() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    for (body, want) in [
        (json!({"command": "pwd", "cwd": "/etc"}), (400, "bad_path")),
        (json!({"command": "pwd", "cwd": "../x"}), (400, "bad_path")),
        (
            json!({"command": "pwd", "cwd": "no/such/folder"}),
            (400, "bad_path"),
        ),
        (json!({"command": ""}), (400, "bad_request")),
        (json!({"cmd": "pwd"}), (400, "bad_request")),
        (
            json!({"command": "pwd", "env": {"A=B": "1"}}),
            (400, "bad_request"),
        ),
        (json!(["pwd"]), (400, "bad_request")),
    ] {
        let (status, answer) = start(&runner, &id, body.clone()).await;
        assert_eq!((status, code(&answer)), want, "{body}: {answer}");
    }
    let (status, answer) = start(&runner, "nosuchsession", json!({"command": "pwd"})).await;
    assert_eq!(
        (status, code(&answer)),
        (404, "session_not_found"),
        "{answer}"
    );
    for pid in ["12345", "abc", "-1"] {
        let (status, answer) = runner
            .request(
                "GET",
                &format!("/sessions/{id}/processes/{pid}/output"),
                None,
            )
            .await;
        assert_eq!(
            (status, code(&answer)),
            (404, "process_not_found"),
            "{pid}: {answer}"
        );
    }
    // A working folder and variables of the caller's, as asked.
    let made = runner.ok_in(&id, "bash", "mkdir -p work/dir").await;
    assert_eq!(made["exitCode"], 0);
    let (status, answer) = start(
        &runner,
        &id,
        json!({"command": "pwd; echo $GREETING; echo $HOME", "cwd": "work/dir", "env": {"GREETING": "hi"}}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let pid = answer["pid"].as_i64().expect("pid");
    ended(&runner, &id, pid).await;
    let (_, out) = output(&runner, &id, pid, "").await;
    assert_eq!(
        out["stdout"], "/home/sandbox/work/dir\nhi\n/home/sandbox\n",
        "{out}"
    );
    let (status, answer) = output(&runner, &id, pid, "waitMs=30001").await;
    assert_eq!((status, code(&answer)), (400, "bad_request"), "{answer}");
    let (status, answer) = output(&runner, &id, pid, "stdoutFrom=-4").await;
    assert_eq!((status, code(&answer)), (400, "bad_request"), "{answer}");
}

#[tokio::test]
async fn a_process_call_waits_for_a_run_in_flight_within_its_wait() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let pid = started(&runner, &id, "sleep 1; echo after the run").await;
    let run = {
        let (client, url, id) = (runner.client.clone(), runner.url.clone(), id.clone());
        tokio::spawn(async move {
            client
                .post(format!("{url}/sessions/{id}/run"))
                .bearer_auth(TOKEN)
                .json(&json!({"lang": "bash", "code": "sleep 4; echo ran"}))
                .send()
                .await
                .expect("the run answered")
                .json::<serde_json::Value>()
                .await
                .expect("JSON")
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Without a wait: refused once the 2 s a process call waits for a run are over.
    let (status, busy) = output(&runner, &id, pid, "").await;
    assert_eq!((status, code(&busy)), (409, "session_busy"), "{busy}");
    // With one long enough: answered once the run ends, with what came meanwhile.
    let (status, read) = output(&runner, &id, pid, "waitMs=15000").await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["stdout"], "after the run\n", "{read}");
    assert_eq!(run.await.expect("the run's task")["stdout"], "ran\n");
}

#[tokio::test]
async fn an_exit_code_comes_only_with_all_of_the_output() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    for i in 0..40 {
        let pid = started(&runner, &id, "printf abc; printf def >&2").await;
        let (status, answer) = output(&runner, &id, pid, "waitMs=5000").await;
        assert_eq!(status, 200, "{answer}");
        if answer["exitCode"] == 0 {
            assert_eq!(
                (answer["stdout"].as_str(), answer["stderr"].as_str()),
                (Some("abc"), Some("def")),
                "round {i}: {answer}"
            );
            assert_eq!(answer["running"], false);
        } else {
            assert_eq!(answer["running"], true, "round {i}: {answer}");
        }
    }
}

#[tokio::test]
async fn a_process_that_reads_nothing_fills_its_queue_and_holds_up_nothing_else() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let deaf = started(&runner, &id, "sleep 300").await;
    let chunk = vec![b'x'; 3 << 20];
    let (status, answer) = write_stdin(&runner, &id, deaf, "", &chunk).await;
    assert_eq!(status, 204, "{answer}");
    let (status, answer) = write_stdin(&runner, &id, deaf, "", &chunk).await;
    assert_eq!((status, code(&answer)), (409, "stdin_full"), "{answer}");
    // Over the cap: refused before the body is read, and the connection closed after the
    // answer (on a client of its own, so that the shared one does not reuse it).
    let over = reqwest::Client::new()
        .post(format!(
            "{}/sessions/{id}/processes/{deaf}/stdin",
            runner.url
        ))
        .bearer_auth(TOKEN)
        .body(vec![b'x'; 5 << 20])
        .send()
        .await;
    if let Ok(over) = over {
        let status = over.status().as_u16();
        let answer: serde_json::Value = over.json().await.unwrap_or_default();
        assert_eq!((status, code(&answer)), (413, "too_large"), "{answer}");
    }
    // The agent still serves everything else.
    let echo = started(&runner, &id, "cat").await;
    assert_eq!(
        write_stdin(&runner, &id, echo, "eof=true", b"still\n")
            .await
            .0,
        204
    );
    ended(&runner, &id, echo).await;
    let (_, out) = output(&runner, &id, echo, "").await;
    assert_eq!(out["stdout"], "still\n", "{out}");
    assert_eq!(
        runner.ok_in(&id, "bash", "echo ran").await["stdout"],
        "ran\n"
    );
}
