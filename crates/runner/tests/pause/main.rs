//! Sessions that outlive their sandbox, against the real runner and real sandboxes:
//! pause and wake, idle pauses, the paused TTL, restarts on the same data folder
//! (`main.rs`); snapshots, forks, export and import (`snapshots.rs`); hostile archives
//! (`archives.rs`, built byte by byte in `tar.rs`); a paused session's hosts at the
//! egress proxy across restarts (`egress.rs`).

#[path = "../common/mod.rs"]
mod common;

mod archives;
mod egress;
mod snapshots;
mod tar;

use common::{host_processes_with, Options, Runner, TOKEN};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// A runner on the data folder `data`, with `env` besides.
fn runner_on(data: &Path, env: &[(&str, &str)]) -> Runner {
    let mut all = vec![(
        "RUNNER_DATA_DIR".to_owned(),
        data.to_string_lossy().into_owned(),
    )];
    all.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    Runner::with(Options {
        pool_size: 1,
        env: all,
        ..Options::default()
    })
}

/// The cgroup folders process `pid` is in (v1: one per controller; v2: one).
fn cgroup_folders(pid: &str) -> Vec<std::path::PathBuf> {
    let listed = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    listed
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let controller = controllers.split(',').next().unwrap_or_default();
            let root = if controller.is_empty() {
                "/sys/fs/cgroup".to_owned()
            } else {
                format!("/sys/fs/cgroup/{controller}")
            };
            let folder = std::path::PathBuf::from(root).join(path.trim_start_matches('/'));
            (path.contains("sandbox") && folder.exists()).then_some(folder)
        })
        .collect()
}

