//! Inline dependencies under attack, on the host side: a package index served by each
//! test itself (tests/common/index.rs) sends what a mirror, a private index or a
//! find-links page may send, and the real runner must never run a package's code nor
//! fetch a URL a package's metadata names, never write more than its limit, leave
//! nothing behind however a resolution ends, and spend nothing on what it refused.

mod common;

use common::index::{TestIndex, STALLED};
use common::{instance_cgroups, Options, Runner};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The resolver's host user: the default `RUNNER_ID_BASE` + 3.
const RESOLVER_UID: u32 = 1_000_003;
/// What pip's environment may hold besides `PIP_*`: its folders, and how it reaches
/// the index (proxies, certificate authorities).
const ALLOWED_ENV: &[&str] = &[
    "HOME",
    "TMPDIR",
    "PATH",
    "LANG",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
];
/// The runners' state folder (their default).
const STATE_DIR: &str = "/run/sandbox-runner";

/// A runner whose pip asks `index` only, with a store and a temporary folder of the
/// test's own, and these variables besides.
struct Setup {
    runner: Runner,
    index: TestIndex,
    store: PathBuf,
    tmpdir: PathBuf,
    _dir: tempfile::TempDir,
}

async fn setup(specs: Value, env: &[(&str, &str)]) -> Setup {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let files = dir.path().join("index");
    let store = dir.path().join("store");
    let tmpdir = dir.path().join("tmp");
    std::fs::create_dir_all(&files).expect("the index's folder");
    std::fs::create_dir_all(&tmpdir).expect("TMPDIR");
    let specs = substitute(specs, dir.path());
    let index = TestIndex::start(&files, &specs).await;
    let mut vars = index.pip_env();
    vars.push(("RUNNER_PACKAGES_DIR".into(), store.display().to_string()));
    vars.push(("TMPDIR".into(), tmpdir.display().to_string()));
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let runner = Runner::with(Options {
        pool_size: 1,
        extra: Vec::new(),
        env: vars,
        ..Options::default()
    });
    Setup {
        runner,
        index,
        store,
        tmpdir,
        _dir: dir,
    }
}

/// `@DIR@` in the specs' strings is the test's temporary folder.
fn substitute(specs: Value, dir: &Path) -> Value {
    let text = specs
        .to_string()
        .replace("@DIR@", &dir.display().to_string());
    serde_json::from_str(&text).expect("specs")
}

/// A Python program declaring `deps`.
fn script(deps: &[&str]) -> String {
    let list: Vec<String> = deps.iter().map(|d| format!("{d:?}")).collect();
    format!(
        "# /// script\n# dependencies = [{}]\n# ///\nprint('ran')\n",
        list.join(", ")
    )
}

async fn post_python(runner: &Runner, code: &str) -> (u16, Value) {
    runner.post(&json!({"lang": "python", "code": code})).await
}

/// Posts, in a task of its own, a program that depends on the project whose index page
/// never comes in time; the answer, if any.
fn post_stalled(runner: &Runner) -> tokio::task::JoinHandle<reqwest::Result<(u16, Value)>> {
    let url = format!("{}/run", runner.url);
    let client = runner.client.clone();
    tokio::spawn(async move {
        let resp = client
            .post(url)
            .bearer_auth(common::TOKEN)
            .json(&json!({"lang": "python", "code": script(&[STALLED])}))
            .send()
            .await?;
        let status = resp.status().as_u16();
        Ok((status, resp.json::<Value>().await?))
    })
}

