//! Limits: memory, CPU, processes, time, output and disk, against real sandboxes.

mod common;

use common::{exit_code, host_processes_with, stderr, stdout, Runner};

#[tokio::test]
async fn memory_100_mb_works_and_400_mb_is_killed() {
    let runner = Runner::start();
    let ok = runner
        .run("python", "a = bytearray(100 * 1024 * 1024)\nprint(len(a))")
        .await;
    assert_eq!(stdout(&ok).trim(), "104857600", "{ok}");
    assert_eq!(ok["oomKilled"], false, "{ok}");
    let killed = runner
        .run(
            "python",
            "a = bytearray(400 * 1024 * 1024)\nprint('survived')",
        )
        .await;
    assert_eq!(killed["oomKilled"], true, "{killed}");
    assert_eq!(exit_code(&killed), 137, "{killed}");
    assert!(!stdout(&killed).contains("survived"), "{killed}");
}

#[tokio::test]
async fn a_busy_loop_gets_about_half_a_cpu() {
    if common::backend() == "vm" {
        // A guest cannot see its quota (no steal time under TCG): vm.rs measures the
        // VMM's CPU time from the host instead.
        eprintln!("SKIPPED a_busy_loop_gets_about_half_a_cpu on the vm backend: see vm.rs");
        return;
    }
    let runner = Runner::start();
    let code = "import time\n\
                start = time.monotonic()\n\
                while time.monotonic() - start < 3: pass\n\
                print(time.process_time() / (time.monotonic() - start))";
    let out = runner.run("python", code).await;
    let share: f64 = stdout(&out).trim().parse().expect("a ratio");
    assert!((0.3..=0.65).contains(&share), "CPU share {share}: {out}");
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_the_runner_stays_healthy() {
    let runner = Runner::start();
    let bomb = runner
        .run_with_timeout(
            "bash",
            "bomb() { bomb | bomb & }; bomb; sleep 2; echo done",
            Some(4000),
        )
        .await;
    assert!(
        stderr(&bomb).contains("Resource temporarily unavailable") || bomb["timedOut"] == true,
        "{bomb}"
    );
    let threads = runner
        .run_with_timeout(
            "python",
            "import threading, time\nn = 0\ntry:\n    for _ in range(1000):\n        threading.Thread(target=time.sleep, args=(5,), daemon=True).start(); n += 1\nexcept RuntimeError as e:\n    print('capped at', n)",
            Some(10_000),
        )
        .await;
    assert!(stdout(&threads).contains("capped at"), "{threads}");
    let health = runner.health().await;
    assert_eq!(health["status"], "ok", "{health}");
    let after = runner.run("bash", "echo still fine").await;
    assert_eq!(stdout(&after), "still fine\n");
}

#[tokio::test]
async fn the_timeout_ends_the_program_and_every_child() {
    let runner = Runner::start();
    let marker = format!("9{}.731", std::process::id());
    let code = format!(
        "sleep {marker} &\n\
         setsid sleep {marker} &\n\
         (sleep {marker} &) &\n\
         nohup bash -c 'trap \"\" TERM HUP; sleep {marker}' >/dev/null 2>&1 &\n\
         echo started\n\
         while true; do :; done"
    );
    let out = runner.run_with_timeout("bash", &code, Some(1500)).await;
    assert_eq!(out["timedOut"], true, "{out}");
    assert_eq!(exit_code(&out), 137, "{out}");
    assert_eq!(
        stdout(&out),
        "started\n",
        "output before the timeout is kept"
    );
    assert!(
        out["durationMs"].as_u64().expect("duration") >= 1500,
        "{out}"
    );
    assert!(
        host_processes_with(&marker).is_empty(),
        "{:?}",
        host_processes_with(&marker)
    );
}

#[tokio::test]
async fn background_children_end_with_the_program() {
    let runner = Runner::start();
    let marker = format!("8{}.419", std::process::id());
    let out = runner
        .run(
            "bash",
            &format!("setsid sleep {marker} & (sleep {marker} &); echo bye"),
        )
        .await;
    assert_eq!(stdout(&out), "bye\n");
    assert_eq!(exit_code(&out), 0);
    assert!(host_processes_with(&marker).is_empty());
}

#[tokio::test]
async fn an_output_flood_is_capped_and_stops_the_program() {
    let runner = Runner::start();
    let out = runner
        .run_with_timeout(
            "python",
            "import sys\nwhile True: sys.stdout.write('x' * 4096)",
            Some(60_000),
        )
        .await;
    assert_eq!(out["stdoutTruncated"], true, "{}", out["stderr"]);
    assert_eq!(out["timedOut"], false, "the cap, not the timeout, ended it");
    assert_eq!(stdout(&out).len(), 1 << 20);
    let err = runner
        .run_with_timeout("bash", "yes error >&2", Some(60_000))
        .await;
    assert_eq!(err["stderrTruncated"], true);
    assert_eq!(err["stdoutTruncated"], false);
    assert_eq!(stderr(&err).len(), 1 << 20);
}

#[tokio::test]
async fn filling_tmp_fails_cleanly() {
    let runner = Runner::start();
    let out = runner
        .run("bash", "dd if=/dev/zero of=/tmp/fill bs=1M count=500 2>&1 | head -1; echo rc=${PIPESTATUS[0]}; echo after > /tmp/small || echo cannot-write")
        .await;
    let text = stdout(&out);
    assert!(text.contains("No space left on device"), "{out}");
    assert!(text.contains("cannot-write"), "{out}");
    assert_eq!(exit_code(&out), 0, "{out}");
    assert_eq!(out["oomKilled"], false, "{out}");
}

#[tokio::test]
async fn exit_codes_and_signals_are_reported() {
    let runner = Runner::start();
    let failing = runner
        .run("python", "import sys\nprint('out')\nsys.exit(3)")
        .await;
    assert_eq!(exit_code(&failing), 3);
    assert_eq!(stdout(&failing), "out\n");
    let signalled = runner.run("bash", "kill -SEGV $$").await;
    assert_eq!(exit_code(&signalled), 128 + 11, "{signalled}");
    let thrown = runner.run("node", "throw new Error('boom')").await;
    assert_eq!(exit_code(&thrown), 1);
    assert!(stderr(&thrown).contains("Error: boom"), "{thrown}");
    let esm = runner
        .run(
            "node",
            "import os from 'node:os';\nawait Promise.resolve();\nconsole.log(os.hostname())",
        )
        .await;
    assert_eq!(stdout(&esm), "sandbox\n", "ES modules run too: {esm}");
    let traceback = runner.run("python", "1/0").await;
    assert!(
        stderr(&traceback).contains("File \"/home/sandbox/main.py\", line 1"),
        "{traceback}"
    );
}
