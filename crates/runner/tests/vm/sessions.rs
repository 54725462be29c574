//! A session in one VM: state across runs, and its guest sandbox frozen between calls.

use super::*;

#[tokio::test]
async fn a_session_lives_across_runs_in_one_vm() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("session");
    let runner = vm_runner(1, &state);
    let (status, info) = runner.request("POST", "/sessions", None).await;
    assert_eq!(status, 201, "{info}");
    let id = info["id"].as_str().unwrap().to_owned();
    let run = |code: &'static str| {
        let body = serde_json::json!({"lang": "bash", "code": code});
        let path = format!("/sessions/{id}/run");
        let runner = &runner;
        async move {
            let (status, out) = runner.request("POST", &path, Some(&body)).await;
            assert_eq!(status, 200, "{out}");
            out
        }
    };
    // The run waits for the background sleep to exec: a session freezes its processes
    // when the run answers, and a child frozen before its exec is still a bash.
    run("echo kept > ~/note; sleep 300 & until grep -qs 300 /proc/$!/cmdline; do sleep 0.02; done")
        .await;
    let out = run("cat ~/note; ps -eo comm | grep -c '^sleep$'").await;
    assert_eq!(stdout(&out), "kept\n1\n", "{out}");
    // Files through the guest's init and the jailed agent.
    let url = format!("{}/sessions/{id}/files/in/data.bin", runner.url);
    let put = runner
        .client
        .put(&url)
        .bearer_auth(common::TOKEN)
        .body(vec![0u8, 1, 2, 255])
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 204);
    let out = run("od -An -tu1 ~/in/data.bin | tr -s ' '").await;
    assert_eq!(stdout(&out), " 0 1 2 255\n", "{out}");
    let back = runner
        .client
        .get(format!("{}/sessions/{id}/files/note", runner.url))
        .bearer_auth(common::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(back.bytes().await.unwrap().as_ref(), b"kept\n");
    // The resident interpreter and the outputs, inside the guest's jail as on a host;
    // the background sleep, frozen between runs, sleeps again during one (state S).
    runner.ok_in(&id, "python", "x = 41").await;
    let out = runner
        .ok_in(
            &id,
            "python",
            "import subprocess\nopen('outputs/r.txt', 'w').write('r')\nprint(x + 1, \
             subprocess.run(['ps', '-o', 'stat=', '-C', 'sleep'], capture_output=True, \
             text=True).stdout.strip())",
        )
        .await;
    assert_eq!(stdout(&out), "42 S\n", "{out}");
    assert_eq!(out["stateLost"], false, "{out}");
    assert_eq!(out["outputs"][0]["path"], "r.txt", "{out}");
    let (status, _) = runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(status, 204);
    assert_eq!(runner.health().await["sessions"], 0);
}

/// Bash that prints the CPU time (clock ticks) of the busy pair [`BUSY_PAIR`] started.
const PAIR_CPU: &str = "awk '{s += $14 + $15} END {print s}' \
                        $(for p in $(cat /tmp/pair-started); do echo /proc/$p/stat; done)";