/// Waits (15 s at most) until session `id` answers 404.
async fn until_gone(runner: &Runner, id: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, _) = runner
            .request("GET", &format!("/sessions/{id}"), None)
            .await;
        if status == 404 {
            return;
        }
        assert!(Instant::now() < deadline, "{what} never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens a session and runs `code` in it (it must succeed); its id.
async fn session_with(runner: &Runner, code: &str) -> String {
    let id = runner.open_session(json!({})).await;
    sh(runner, &id, code).await;
    id
}

/// A bash run in session `id` that must succeed; its stdout.
async fn sh(runner: &Runner, id: &str, code: &str) -> String {
    let answer = runner.ok_in(id, "bash", code).await;
    answer["stdout"].as_str().expect("stdout").to_owned()
}

/// `POST path` with no body; status and answer.
async fn post(runner: &Runner, path: &str) -> (u16, Value) {
    runner.request("POST", path, None).await
}

/// What the test tree holds, as `find` and `stat` see it (sizes, modes, link targets),
/// and the big file's digest.
const DESCRIBE: &str =
    "cd ~ && find . /tmp/kept -path ./outputs -prune -o -printf '%p %y %m %s %l\\n' | sort; \
                        sha256sum big.bin";

/// Makes the test tree: a 10 MiB file, modes, an empty folder, links (one to a file
/// outside the home folder, one dangling, one relative), and a file in /tmp.
const TREE: &str = "cd ~ && head -c 10485760 /dev/urandom > big.bin && \
                    mkdir -p empty private/inner && chmod 0700 private && chmod 0750 private/inner && \
                    echo secret > private/inner/key && chmod 0600 private/inner/key && \
                    echo run > tool.sh && chmod 0755 tool.sh && \
                    ln -s /etc/passwd to-etc && ln -s nowhere dangling && ln -s big.bin rel && \
                    mkdir -p /tmp/kept && echo t > /tmp/kept/t.txt";

#[tokio::test]
async fn a_paused_session_keeps_its_files_and_releases_its_sandbox() {
    let data = tempfile::tempdir().expect("data folder");
    let runner = runner_on(data.path(), &[]);
    let id = runner.open_session(json!({})).await;
    sh(&runner, &id, TREE).await;
    let marker = format!("sleep 3{}", std::process::id() % 100_000);
    sh(&runner, &id, &format!("nohup {marker} >/dev/null 2>&1 &")).await;
    let before = sh(&runner, &id, DESCRIBE).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while host_processes_with(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the background process runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let pid = host_processes_with(&marker)[0]
        .split(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let cgroups = cgroup_folders(&pid);
    assert!(!cgroups.is_empty(), "the session's sandbox has cgroups");

    let (status, paused) = post(&runner, &format!("/sessions/{id}/pause")).await;
    assert_eq!(status, 200, "{paused}");
    for folder in &cgroups {
        assert!(
            !folder.exists(),
            "the sandbox's cgroup {} is gone",
            folder.display()
        );
    }
    assert_eq!(paused["id"], id);
    assert_eq!(paused["state"], "paused");
    assert!(
        paused["pausedAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{paused}"
    );
    assert!(paused["bytes"].as_u64().unwrap() > 10 << 20, "{paused}");
    assert!(
        host_processes_with(&marker).is_empty(),
        "the sandbox's processes are gone"
    );
    let (status, info) = runner
        .request("GET", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(info["state"], "paused", "{info}");
    let (status, again) = post(&runner, &format!("/sessions/{id}/pause")).await;
    assert_eq!(
        (status, &again["bytes"]),
        (200, &paused["bytes"]),
        "pausing twice: {again}"
    );

    let (status, woken) = runner.run_in(&id, "bash", DESCRIBE).await;
    assert_eq!(status, 200, "{woken}");
    assert_eq!(woken["resumed"], true, "{woken}");
    assert_eq!(woken["stateLost"], true, "{woken}");
    assert_eq!(
        woken["stdout"], before,
        "the same files, modes, links and bytes"
    );
    let next = runner.ok_in(&id, "bash", "true").await;
    assert_eq!(
        next["resumed"], false,
        "only the first run after a wake says so"
    );
    let (_, info) = runner
        .request("GET", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(info["state"], "active", "{info}");
}

#[tokio::test]
async fn stored_files_are_the_runner_s_alone() {
    let data = tempfile::tempdir().expect("data folder");
    let runner = runner_on(data.path(), &[]);
    let id = runner.open_session(json!({})).await;
    sh(&runner, &id, "echo kept > kept.txt").await;
    let (status, _) = post(&runner, &format!("/sessions/{id}/pause")).await;
    assert_eq!(status, 200);
    let place = data.path().join("sessions").join(&id);
    for entry in std::fs::read_dir(&place).expect("the paused session's folder") {
        let meta = entry.expect("entry").metadata().expect("metadata");
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&place)
        .expect("folder")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    let (status, _) = runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(status, 204);
    assert!(!place.exists(), "DELETE removes a paused session's files");
    let (status, body) = post(&runner, &format!("/sessions/{id}/resume")).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "session_not_found");
}

#[tokio::test]
async fn an_idle_session_pauses_and_any_call_wakes_it() {
    let data = tempfile::tempdir().expect("data folder");
    let runner = runner_on(data.path(), &[]);
    let id = runner.open_session(json!({"idleTimeoutMs": 500})).await;
    sh(&runner, &id, "echo idle > note.txt").await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, info) = runner
            .request("GET", &format!("/sessions/{id}"), None)
            .await;
        if info["state"] == "paused" {
            break;
        }
        assert!(Instant::now() < deadline, "never paused: {info}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A file operation wakes it as a run would.
    let response = runner
        .client
        .get(format!("{}/sessions/{id}/files/note.txt", runner.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.text().await.expect("a body"), "idle\n");
    let (_, info) = runner
        .request("GET", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(info["state"], "active", "{info}");
    let first = runner.ok_in(&id, "bash", "cat note.txt").await;
    assert_eq!(
        first["resumed"], true,
        "the first run after the wake says so: {first}"
    );
}

#[tokio::test]
async fn with_on_idle_end_an_idle_session_ends() {
    let data = tempfile::tempdir().expect("data folder");
    let runner = runner_on(data.path(), &[("RUNNER_SESSION_ON_IDLE", "end")]);
    let id = runner.open_session(json!({"idleTimeoutMs": 300})).await;
    until_gone(&runner, &id, "the idle session").await;
}

#[tokio::test]
async fn a_paused_session_ends_at_the_paused_ttl() {
    let data = tempfile::tempdir().expect("data folder");
    let runner = runner_on(data.path(), &[("RUNNER_PAUSED_TTL_MS", "1000")]);
    let id = runner.open_session(json!({})).await;
    let (status, _) = post(&runner, &format!("/sessions/{id}/pause")).await;
    assert_eq!(status, 200);
    until_gone(&runner, &id, "the paused session").await;
    let left = std::fs::read_dir(data.path().join("sessions"))
        .expect("sessions")
        .count();
    assert_eq!(left, 0, "its files are removed");
}

#[tokio::test]
async fn sessions_outlive_a_restart_on_the_same_data_folder() {
    let data = tempfile::tempdir().expect("data folder");
    let first = runner_on(data.path(), &[]);
    let idle = first.open_session(json!({})).await;
    sh(&first, &idle, "echo survived > s.txt").await;
    let paused = first.open_session(json!({})).await;
    sh(&first, &paused, "echo paused > p.txt").await;
    assert_eq!(
        post(&first, &format!("/sessions/{paused}/pause")).await.0,
        200
    );
    assert!(first.stop().success(), "a clean stop");

    let second = runner_on(data.path(), &[]);
    for (id, file, text) in [
        (&idle, "s.txt", "survived\n"),
        (&paused, "p.txt", "paused\n"),
    ] {
        let (status, info) = second
            .request("GET", &format!("/sessions/{id}"), None)
            .await;
        assert_eq!(status, 200, "{info}");
        assert_eq!(info["state"], "paused");
        let answer = second.ok_in(id, "bash", &format!("cat {file}")).await;
        assert_eq!(answer["stdout"], text);
        assert_eq!(answer["resumed"], true);
    }
}

#[tokio::test]
async fn after_a_sigkill_only_the_active_sessions_are_lost() {
    let data = tempfile::tempdir().expect("data folder");
    let first = runner_on(data.path(), &[]);
    let active = first.open_session(json!({})).await;
    let paused = first.open_session(json!({})).await;
    sh(&first, &paused, "echo kept > k.txt").await;
    assert_eq!(
        post(&first, &format!("/sessions/{paused}/pause")).await.0,
        200
    );
    first.kill();

    let second = runner_on(data.path(), &[]);
    let (status, _) = second
        .request("GET", &format!("/sessions/{active}"), None)
        .await;
    assert_eq!(status, 404, "the active session died with its runner");
    let answer = second.ok_in(&paused, "bash", "cat k.txt").await;
    assert_eq!(answer["stdout"], "kept\n");
}

#[tokio::test]
async fn two_runners_never_share_a_data_folder() {
    let data = tempfile::tempdir().expect("data folder");
    let _first = runner_on(data.path(), &[]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox-runner"))
        .args(["serve", "--listen", "127.0.0.1:0", "--pool-size", "1"])
        .env("SANDBOX_RUNNER_TOKEN", TOKEN)
        .env("RUNNER_DATA_DIR", data.path())
        .output()
        .expect("the second runner ran");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("another runner uses the data folder"),
        "{said}"
    );
}

#[tokio::test]
async fn a_pause_beyond_the_storage_bound_is_refused_and_the_session_goes_on() {
    let data = tempfile::tempdir().expect("data folder");
    let runner = runner_on(data.path(), &[("RUNNER_MAX_STORED_BYTES", "1048576")]);
    let id = runner.open_session(json!({})).await;
    sh(
        &runner,
        &id,
        "head -c 2000000 /dev/urandom > big && sha256sum big > sum",
    )
    .await;
    for path in ["pause", "snapshots", "fork"] {
        let (status, body) = post(&runner, &format!("/sessions/{id}/{path}")).await;
        assert_eq!(status, 507, "{path}: {body}");
        assert_eq!(body["error"]["code"], "storage_full", "{body}");
    }
    let answer = runner.ok_in(&id, "bash", "sha256sum -c sum").await;
    assert_eq!(answer["resumed"], false, "the session went on: {answer}");
    for sub in ["sessions", "snapshots", "incoming"] {
        let left = std::fs::read_dir(data.path().join(sub)).expect(sub).count();
        assert_eq!(left, 0, "nothing was kept in {sub}");
    }
}
