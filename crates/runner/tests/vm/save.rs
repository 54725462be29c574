//! A session's VM saved whole and restored: its Python variables and a background
//! process live on, and every restore gets its own entropy and the host's time.
//!
//! Below the session layer: the backend itself (the real QEMU under TCG, the real image
//! and guest), built from the runner's own flags, saving into a folder and restoring
//! from it twice. Above it, the same through the API (pause, then run), which needs the
//! session layer to save VM sessions whole.

use super::*;
use clap::Parser;
use sandbox_protocol::agent::Job;
use sandbox_protocol::Lang;
use sandbox_runner::backend::{Backend, Sandbox};
use sandbox_runner::config::{BackendConfig, SandboxArgs};

/// The runner's sandbox flags, as `serve` reads them.
#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// A vm backend as the tests' runners have (TCG, no warm imports) on the state folder
/// of `test`: the folder, the backend, and its configuration.
fn vm_backend(test: &str) -> (PathBuf, Backend, sandbox_runner::config::SandboxConfig) {
    let image = image().display().to_string();
    let state_dir = state_dir(test);
    let state = state_dir.display().to_string();
    let flags = Flags::try_parse_from([
        "sandbox-runner",
        "--backend",
        "vm",
        "--vmm",
        "qemu",
        "--accel",
        "tcg",
        "--vm-image",
        &image,
        "--state-dir",
        &state,
        "--vm-boot-timeout-ms",
        "120000",
        "--warm-imports=",
    ])
    .expect("the flags parse");
    let config = flags.sandbox.validate().expect("a valid configuration");
    assert!(matches!(config.backend, BackendConfig::Vm(_)));
    let backend = sandbox_runner::server::make_backend(&config, 2, None).expect("the vm backend");
    (state_dir, backend, config)
}

/// A session's job of `lang` (bounded generously: under TCG a start-up takes seconds).
fn session_job(config: &sandbox_runner::config::SandboxConfig, lang: Lang, code: &str) -> Job {
    let language = config.languages.get(lang.as_str()).expect("offered");
    Job {
        lang,
        recipe: language.recipe.clone(),
        code: code.into(),
        timeout_ms: 60_000,
        stdout_cap: 64 * 1024,
        stderr_cap: 64 * 1024,
        session: true,
        sigstop_between_runs: false,
        outputs: None,
        python_paths: Vec::new(),
        stream: false,
        tools: None,
    }
}

/// Runs `code` in the session; its stdout (the run must succeed).
async fn run(
    sandbox: &mut Sandbox,
    config: &sandbox_runner::config::SandboxConfig,
    lang: Lang,
    code: &str,
) -> String {
    let job = session_job(config, lang, code);
    let outcome = tokio::time::timeout(REQUEST_BOUND, sandbox.run(job, None))
        .await
        .expect("an answer in time")
        .expect("the run");
    assert_eq!(outcome.job.exit_code, 0, "{code}: {:?}", outcome.job);
    outcome.job.stdout
}

/// A background process that appends a line to /tmp/ticks every 0.2 s; its pid.
const START_TICKER: &str = "(i=0; while :; do echo $i >> /tmp/ticks; i=$((i+1)); sleep 0.2; done) \
                            > /dev/null 2>&1 & echo $! > /tmp/ticker.pid; \
                            until [ -s /tmp/ticks ]; do sleep 0.05; done; cat /tmp/ticker.pid";
/// The ticker's pid, whether it is alive, and whether its file grows over a second.
const CHECK_TICKER: &str = "cat /tmp/ticker.pid; kill -0 $(cat /tmp/ticker.pid) && echo alive; \
                            a=$(wc -l < /tmp/ticks); sleep 1; b=$(wc -l < /tmp/ticks); \
                            [ $b -gt $a ] && echo growing";
/// Random bytes from the kernel, through Python and through the device.
const PY_RANDOM: &str = "import os, time\nprint(os.urandom(16).hex(), time.time())";
const DEV_RANDOM: &str = "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'";

/// A folder for a saved VM, as the session layer makes it: empty, mode 0700, removed
/// when dropped.
fn saved_folder() -> tempfile::TempDir {
    let saved = tempfile::tempdir().expect("a temporary folder");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o700);
    std::fs::set_permissions(saved.path(), mode).expect("mode 0700");
    saved
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// What one restored VM says: its Python variable, its ticker, its random bytes, and
/// how far its clock is from the host's.
async fn check_restored(
    sandbox: &mut Sandbox,
    config: &sandbox_runner::config::SandboxConfig,
    ticker: &str,
) -> (String, String, f64) {
    let out = run(sandbox, config, Lang::PYTHON, "print(x + 1)").await;
    assert_eq!(out, "42\n", "the variable lives on");
    let out = run(sandbox, config, Lang::BASH, CHECK_TICKER).await;
    assert_eq!(
        out,
        format!("{ticker}\nalive\ngrowing\n"),
        "the ticker lives on"
    );
    let out = run(sandbox, config, Lang::PYTHON, PY_RANDOM).await;
    let host = now();
    let (py_random, guest) = out.trim().split_once(' ').expect("bytes and a time");
    let skew = host - guest.parse::<f64>().expect("a time");
    let dev_random = run(sandbox, config, Lang::BASH, DEV_RANDOM).await;
    (py_random.to_owned(), dev_random, skew)
}