fn assert_refused(answer: &(u16, Value), status: u16, code: &str, names: &[&str]) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    for name in names {
        assert!(message.contains(name), "the message names {name}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_in_package_metadata_are_never_fetched_and_no_package_code_runs() {
    let marker = |n: u32| format!("@DIR@/ran-{n}");
    let s = setup(
        json!([
            {"wheel": "plain", "version": "1.0"},
            {"wheel": "evil_url", "version": "1.0", "requires": [
                "payload @ INDEX/files/only-in-metadata/payload-1.0.tar.gz"]},
            {"wheel": "evil_vcs", "version": "1.0", "requires": [
                "payload @ git+INDEX/files/only-in-metadata/payload.git"]},
            {"wheel": "evil_file", "version": "1.0", "requires": [
                "payload @ file://@DIR@/local/payload/payload-1.0.tar.gz"]},
            {"sdist": "payload", "version": "1.0", "marker": marker(1)},
        ]),
        &[],
    )
    .await;
    // The metadata's URLs point at the index itself (the review's index saw the path),
    // and the local archive's backend writes its own marker.
    let index_url = s.index.base.clone();
    rewrite_wheels(&s.index.files, "INDEX", &index_url);
    let local = s._dir.path().join("local");
    std::fs::create_dir_all(&local).expect("a folder for the local archive");
    copy_dir(&s.index.files.join("payload"), &local.join("payload"));
    std::fs::rename(
        s.index.files.join("payload"),
        s.index.files.join("only-in-metadata"),
    )
    .expect("the archive under the path only the metadata names");

    // The index works: a plain wheel installs and imports.
    let (status, body) = post_python(
        &s.runner,
        &format!("{}import plain\nprint(plain.VERSION)", script(&["plain"])),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["stdout"], "ran\n1.0\n", "{body}");

    for (package, form) in [
        ("evil-url", "URL"),
        ("evil-vcs", "URL"),
        ("evil-file", "URL"),
    ] {
        let answer = post_python(&s.runner, &script(&[package])).await;
        assert_refused(
            &answer,
            422,
            "dependency_denied",
            &[package, "payload", form],
        );
    }
    let fetched = s.index.asked_for("only-in-metadata");
    assert!(
        fetched.is_empty(),
        "the host fetched what only metadata named: {fetched:?}"
    );
    let ran = s._dir.path().join("ran-1");
    assert!(
        !ran.exists(),
        "a package's build backend ran on the host: {}",
        std::fs::read_to_string(&ran).unwrap_or_default()
    );
}

/// Puts `to` for `from` in the metadata of every wheel under `files` (the index's URL
/// is known only once it listens).
fn rewrite_wheels(files: &Path, from: &str, to: &str) {
    let script = format!(
        "import sys, zipfile, glob, os\n\
         for path in glob.glob(sys.argv[1] + '/*/*.whl'):\n\
         \x20   with zipfile.ZipFile(path) as z:\n\
         \x20       items = [(i, z.read(i.filename)) for i in z.infolist()]\n\
         \x20   with zipfile.ZipFile(path + '.new', 'w', zipfile.ZIP_DEFLATED) as z:\n\
         \x20       for info, data in items:\n\
         \x20           if info.filename.endswith('/METADATA'):\n\
         \x20               data = data.replace({from:?}.encode(), {to:?}.encode())\n\
         \x20           z.writestr(info, data)\n\
         \x20   os.replace(path + '.new', path)\n"
    );
    let status = std::process::Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .arg(files)
        .status()
        .expect("python3");
    assert!(status.success());
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("a copy's folder");
    for entry in std::fs::read_dir(from)
        .expect("the folder to copy")
        .flatten()
    {
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("a file copied");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resolver_runs_confined_and_a_timeout_leaves_nothing() {
    let s = setup(json!([]), &[("RUNNER_DEPS_TIMEOUT_MS", "8000")]).await;
    let pid = s.runner.pid();
    let request = post_stalled(&s.runner);
    let pips = wait_for_resolver(pid, Duration::from_secs(20)).await;
    for pip in &pips {
        let status = std::fs::read_to_string(format!("/proc/{pip}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default()
        };
        let uid = RESOLVER_UID.to_string();
        assert_eq!(
            field("Uid:"),
            [uid.as_str(); 4].join(" "),
            "pip's user: {status}"
        );
        assert_eq!(
            field("Gid:"),
            [uid.as_str(); 4].join(" "),
            "pip's group: {status}"
        );
        assert_eq!(field("Groups:"), "", "pip has no supplementary group");
        assert_eq!(field("NoNewPrivs:"), "1");
        assert_eq!(field("CapEff:"), "0000000000000000");
        let environ = std::fs::read(format!("/proc/{pip}/environ")).unwrap_or_default();
        let environ = String::from_utf8_lossy(&environ);
        assert!(
            !environ.contains(common::TOKEN),
            "pip's environment holds the runner's token"
        );
        let names: Vec<&str> = environ
            .split('\0')
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
            .collect();
        for name in &names {
            assert!(
                name.starts_with("PIP_") || ALLOWED_ENV.contains(name),
                "pip's environment has {name}: {names:?}"
            );
        }
        let cwd = std::fs::read_link(format!("/proc/{pip}/cwd")).unwrap_or_default();
        assert!(
            cwd.starts_with(format!("{STATE_DIR}/deps/r{pid}/resolve")),
            "pip works in its scratch: {}",
            cwd.display()
        );
    }
    // Its cgroup is limited like a sandbox's.
    let v2 = !Path::new("/sys/fs/cgroup/memory").exists();
    let (memory, cpu, pids) = if v2 {
        ("memory.max", "cpu.max", "pids.max")
    } else {
        (
            "memory/memory.limit_in_bytes",
            "cpu/cpu.cfs_quota_us",
            "pids/pids.max",
        )
    };
    let memory: u64 = cgroup_value(pid, memory).parse().unwrap_or(u64::MAX);
    assert!(
        memory < 2 << 30,
        "the resolver's memory is limited: {memory}"
    );
    let cpu = cgroup_value(pid, cpu);
    assert!(
        !cpu.starts_with("-1") && !cpu.starts_with("max"),
        "the resolver's CPU is limited: {cpu}"
    );
    let pids = cgroup_value(pid, pids);
    assert!(
        pids.parse::<u64>().is_ok(),
        "the resolver's processes are limited: {pids}"
    );

    let answer = request
        .await
        .expect("the request's task")
        .expect("an answer");
    assert_refused(&answer, 422, "dependency_timeout", &[STALLED]);
    assert_nothing_left(&s, pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_goes_away_leaves_nothing() {
    let s = setup(json!([]), &[]).await;
    let pid = s.runner.pid();
    let request = post_stalled(&s.runner);
    wait_for_resolver(pid, Duration::from_secs(20)).await;
    wait_for_stall(&s.index).await;
    request.abort();
    assert_nothing_left(&s, pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_stops_leaves_nothing() {
    let mut s = setup(json!([]), &[("RUNNER_SHUTDOWN_GRACE_MS", "1000")]).await;
    let pid = s.runner.pid();
    let request = post_stalled(&s.runner);
    wait_for_resolver(pid, Duration::from_secs(20)).await;
    wait_for_stall(&s.index).await;
    s.runner.terminate();
    let exited = s.runner.exited_within(Duration::from_secs(30)).await;
    assert!(
        exited.is_some_and(|e| e.success()),
        "the runner stopped cleanly: {exited:?}"
    );
    if let Ok(Ok((status, body))) = request.await {
        assert_eq!(
            status, 503,
            "a resolution ended by the runner's stop: {body}"
        );
    }
    assert_nothing_left(&s, pid).await;
    let instance = Path::new(STATE_DIR).join("deps").join(format!("r{pid}"));
    assert!(!instance.exists(), "{} is left", instance.display());
    assert_eq!(
        instance_cgroups(pid),
        Vec::<PathBuf>::new(),
        "the runner's cgroups are left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wheel_bomb_never_takes_more_than_the_limit() {
    const BOMB: u64 = 96 << 20;
    const LIMIT_MB: u64 = 16;
    let s = setup(
        json!([{"wheel": "bomb", "version": "1.0", "zeros": BOMB}]),
        &[("RUNNER_DEPS_MAX_MB", "16")],
    )
    .await;
    let wheel = s.index.files.join("bomb/bomb-1.0-py3-none-any.whl");
    let wheel_bytes = std::fs::metadata(&wheel).expect("the bomb").len();
    assert!(wheel_bytes < 1 << 20, "a bomb: {wheel_bytes} bytes");

    let watched = [s.store.clone(), s.tmpdir.clone()];
    let pid = s.runner.pid();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let watcher = std::thread::spawn(move || {
        let mut peak = 0;
        while stop_rx.try_recv().is_err() {
            let used = watched.iter().map(|d| du(d)).sum::<u64>() + scratch_bytes(pid);
            peak = peak.max(used);
            std::thread::sleep(Duration::from_millis(2));
        }
        peak
    });
    let answer = post_python(&s.runner, &script(&["bomb"])).await;
    let _ = stop_tx.send(());
    let peak = watcher.join().expect("the watcher");
    assert_refused(&answer, 422, "dependency_too_large", &["bomb"]);
    let bound = (LIMIT_MB << 20) + sandbox_packages::SCRATCH_MARGIN + (1 << 20);
    eprintln!("peak {} MiB, bound {} MiB", peak >> 20, bound >> 20);
    assert!(
        peak <= bound,
        "the resolution took {} MiB at its peak, above the limit and the margin ({} MiB)",
        peak >> 20,
        bound >> 20
    );
    assert_nothing_left(&s, pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_names_and_repeated_refusals_cost_nothing() {
    let s = setup(json!([]), &[]).await;
    let many: Vec<String> = (0..60_000).map(|i| format!("pkg{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let started = Instant::now();
    let answer = post_python(&s.runner, &script(&many)).await;
    let took = started.elapsed();
    assert_refused(&answer, 422, "too_many_dependencies", &["60000", "64"]);
    assert!(
        took < Duration::from_secs(5),
        "refused at once, not after {took:?}"
    );
    let over: Vec<String> = (0..65).map(|i| format!("pkg{i}")).collect();
    let over: Vec<&str> = over.iter().map(String::as_str).collect();
    assert_refused(
        &post_python(&s.runner, &script(&over)).await,
        422,
        "too_many_dependencies",
        &["65"],
    );
    assert_eq!(
        s.index.requests(),
        Vec::<String>::new(),
        "nothing was asked of the index"
    );

    // A refusal that took pip is remembered: asking again costs no process and no
    // request.
    let answer = post_python(&s.runner, &script(&["no-such-package"])).await;
    assert_refused(&answer, 422, "dependency_not_found", &["no-such-package"]);
    let asked = s.index.requests().len();
    assert!(asked > 0, "the first refusal asked the index");
    for _ in 0..5 {
        let started = Instant::now();
        let again = post_python(&s.runner, &script(&["no-such-package"])).await;
        assert_refused(&again, 422, "dependency_not_found", &["no-such-package"]);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        s.index.requests().len(),
        asked,
        "the repeats asked the index again"
    );
}

/// Waits until pip runs for the runner `runner` (a child of it, past its exec: a child
/// not yet there is still on its way to the resolver's user); its pids.
async fn wait_for_resolver(runner: u32, within: Duration) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let pids: Vec<u32> = common::children_with(runner, "pip")
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.starts_with(b"/usr/bin/python3"))
            })
            .collect();
        if !pids.is_empty() {
            return pids;
        }
        assert!(Instant::now() < deadline, "no pip within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until pip has asked the index for the stalled project (its temporary files
/// made, a resolution in flight).
async fn wait_for_stall(index: &TestIndex) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while index.asked_for(&format!("/simple/{STALLED}/")).is_empty() {
        assert!(Instant::now() < deadline, "pip never asked for {STALLED}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Host processes in a resolver cgroup of the runner `runner`.
fn resolver_processes(runner: u32) -> Vec<u32> {
    let needle = format!("/sandbox-runner/r{runner}/deps");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|c| c.contains(&needle))
        })
        .collect()
}

/// A file of the runner's resolver cgroup (the first `deps*` folder), as
/// `<controller>/<file>` on v1 or `<file>` on v2.
fn cgroup_value(runner: u32, file: &str) -> String {
    let (controller, file) = file.split_once('/').unwrap_or(("", file));
    let instance = Path::new("/sys/fs/cgroup")
        .join(controller)
        .join("sandbox-runner")
        .join(format!("r{runner}"));
    let dir = std::fs::read_dir(&instance)
        .expect("the runner's cgroups")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("deps"))
        .expect("a resolver cgroup")
        .path();
    std::fs::read_to_string(dir.join(file))
        .expect("a cgroup file")
        .trim()
        .to_owned()
}

/// Bytes in use in the tmpfs scratches mounted below the runner's `resolve` folder.
fn scratch_bytes(runner: u32) -> u64 {
    let prefix = format!("{STATE_DIR}/deps/r{runner}/resolve/");
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|point| point.starts_with(&prefix))
        .filter_map(|point| nix::sys::statvfs::statvfs(point).ok())
        .map(|s| (s.blocks() - s.blocks_free()) * s.fragment_size())
        .sum()
}

/// The bytes a tree takes on disk (allocated blocks), 0 when it is gone.
fn du(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        total += meta.blocks() * 512;
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    total
}

/// Nothing of a resolution is left on the host within a few seconds: no process in a
/// resolver cgroup, no resolver cgroup, no scratch mounted, nothing in the runner's
/// TMPDIR, no work tree in the store.
async fn assert_nothing_left(s: &Setup, runner: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = leftovers(s, runner);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left on the host: {left:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn leftovers(s: &Setup, runner: u32) -> Vec<String> {
    let mut left: Vec<String> = resolver_processes(runner)
        .iter()
        .map(|p| format!("process {p}"))
        .collect();
    for dir in instance_cgroups(runner) {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with("deps") {
                left.push(format!("cgroup {}", entry.path().display()));
            }
        }
    }
    let prefix = format!("{STATE_DIR}/deps/r{runner}/resolve/");
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    left.extend(
        table
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|point| point.starts_with(&prefix))
            .map(|point| format!("mount {point}")),
    );
    for dir in [s.tmpdir.clone(), s.store.join("tmp")] {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            left.push(format!("file {}", entry.path().display()));
        }
    }
    left
}
