//! The vm backend against real QEMU (microvm, TCG here), the real guest kernel and the
//! real interpreters and toolchains: image build, languages, limits, isolation, cleanup.
//!
//! Each test boots its own VMs; they run one at a time (a TCG guest takes a CPU while
//! it boots), with pools of one or two.

#[path = "../common/mod.rs"]
mod common;
mod debian;
mod egress;
mod firecracker;
mod live;
mod packages;
mod pause;
mod save;
mod sessions;
mod tcg_cache;
mod tools;

use common::programs::{
    broken, forever, hello, hog, start_in_background, BUSY_PAIR, COMPILED, LANGUAGES,
};
use common::{exit_code, host_processes_with, instance_cgroups, stderr, stdout, Options, Runner};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// One VM test at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());
/// The image folder, built (or found in the cache) once per test binary.
static IMAGE: OnceLock<PathBuf> = OnceLock::new();

/// The cache of images, kept between runs in Cargo's temporary folder.
fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-images")
}

fn build_image() -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sandbox-runner"))
        .args(["image", "build", "--out"])
        .arg(cache_dir())
        .output()
        .expect("ran image build")
}

fn image() -> &'static Path {
    IMAGE.get_or_init(|| {
        common::require_root();
        let out = build_image();
        assert!(
            out.status.success(),
            "image build failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cache_dir().join("current")
    })
}

/// A state folder of its own, so that the cleanup checks see only this runner.
fn state_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("vm-state-{name}"))
}

fn vm_runner(pool_size: usize, state: &Path) -> Runner {
    vm_runner_with(pool_size, state, &[])
}

/// A runner as [`vm_runner`] makes, with more flags.
fn vm_runner_with(pool_size: usize, state: &Path, more: &[&str]) -> Runner {
    vm_runner_on(image(), pool_size, state, more)
}

/// A runner as [`vm_runner_with`] makes, booting the image folder `image`.
fn vm_runner_on(image: &Path, pool_size: usize, state: &Path, more: &[&str]) -> Runner {
    let mut extra: Vec<String> = ["--backend", "vm", "--vmm", "qemu", "--accel", "tcg"]
        .iter()
        .chain(more)
        .map(|s| s.to_string())
        .collect();
    extra.push("--vm-image".into());
    extra.push(image.display().to_string());
    extra.push("--state-dir".into());
    extra.push(state.display().to_string());
    // A request may wait for a VM to boot (seconds under TCG).
    extra.push("--queue-timeout-ms".into());
    extra.push("120000".into());
    // No warm imports unless asked: under TCG, numpy and pandas take the guest's vCPU
    // for many seconds, and a run arriving meanwhile would wait for the module being
    // imported.
    if !more.iter().any(|flag| flag.starts_with("--warm-imports")) {
        extra.push("--warm-imports=".into());
    }
    Runner::with(Options {
        pool_size,
        extra,
        env: Vec::new(),
        ..Options::default()
    })
}

/// QEMU processes of the runner with this state folder.
fn qemu_processes(state: &Path) -> Vec<String> {
    host_processes_with(&state.join("vm").display().to_string())
        .into_iter()
        .filter(|p| p.contains("qemu-system"))
        .collect()
}

/// Files left in a state folder's vm/ tree.
fn state_files(state: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![state.join("vm")];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path.clone());
            }
            found.push(path);
        }
    }
    found
}

#[test]
fn image_build_is_cached_and_complete() {
    let dir = image();
    for name in ["vmlinux", "initrd.img", "rootfs.ext4"] {
        let size = std::fs::metadata(dir.join(name))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(size > 0, "{name} missing or empty in {}", dir.display());
    }
    let started = Instant::now();
    let again = build_image();
    let took = started.elapsed();
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{said}");
    assert!(
        said.contains("cached"),
        "a second build with the same inputs is a cache hit: {said}"
    );
    assert!(took < Duration::from_secs(60), "a cache hit took {took:?}");
    println!("{}", String::from_utf8_lossy(&again.stdout));
}

/// How many times its built-in compile timeout a compile step gets in a TCG guest.
/// Measured there (one emulated vCPU, half of it the sandbox's; 2026-12-04): a hello
/// world takes gcc 3.4 s, g++ 16.6 s, `go build` 23.6 s, javac alone 19.8 s; a Java
/// program sent to a VM whose JVM has just started takes 30 s on a quiet machine and
/// 70 s on a busy one to compile (the loader warms javac up first), and TypeScript's
/// first program 16 s. The built-in timeouts (20 s for TypeScript, 30 s for C, C++ and
/// Java, 60 s for Go) are for hosts and KVM guests. Three times was too little for Java
/// once its loader became the JVM languages' shared one (577 lines, which the source
/// launcher compiles as the JVM starts, before the loader warms javac): 90 s ran out in
/// a CI run while the other suites took the second CPU.
const TCG_COMPILE_FACTOR: i64 = 5;
/// The longest any one request of this test may take, waiting for a VM included: a
/// compile at its TCG timeout, then the run's own 60 s.
const REQUEST_BOUND: Duration = Duration::from_secs(240);