#[tokio::test]
async fn a_saved_vm_restores_twice_with_its_variables_and_processes_and_fresh_entropy() {
    let _serial = SERIAL.lock().await;
    let (state, backend, config) = vm_backend("save");
    let saved = saved_folder();

    let mut sandbox = backend
        .create(Some(Lang::PYTHON), false)
        .await
        .expect("a VM");
    run(&mut sandbox, &config, Lang::PYTHON, "x = 41").await;
    let ticker = run(&mut sandbox, &config, Lang::BASH, START_TICKER).await;
    let ticker = ticker.trim().to_owned();
    let started = Instant::now();
    let bytes = sandbox.save(saved.path()).await.expect("saved");
    let save_took = started.elapsed();
    let bytes = bytes.expect("a VM is saved whole");
    sandbox.destroy().await;
    let mut files: Vec<(String, u32)> = std::fs::read_dir(saved.path())
        .expect("the folder")
        .map(|e| {
            let e = e.expect("an entry");
            let mode = std::os::unix::fs::MetadataExt::mode(&e.metadata().expect("its mode"));
            (e.file_name().to_string_lossy().into_owned(), mode & 0o777)
        })
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            ("vm.json".to_owned(), 0o600),
            ("vm.state".to_owned(), 0o600)
        ]
    );

    let mut seen = Vec::new();
    for round in 1..=2 {
        let started = Instant::now();
        let mut restored = backend.restore(saved.path()).await.expect("restored");
        let restore_took = started.elapsed();
        let (py, dev, skew) = check_restored(&mut restored, &config, &ticker).await;
        restored.destroy().await;
        eprintln!(
            "save: {bytes} bytes in {save_took:?}; restore {round}: {restore_took:?}; \
             clock {skew:+.3} s from the host's"
        );
        assert!(
            skew.abs() < 2.0,
            "the restored guest's clock is {skew} s off"
        );
        seen.push((py, dev));
    }
    assert_ne!(seen[0].0, seen[1].0, "os.urandom differs between restores");
    assert_ne!(
        seen[0].1, seen[1].1,
        "/dev/urandom differs between restores"
    );
    backend.shutdown();
    assert!(qemu_processes(&state).is_empty(), "no QEMU left");
}

/// A restore refuses a folder that holds no saved VM of this machine, before it makes
/// any VM.
#[tokio::test]
async fn a_restore_refuses_a_folder_of_another_machine() {
    let _serial = SERIAL.lock().await;
    let (state, backend, _) = vm_backend("save-refused");
    let saved = saved_folder();
    let another = r#"{"vmm":"qemu","accel":"kvm","memoryMb":1,"image":[]}"#;
    for (description, refusal) in [
        (None, "vm.json"),
        (Some(another), "cannot be restored here"),
    ] {
        if let Some(text) = description {
            std::fs::write(saved.path().join("vm.json"), text).expect("written");
        }
        let restored = backend.restore(saved.path()).await;
        let err = restored.err().expect("refused");
        assert!(err.to_string().contains(refusal), "{err}");
    }
    backend.shutdown();
    assert!(state_files(&state).iter().all(|p| p.is_dir()), "no VM made");
}

/// Through the API: a paused VM session wakes with its variable and its background
/// process, and `stateLost` false.
#[tokio::test]
async fn a_paused_vm_session_wakes_with_its_variables_and_processes_and_its_forks_differ() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("pause-vm");
    let runner = vm_runner(1, &state);
    let id = runner.open_session(serde_json::json!({})).await;
    runner.ok_in(&id, "python", "x = 41").await;
    let out = runner.ok_in(&id, "bash", START_TICKER).await;
    let ticker = stdout(&out).trim().to_owned();
    let (status, paused) = runner
        .request("POST", &format!("/sessions/{id}/pause"), None)
        .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["state"], "paused", "{paused}");
    let out = runner.ok_in(&id, "python", "print(x + 1)").await;
    assert_eq!(stdout(&out), "42\n", "{out}");
    assert_eq!(out["resumed"], true, "{out}");
    assert_eq!(out["stateLost"], false, "{out}");
    let out = runner.ok_in(&id, "bash", CHECK_TICKER).await;
    assert_eq!(stdout(&out), format!("{ticker}\nalive\ngrowing\n"), "{out}");

    // Two forks: each wakes with the variable, and each draws its own random bytes.
    let (status, forked) = runner
        .request(
            "POST",
            &format!("/sessions/{id}/fork"),
            Some(&serde_json::json!({"count": 2})),
        )
        .await;
    assert_eq!(status, 201, "{forked}");
    let mut drawn = Vec::new();
    for fork in forked["sessions"].as_array().expect("sessions") {
        let fork = fork["id"].as_str().expect("an id");
        let code = "import os; print(x + 1, os.urandom(16).hex())";
        let out = runner.ok_in(fork, "python", code).await;
        assert_eq!(out["stateLost"], false, "{out}");
        let seen = stdout(&out).trim().to_owned();
        assert!(seen.starts_with("42 "), "{out}");
        drawn.push(seen);
    }
    assert_ne!(drawn[0], drawn[1], "two forks drew the same bytes");
    let out = runner.ok_in(&id, "python", "print(x)").await;
    assert_eq!(stdout(&out), "41\n", "the original went on: {out}");
}