#[tokio::test]
async fn a_session_s_guest_sandbox_is_frozen_between_calls() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("session-frozen");
    let runner = vm_runner(1, &state);
    let health = runner.health().await;
    assert_eq!(health["limits"]["sessionsFrozen"], true, "{health}");
    let id = runner.open_session(serde_json::json!({})).await;
    // Bounded generously: under TCG a Python start-up takes seconds.
    let cpu = |code: String| {
        let body = serde_json::json!({"lang": "bash", "code": code, "timeoutMs": 120_000});
        let path = format!("/sessions/{id}/run");
        let runner = &runner;
        async move {
            let (status, out) = runner.request("POST", &path, Some(&body)).await;
            assert_eq!(status, 200, "{out}");
            let ticks: Vec<u64> = stdout(&out)
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            assert!(!ticks.is_empty(), "{out}");
            ticks
        }
    };
    // A busy pair that wakes itself with SIGCONT (which ends a SIGSTOP) from a POSIX
    // timer: the guest's init freezes the sandbox's cgroup between calls.
    let start = format!(
        "{}for i in $(seq 5000); do [ -s /tmp/pair-started ] && break; sleep 0.02; done\n\
         sleep 0.5; {PAIR_CPU}",
        start_in_background("pair", BUSY_PAIR, "pair-guest")
    );
    let started = cpu(start).await[0];
    // What a call costs the pair however long the rest (it runs between an answer and
    // the freeze, and between the thaw and the read: long under TCG): two calls in a
    // row. Then a rest of 5 s, which would give a running pair 250 ticks of its half CPU.
    let at_once = cpu(PAIR_CPU.into()).await[0];
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_rest = cpu(PAIR_CPU.into()).await[0];
    let during = cpu(format!("a=$({PAIR_CPU}); sleep 2; echo $a $({PAIR_CPU})")).await;
    let call = at_once.saturating_sub(started);
    let rest = after_rest.saturating_sub(at_once);
    eprintln!(
        "the pair's CPU ticks: {call} across a call with no rest, {rest} across a 5 s \
         rest, {during:?} over a 2 s call"
    );
    assert!(
        rest < call + 50,
        "the pair used {} ms of CPU while the session rested 5 s (a call alone: {} ms)",
        rest * 10,
        call * 10
    );
    assert!(
        during.len() == 2 && during[1] > during[0] + 20,
        "it runs during a call: {during:?}"
    );
    let (status, _) = runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(status, 204);
    let status = runner.stop();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn a_vm_sessions_processes_run_between_calls_and_answer_as_on_a_host() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("processes");
    let runner = vm_runner(1, &state);
    let id = runner.open_session(serde_json::json!({})).await;
    let start = |command: &'static str| {
        let body = serde_json::json!({ "command": command });
        let path = format!("/sessions/{id}/processes");
        let runner = &runner;
        async move {
            let (status, answer) = runner.request("POST", &path, Some(&body)).await;
            assert_eq!(status, 201, "{answer}");
            answer["pid"].as_i64().expect("a pid")
        }
    };
    // Ticks while no call is in flight: the guest's init leaves the sandbox thawed.
    let ticker = start("for i in 1 2 3; do echo tick $i; sleep 1; done; exit 5").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // A loaded TCG guest may need longer than the 3 s of ticks: looked at once a second
    // (a look takes milliseconds: a guest frozen between calls would never get through
    // its 3 s of ticks this way) for up to 30 s more.
    let output = format!("/sessions/{id}/processes/{ticker}/output");
    let mut looks = 0;
    let out = loop {
        let (status, out) = runner.request("GET", &output, None).await;
        assert_eq!(status, 200, "{out}");
        looks += 1;
        if !out["exitCode"].is_null() || looks > 30 {
            break out;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_eq!(out["stdout"], "tick 1\ntick 2\ntick 3\n", "{out}");
    assert_eq!(out["exitCode"], 5, "{out}");
    let sleeper = start("sleep 300").await;
    let seen = runner
        .ok_in(
            &id,
            "bash",
            &format!("tr '\\0' ' ' < /proc/{sleeper}/cmdline"),
        )
        .await;
    assert_eq!(stdout(&seen), "sleep 300 ", "{seen}");
    let body = serde_json::json!({"signal": "TERM"});
    let path = format!("/sessions/{id}/processes/{sleeper}/signal");
    assert_eq!(runner.request("POST", &path, Some(&body)).await.0, 204);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, listed) = runner
            .request("GET", &format!("/sessions/{id}/processes"), None)
            .await;
        if listed["processes"][1]["exitCode"] == 143 {
            break;
        }
        assert!(Instant::now() < deadline, "TERM did not end it: {listed}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