/// The built-in rows with TCG_COMPILE_FACTOR times their compile timeouts, as an
/// operator's languages file that replaces them.
fn slow_guest_languages() -> PathBuf {
    let mut table: toml::Table = include_str!("../../src/languages/builtin.toml")
        .parse()
        .expect("the built-in rows parse");
    let rows = table
        .get_mut("language")
        .and_then(toml::Value::as_array_mut)
        .expect("[[language]] rows");
    for row in rows.iter_mut().filter_map(toml::Value::as_table_mut) {
        if let Some(ms) = row
            .get("compile_timeout_ms")
            .and_then(toml::Value::as_integer)
        {
            row.insert(
                "compile_timeout_ms".into(),
                (ms * TCG_COMPILE_FACTOR).into(),
            );
        }
    }
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-languages.toml");
    std::fs::write(&path, toml::to_string(&table).expect("rows as TOML")).expect("written");
    path
}

/// Asks `runner` to run `code` in `lang`, bounded by [`REQUEST_BOUND`].
async fn run_bounded(runner: &Runner, lang: &str, code: &str, timeout_ms: u64) -> Value {
    tokio::time::timeout(
        REQUEST_BOUND,
        runner.run_with_timeout(lang, code, Some(timeout_ms)),
    )
    .await
    .unwrap_or_else(|_| panic!("{lang}: no answer in {REQUEST_BOUND:?}"))
}

