//! The Firecracker VMM, jailed with snapshots and unjailed from a cold boot (skipped,
//! saying why, where there is no firecracker or no KVM).

use super::*;

/// Why the Firecracker tests cannot run here, if they cannot: they need `firecracker`
/// and `jailer` on PATH and a /dev/kvm that opens (Firecracker has no emulator).
fn firecracker_missing() -> Option<String> {
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
    };
    for name in ["firecracker", "jailer"] {
        if !on_path(name) {
            return Some(format!(
                "no `{name}` on PATH (install firecracker and jailer from Firecracker's \
                 releases on a KVM host: docs/operations.md)"
            ));
        }
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return Some(format!("/dev/kvm does not open: {e}"));
    }
    None
}

fn firecracker_runner(pool_size: usize, state: &Path, extra: &[&str]) -> Runner {
    let mut args: Vec<String> = ["--backend", "vm", "--vmm", "firecracker", "--accel", "kvm"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
    args.push("--vm-image".into());
    args.push(image().display().to_string());
    args.push("--state-dir".into());
    args.push(state.display().to_string());
    Runner::with(Options {
        pool_size,
        extra: args,
        env: Vec::new(),
        ..Options::default()
    })
}

/// Firecracker processes of the runner with this state folder.
fn firecracker_processes(pid: u32) -> Vec<String> {
    host_processes_with(&format!("r{pid}-vm"))
}

/// Through the jailer, with the pool refilled from a snapshot: every language, the
/// limits, no network, fresh randomness in every restored VM, and nothing left after.
#[tokio::test]
async fn firecracker_jailed_with_snapshots() {
    if let Some(reason) = firecracker_missing() {
        println!("SKIPPED firecracker_jailed_with_snapshots: {reason}");
        return;
    }
    let _serial = SERIAL.lock().await;
    let state = state_dir("firecracker");
    let runner = firecracker_runner(2, &state, &[]);
    for (lang, code) in [
        ("bash", "echo 1"),
        ("python", "print(1)"),
        ("node", "console.log(1)"),
    ] {
        let out = runner.run(lang, code).await;
        assert_eq!(stdout(&out), "1\n", "{lang}: {out}");
        assert_eq!(exit_code(&out), 0, "{out}");
    }
    let net = runner
        .run(
            "bash",
            "ls /sys/class/net; echo > /dev/tcp/1.1.1.1/80 || echo no-route",
        )
        .await;
    assert!(stdout(&net).starts_with("lo\n"), "{net}");
    assert!(stdout(&net).contains("no-route"), "{net}");
    let slow = runner
        .run_with_timeout("bash", "sleep 30", Some(1000))
        .await;
    assert_eq!(slow["timedOut"], true, "{slow}");
    let big = runner
        .run(
            "python",
            "b = bytearray(400 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1",
        )
        .await;
    assert_eq!(big["oomKilled"], true, "{big}");
    // Restored siblings must not share the kernel's random state.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..3 {
        let out = runner
            .run(
                "bash",
                "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'",
            )
            .await;
        assert!(seen.insert(stdout(&out).to_owned()), "repeated: {out}");
    }
    // A restored guest's clock is set from the host's, not left at the snapshot's time.
    let clock = runner.run("bash", "date +%s").await;
    let guest: i64 = stdout(&clock).trim().parse().expect("a number of seconds");
    let host = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((guest - host).abs() < 30, "guest {guest} vs host {host}");
    let pid = runner.pid();
    let status = runner.stop();
    assert!(status.success(), "{status}");
    assert_nothing_left(pid, &state, firecracker_processes(pid));
}

/// Booted cold every time, without the jailer (the operator's opt-out).
#[tokio::test]
async fn firecracker_unjailed_cold_boot() {
    if let Some(reason) = firecracker_missing() {
        println!("SKIPPED firecracker_unjailed_cold_boot: {reason}");
        return;
    }
    let _serial = SERIAL.lock().await;
    let state = state_dir("firecracker-cold");
    let runner = firecracker_runner(
        1,
        &state,
        &["--firecracker-without-jailer", "--vm-snapshots", "false"],
    );
    let out = runner.run("python", "print(1)").await;
    assert_eq!(stdout(&out), "1\n", "{out}");
    let status = runner.stop();
    assert!(status.success(), "{status}");
    assert!(state_files(&state).is_empty(), "{:?}", state_files(&state));
}