/// Every language the runner offers, in a guest, as languages.rs tests them on the
/// process backend: hello (the empty stdin read to its end, exit code 3), a program that
/// does not compile, one that never ends (stopped at its timeout, the compile not
/// counted in it) and one that wants 600 MiB (stopped at the sandbox's memory). The
/// image holds every offered toolchain (headers, the alternatives links such as
/// `/usr/bin/java`, Java's configuration in /etc). One language after the other: the
/// pool of two prepares the next guest for the language just asked for (its loader
/// warmed up while the other guest runs), as it would for a caller's traffic.
#[tokio::test]
async fn every_language_in_a_guest_hello_stdin_exit_codes_compile_errors_timeouts_memory() {
    let _serial = SERIAL.lock().await;
    let languages = slow_guest_languages();
    let languages = languages.to_str().expect("a UTF-8 path");
    let runner = vm_runner_with(2, &state_dir("languages"), &["--languages", languages]);
    let health = runner.health().await;
    assert_eq!(health["backend"], "vm", "{health}");
    assert_eq!(common::language_names(&health), LANGUAGES, "{health}");
    let started = Instant::now();
    for lang in LANGUAGES {
        let asked = Instant::now();
        let out = run_bounded(&runner, lang, hello(lang), 60_000).await;
        assert_eq!(stdout(&out), format!("hello {lang}\n0\n"), "{lang}: {out}");
        assert_eq!(exit_code(&out), 3, "{lang}: {out}");
        assert_eq!(out["compileError"], false, "{lang}: {out}");
        if COMPILED.contains(&lang) {
            let out = run_bounded(&runner, lang, broken(lang), 60_000).await;
            assert_eq!(out["compileError"], true, "{lang}: {out}");
            assert_ne!(exit_code(&out), 0, "{lang}: {out}");
            assert!(!stderr(&out).is_empty(), "{lang}: diagnostics: {out}");
            assert_eq!(stdout(&out), "", "{lang}: nothing ran: {out}");
        }
        let out = run_bounded(&runner, lang, forever(lang), 2000).await;
        assert_eq!(out["timedOut"], true, "{lang}: {out}");
        assert_eq!(exit_code(&out), 137, "{lang}: {out}");
        assert_eq!(out["compileError"], false, "{lang}: {out}");
        let ms = out["durationMs"].as_u64().expect("durationMs");
        assert!(
            (2000..2000 + 60_000).contains(&ms),
            "{lang}: ran {ms} ms: {out}"
        );
        let out = run_bounded(&runner, lang, hog(lang), 60_000).await;
        let stopped = out["oomKilled"] == true || stderr(&out).contains("OutOfMemoryError");
        assert!(stopped, "{lang}: {out}");
        assert_ne!(exit_code(&out), 0, "{lang}: {out}");
        assert!(!stdout(&out).contains("629145600"), "{lang}: {out}");
        println!(
            "vm: {lang} answered its programs in {:.1} s",
            asked.elapsed().as_secs_f64()
        );
    }
    println!(
        "vm: {} languages in {:.1} s",
        LANGUAGES.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Inside the guest the sandbox is a cgroup v2 of the guest kernel, made by the init
/// with the jail's cgroup code (the development machines' own controllers are v1: this
/// is where that code runs against a real v2 kernel): the program is in a v2 cgroup
/// namespace, gets its whole 256 MiB (240 MiB in one allocation works: the guest's
/// kernel and init live outside the limit), is OOM-killed beyond it with the kill
/// reported, and cannot have more than 64 processes and threads.
#[tokio::test]
async fn the_sandbox_is_a_cgroup_v2_of_the_guest_with_its_limits() {
    let _serial = SERIAL.lock().await;
    let runner = vm_runner(1, &state_dir("cgroup2"));
    let cgroup = runner.run("bash", "cat /proc/self/cgroup").await;
    assert_eq!(stdout(&cgroup), "0::/\n", "a v2 cgroup namespace: {cgroup}");
    let big = runner
        .run_with_timeout(
            "python",
            "a = bytearray(240 * 1024 * 1024)\nprint(len(a))",
            Some(60_000),
        )
        .await;
    assert_eq!(stdout(&big).trim(), "251658240", "{big}");
    assert_eq!(big["oomKilled"], false, "{big}");
    let killed = runner
        .run_with_timeout(
            "python",
            "a = bytearray(300 * 1024 * 1024)\nprint('survived')",
            Some(60_000),
        )
        .await;
    assert_eq!(killed["oomKilled"], true, "{killed}");
    assert_eq!(exit_code(&killed), 137, "{killed}");
    assert!(!stdout(&killed).contains("survived"), "{killed}");
    let threads = "import threading, time\n\
                   started = 0\n\
                   try:\n\
                   \x20   for _ in range(200):\n\
                   \x20       threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n\
                   \x20       started += 1\n\
                   except RuntimeError as e:\n\
                   \x20   print('refused', e)\n\
                   print(started)";
    let capped = runner
        .run_with_timeout("python", threads, Some(30_000))
        .await;
    let text = stdout(&capped);
    assert!(text.contains("refused"), "{capped}");
    let started: u64 = text
        .lines()
        .last()
        .and_then(|l| l.parse().ok())
        .expect("a count");
    assert!((40..64).contains(&started), "{started} threads: {capped}");
}

#[tokio::test]
async fn the_guest_has_no_network_interface_but_lo() {
    let _serial = SERIAL.lock().await;
    let runner = vm_runner(1, &state_dir("net"));
    let code = "import os, socket\n\
                print([l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]])\n\
                for host in ['10.0.2.2', '1.1.1.1']:\n\
                \x20   try:\n\
                \x20       socket.create_connection((host, 80), timeout=2)\n\
                \x20       print('connected', host)\n\
                \x20   except OSError as e:\n\
                \x20       print('refused', host, e.errno)\n\
                s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
                c = socket.create_connection(s.getsockname()); print('loopback ok')\n";
    let out = runner.run("python", code).await;
    let text = stdout(&out);
    assert!(text.starts_with("['lo']\n"), "{out}");
    assert!(!text.contains("connected"), "{out}");
    assert!(text.contains("loopback ok"), "{out}");
}

#[tokio::test]
async fn destroy_leaves_nothing_on_the_host() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("destroy");
    let runner = vm_runner(2, &state);
    runner.run("bash", "echo warm").await;
    let pid = runner.pid();
    assert!(!qemu_processes(&state).is_empty(), "the pool keeps VMs");
    assert!(!instance_cgroups(pid).is_empty(), "each VMM has a cgroup");
    let status = runner.stop();
    assert!(status.success(), "{status}");
    assert_nothing_left(pid, &state, qemu_processes(&state));
}

/// No VMM process (`vmms`, as found), cgroup or file of the runner `pid` is left.
fn assert_nothing_left(pid: u32, state: &Path, vmms: Vec<String>) {
    assert!(vmms.is_empty(), "{vmms:?}");
    assert!(
        instance_cgroups(pid).is_empty(),
        "{:?}",
        instance_cgroups(pid)
    );
    assert!(state_files(state).is_empty(), "{:?}", state_files(state));
}

#[tokio::test]
async fn a_runner_that_cannot_boot_its_first_vm_refuses_to_start_and_leaves_nothing() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("no-boot");
    let child = Command::new(env!("CARGO_BIN_EXE_sandbox-runner"))
        .args(["serve", "--listen", "127.0.0.1:0", "--pool-size", "1"])
        .args(["--backend", "vm", "--vmm", "qemu", "--accel", "tcg"])
        .arg("--vm-image")
        .arg(image())
        .arg("--state-dir")
        .arg(&state)
        .env("RUNNER_DATA_DIR", state.join("data"))
        // No VM boots in a millisecond.
        .args(["--vm-boot-timeout-ms", "1"])
        .env("SANDBOX_RUNNER_TOKEN", common::TOKEN)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start sandbox-runner");
    let pid = child.id();
    let out = child.wait_with_output().expect("runner ended");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("cannot make sandboxes"), "{said}");
    assert_nothing_left(pid, &state, qemu_processes(&state));
}

#[tokio::test]
async fn a_killed_runner_leaves_no_vmm_and_the_next_one_cleans_up() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("killed");
    let runner = vm_runner(2, &state);
    runner.run("bash", "echo warm").await;
    let pid = runner.pid();
    runner.kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !qemu_processes(&state).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        qemu_processes(&state).is_empty(),
        "QEMU dies with the runner"
    );
    let next = vm_runner(1, &state);
    assert!(
        instance_cgroups(pid).is_empty(),
        "{:?}",
        instance_cgroups(pid)
    );
    let stale = state.join("vm").join(format!("r{pid}"));
    assert!(!stale.exists(), "{} left behind", stale.display());
    assert_eq!(stdout(&next.run("bash", "echo ok").await), "ok\n");
}

/// Inside the guest a busy loop sees a whole vCPU (TCG gives the guest no steal time),
/// so the half-CPU quota is checked where it is enforced: the QEMU process's CPU time.
#[tokio::test]
async fn a_busy_guest_gets_about_half_a_host_cpu() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("cpu");
    let runner = vm_runner(1, &state);
    wait_available(&runner).await;
    let busy = runner.run_with_timeout("bash", "while true; do :; done", Some(8000));
    let measure = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = (qemu_cpu_ticks(&state), Instant::now());
        tokio::time::sleep(Duration::from_secs(4)).await;
        let after = (qemu_cpu_ticks(&state), Instant::now());
        let ticks = after.0.saturating_sub(before.0) as f64;
        ticks / clock_ticks_per_second() / (after.1 - before.1).as_secs_f64()
    };
    let (out, share) = tokio::join!(busy, measure);
    assert_eq!(out["timedOut"], true, "{out}");
    // The quota is a ceiling: a loaded machine may give the guest less than its half, so
    // the floor only shows that the guest was busy at all.
    assert!(
        (0.1..=0.6).contains(&share),
        "QEMU used {share:.2} of a CPU"
    );
    println!("vm: a busy guest's QEMU used {share:.2} of a host CPU");
}

/// User plus system CPU time of this runner's QEMU processes, in clock ticks.
fn qemu_cpu_ticks(state: &Path) -> u64 {
    qemu_processes(state)
        .iter()
        .filter_map(|p| p.split(':').next())
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command name, which is in parentheses.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .sum()
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf takes a constant and reads no memory of ours.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// Prints what the issue asks to measure: boot to agent-ready, per-run latency, and
/// what a warm VM costs the host.
#[tokio::test]
async fn measure_boot_latency_and_memory() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("measure");
    let started = Instant::now();
    let runner = vm_runner(1, &state);
    let first_boot = started.elapsed();
    let mut latencies = Vec::new();
    for _ in 0..5 {
        wait_available(&runner).await;
        // Let the fresh guest settle (a VM warm for a while, as in a pool under light load).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss = qemu_rss_kib(&state);
        let t = Instant::now();
        let out = runner.run("python", "print(1)").await;
        latencies.push(t.elapsed());
        assert_eq!(stdout(&out), "1\n");
        println!("vm: warm VM QEMU RSS {} MiB", rss / 1024);
    }
    latencies.sort();
    let refill = Instant::now();
    wait_available(&runner).await;
    println!(
        "vm: runner start to first VM ready {first_boot:?}; refill (boot to agent ready) {:?}; \
         POST /run print(1) on a warm VM: min {:?} median {:?} max {:?}",
        refill.elapsed(),
        latencies[0],
        latencies[2],
        latencies[4]
    );
}

async fn wait_available(runner: &Runner) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while runner.health().await["available"] == 0 {
        assert!(Instant::now() < deadline, "no VM became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Resident memory of this runner's QEMU processes, in KiB.
fn qemu_rss_kib(state: &Path) -> u64 {
    qemu_processes(state)
        .iter()
        .filter_map(|p| p.split(':').next())
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .sum()
}
