//! Sandboxes forked from a template, Python programs forked from its interpreter (issue
//! 16): that they are, what siblings must not share, where written memory is charged,
//! that a program cannot reach the template, and that jails take over without it. The
//! isolation, tenant, limit and API batteries run against template-made sandboxes too
//! (the runner's default), and against jail-made ones with `RUNNER_TEMPLATES=false`
//! (scripts/test).

mod common;

use common::{exit_code, stdout, Options, Runner};
use serde_json::Value;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// What a sandbox's first process is: the agent a template's fork executed, or the
/// agent a jail executed (its first two arguments: a forked one may name its keeper).
const FIRST_PROCESS: &str = "tr '\\0' ' ' < /proc/1/cmdline | cut -d' ' -f1-2";

#[tokio::test]
async fn sandboxes_are_forked_from_the_template_and_python_from_its_interpreter() {
    // One sandbox at a time, the first prepared for Python (and forked from the
    // interpreter), the next for the language of the run it replaces.
    let runner = Runner::templates(true, 1);
    // A forked program is no executed python3: its executable is the runner's binary,
    // while what it sees of its start is an executed one's.
    let out = runner
        .run(
            "python",
            "import os, sys\nprint(os.path.realpath('/proc/self/exe') != \
             os.path.realpath(sys.executable), sys.executable, sys.argv)\n\
             print(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[:2])",
        )
        .await;
    assert_eq!(
        stdout(&out),
        "True /usr/bin/python3 ['/home/sandbox/main.py']\n[b'python3', b'-c']\n",
        "{out}"
    );
    let out = runner.run("bash", FIRST_PROCESS).await;
    assert_eq!(
        stdout(&out).trim(),
        "sandbox-agent __sandbox-forked-agent",
        "{out}"
    );
}

#[tokio::test]
async fn without_templates_sandboxes_are_jails() {
    let runner = Runner::templates(false, 1);
    let out = runner.run("bash", FIRST_PROCESS).await;
    assert_eq!(
        stdout(&out).trim(),
        "sandbox-agent __sandbox-agent",
        "{out}"
    );
}

/// Prints every random value a sibling could share: Python's `random`, `os.urandom`,
/// `secrets`, `uuid4`, `tempfile`'s names, and numpy's global generator where the
/// package set has numpy.
const RANDOM: &str = r#"import os, random, secrets, sys, tempfile, uuid
sys.path.append("/opt/packages/python")
values = [random.random(), random.getrandbits(64), os.urandom(8).hex(), secrets.token_hex(8),
          str(uuid.uuid4()), next(tempfile._get_candidate_names())]
try:
    import numpy
    values.append(float(numpy.random.random()))
except ImportError:
    values.append("no numpy")
print(" ".join(map(str, values)))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn siblings_share_no_random_state() {
    let runner = Runner::templates(true, 2);
    let mut seen: Vec<HashSet<String>> = vec![HashSet::new(); 7];
    for _ in 0..6 {
        let out = runner.run("python", RANDOM).await;
        assert_eq!(exit_code(&out), 0, "{out}");
        let values: Vec<&str> = stdout(&out).split_whitespace().collect();
        assert_eq!(values.len(), 7, "{out}");
        for (i, value) in values.iter().enumerate() {
            if *value == "no" {
                continue; // numpy missing: nothing to compare
            }
            assert!(
                seen[i].insert(value.to_string()),
                "two sandboxes drew the same value {value} (source {i}): {out}"
            );
        }
    }
}

/// A program that optionally writes to every object it shares with the template, then
/// names itself `marker` (so the test finds it on the host, and measures it) and waits.
fn holder(marker: &str, touch: bool) -> String {
    format!(
        "import gc, time\n\
         if {touch}:\n    gc.unfreeze()\n    kept = [id(o) for o in gc.get_objects()]\n\
         open('/proc/self/comm', 'w').write('{marker}')\n\
         print('holding', flush=True)\ntime.sleep(3)\n",
        touch = if touch { "True" } else { "False" }
    )
}

/// The anonymous memory charged to the cgroup of the host process named `marker`,
/// once it runs (v1 `rss`, v2 `anon`).
async fn charged_to(marker: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(bytes) = common::host_pids_named(marker)
            .into_iter()
            .find_map(anon_bytes_of_cgroup)
        {
            return bytes;
        }
        assert!(Instant::now() < deadline, "no process named {marker}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn anon_bytes_of_cgroup(pid: u32) -> Option<u64> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let (dir, key) = match cgroups.lines().find_map(|l| l.split_once(":memory:")) {
        Some((_, path)) => (format!("/sys/fs/cgroup/memory{path}"), "rss"),
        None => {
            let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
            (format!("/sys/fs/cgroup{path}"), "anon")
        }
    };
    let stat = std::fs::read_to_string(format!("{dir}/memory.stat")).ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_program_writes_is_charged_to_its_sandbox() {
    // The template's pages are shared until written; a program that writes to all of
    // them (each object's reference count) gets its own copies, charged to its own
    // cgroup: never to the template's or to nobody.
    let runner = Runner::templates(true, 2);
    let tag = std::process::id() % 100_000;
    let mut charged = Vec::new();
    for touch in [false, true] {
        let marker = format!("tpl{}{tag}", u8::from(touch));
        let run = {
            let (url, client) = (runner.url.clone(), runner.client.clone());
            let code = holder(&marker, touch);
            tokio::spawn(async move { common::post_run(&client, &url, "python", &code).await })
        };
        charged.push(charged_to(&marker).await);
        let out: Value = run.await.expect("run task");
        assert_eq!(stdout(&out), "holding\n", "{out}");
    }
    let (untouched, touched) = (charged[0], charged[1]);
    eprintln!("charged to the sandbox: {untouched} bytes untouched, {touched} touched");
    assert!(
        touched > untouched + 2 * 1024 * 1024,
        "writing to the template's objects charged {touched} bytes against {untouched} \
         untouched: the copies are not the sandbox's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_imports_are_the_template_s_and_cost_a_sandbox_little() {
    // The default warm imports (numpy, pandas, matplotlib.pyplot) are imported once, in
    // the data stack's template: a python sandbox for a program that imports one has
    // them at once, and what it is charged for stays
    // small (a sandbox that imported them itself was charged about 70 MiB).
    common::require_packages();
    let runner = Runner::with(Options {
        pool_size: 2,
        env: vec![("RUNNER_TEMPLATES".into(), "true".into())],
        ..Default::default()
    });
    let marker = format!("tplw{}", std::process::id() % 100_000);
    // A program that imports one of them gets a sandbox that has them (issue 35).
    let code = format!(
        "import sys\nprint(all(m in sys.modules for m in ('numpy', 'pandas', 'matplotlib.pyplot')))\n\
         import pandas\n{}",
        holder(&marker, false)
    );
    let run = {
        let (url, client) = (runner.url.clone(), runner.client.clone());
        tokio::spawn(async move { common::post_run(&client, &url, "python", &code).await })
    };
    let charged = charged_to(&marker).await;
    let out: Value = run.await.expect("run task");
    assert_eq!(stdout(&out), "True\nholding\n", "{out}");
    assert!(
        charged < 16 * 1024 * 1024,
        "a warm python sandbox was charged {charged} bytes"
    );
}

#[tokio::test]
async fn a_program_cannot_reach_the_template() {
    // Everything a program can name it may signal: only its own sandbox. After the
    // worst it can do, the next sandbox is still the template's.
    let runner = Runner::templates(true, 1);
    let hostile =
        "kill -9 -1 2>/dev/null; for p in $(seq 2 4096); do kill -9 $p 2>/dev/null; done; \
                   ls /proc | grep -c '^[0-9]'";
    let out = runner.run("bash", hostile).await;
    assert_eq!(
        exit_code(&out),
        137,
        "the program survived kill -9 -1: {out}"
    );
    let out = runner.run("bash", FIRST_PROCESS).await;
    assert_eq!(
        stdout(&out).trim(),
        "sandbox-agent __sandbox-forked-agent",
        "{out}"
    );
    let out = runner
        .run(
            "python",
            "import os\nprint(sorted(os.listdir('/proc/self/fd')))",
        )
        .await;
    assert_eq!(stdout(&out), "['0', '1', '2', '3']\n", "{out}");
}

#[tokio::test]
async fn a_python_row_the_keeper_cannot_stand_for_is_executed_and_the_keeper_goes() {
    // An operator's row that sets a variable the interpreter reads at start: a fork of
    // the template's interpreter would not see it, so the program is executed, and the
    // keeper the sandbox's first process forked for it is let go (no process left).
    let mut file = tempfile::NamedTempFile::new().expect("a temp file");
    let row = r#"
[[language]]
name = "python"
file = "main.py"
run = ["python3", "{file}"]
loader = { kind = "python", command = ["python3", "-c", "{loader}"] }
env = { PYTHONDONTWRITEBYTECODE = "1" }
requires = ["/usr/bin/python3"]
version = ["python3", "--version"]
"#;
    std::io::Write::write_all(&mut file, row.as_bytes()).expect("written");
    let runner = Runner::with(Options {
        pool_size: 1,
        env: vec![
            ("RUNNER_TEMPLATES".into(), "true".into()),
            ("RUNNER_WARM_IMPORTS".into(), String::new()),
            (
                "RUNNER_LANGUAGES".into(),
                file.path().to_string_lossy().into(),
            ),
        ],
        ..Default::default()
    });
    // The agent's command line names its keeper (the sandbox is the Python template's).
    let code = "import os, sys\n\
                agent = open('/proc/1/cmdline').read().split('\\0')\n\
                pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n\
                print(os.path.realpath('/proc/self/exe') == os.path.realpath(sys.executable), \
                sys.dont_write_bytecode, agent[1], int(agent[2]) in pids, len(pids))";
    for _ in 0..2 {
        let out = runner.run("python", code).await;
        assert_eq!(
            stdout(&out),
            "True True __sandbox-forked-agent False 2\n",
            "executed, with its variable; the keeper gone; the agent and the program only"
        );
    }
}

#[tokio::test]
async fn jails_take_over_when_the_template_is_gone() {
    // A run may wait for the template's failure, the pool's retry and a jail: on a host
    // busy with other suites, more than the default queue timeout of 5 s.
    let runner = Runner::with(Options {
        pool_size: 1,
        env: vec![("RUNNER_WARM_IMPORTS".into(), String::new())],
        extra: vec!["--queue-timeout-ms".into(), "60000".into()],
        ..Default::default()
    });
    let out = runner.run("bash", FIRST_PROCESS).await;
    assert_eq!(
        stdout(&out).trim(),
        "sandbox-agent __sandbox-forked-agent",
        "{out}"
    );
    let templates = common::children_with(runner.pid(), "__sandbox-template");
    assert_eq!(
        templates.len(),
        2,
        "a plain and a Python template: {templates:?}"
    );
    for template in templates {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(template as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("killing a template");
    }
    // The warm sandbox made before is still the template's; at most one call fails
    // while the runner learns the template is gone; then jails make every sandbox.
    let mut first_processes = Vec::new();
    for _ in 0..4 {
        let out = runner.run("bash", FIRST_PROCESS).await;
        first_processes.push(stdout(&out).trim().to_owned());
    }
    assert_eq!(
        first_processes.last().map(String::as_str),
        Some("sandbox-agent __sandbox-agent"),
        "{first_processes:?}"
    );
}

/// A template's uids (real, effective, saved, file system) once they are one (a
/// template making a sandbox has another effective uid for a moment), within 2 s; what
/// they are then otherwise.
async fn settled_uids(pid: u32) -> Vec<String> {
    let mut uid = status_fields(pid, "Uid:");
    for _ in 0..100 {
        if uid.iter().all(|u| u == &uid[0]) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        uid = status_fields(pid, "Uid:");
    }
    uid
}

/// The line of `/proc/<pid>/status` that starts with `key`, its fields.
fn status_fields(pid: u32, key: &str) -> Vec<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn templates_hold_no_host_privilege() {
    // What a template would have if its own confinement failed is what a compromised
    // one could use: host root, host capabilities, the host's namespaces, a map to
    // host ids beyond its own and the sandboxes'. With warm imports: the plain
    // template, Python's lean one and the one that imports them (issue 35).
    let runner = Runner::with(Options {
        pool_size: 2,
        env: vec![("RUNNER_TEMPLATES".into(), "true".into())],
        ..Default::default()
    });
    let out = runner.run("bash", "echo up").await;
    assert_eq!(stdout(&out), "up\n", "{out}");
    // Once the pool has made the run's replacement: while a template makes a sandbox it
    // takes the sandbox's host uid as its effective one for a moment (the new user
    // namespace's owner), then returns to its own.
    runner.wait_until_full().await;
    let templates = common::children_with(runner.pid(), "__sandbox-template");
    assert_eq!(templates.len(), 3, "{templates:?}");
    let mut uids = HashSet::new();
    for pid in templates {
        let uid = settled_uids(pid).await;
        assert!(
            uid.len() == 4 && uid.iter().all(|u| u == &uid[0]) && uid[0] != "0",
            "template {pid} runs as {uid:?}: every id must be one host uid, not root's"
        );
        let gid = status_fields(pid, "Gid:");
        assert!(gid.iter().all(|g| g != "0"), "template {pid}: gids {gid:?}");
        assert!(status_fields(pid, "Groups:").is_empty(), "template {pid}");
        assert_eq!(status_fields(pid, "NoNewPrivs:"), ["1"], "template {pid}");
        uids.insert(uid[0].clone());
        for ns in ["user", "mnt", "net", "ipc", "uts"] {
            let of = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/{ns}")).expect("ns");
            assert_ne!(
                of(&pid.to_string()),
                of("self"),
                "template {pid} shares the host's {ns} namespace"
            );
        }
        let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).expect("uid_map");
        let mut lines = map.lines().map(|l| {
            let f: Vec<u64> = l.split_whitespace().map(|n| n.parse().unwrap()).collect();
            (f[0], f[1], f[2])
        });
        let own: u64 = uid[0].parse().unwrap();
        assert_eq!(lines.next(), Some((0, own, 1)), "template {pid}: {map}");
        // Each sandbox index's two ids, mapped to themselves, all at or above the
        // runner's id base (RUNNER_ID_BASE, 1000000 here): no system or login user's.
        for (inside, outside, count) in lines {
            assert!(
                inside == outside && outside >= 1_000_000 && outside != own && count == 1,
                "template {pid} maps a host id that is no sandbox's: {map}"
            );
        }
    }
    assert_eq!(uids.len(), 3, "two templates share a uid: {uids:?}");
}

/// What a process's address space shows of its layout and its stack canary, read from
/// the host: where its stack, its C library and its executable are mapped, and the 16
/// random bytes the kernel gave its exec (`AT_RANDOM`, whence glibc draws the canary;
/// a fork keeps them, and the canary with them).
#[derive(Debug)]
struct Layout {
    pid: u32,
    parts: Vec<(&'static str, String)>,
}

impl Layout {
    fn of(pid: u32) -> Layout {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe");
        let exe = exe.to_string_lossy();
        let start = |wanted: &dyn Fn(&str) -> bool| -> String {
            maps.lines()
                .find(|line| line.split_whitespace().nth(5).is_some_and(wanted))
                .and_then(|line| line.split('-').next())
                .unwrap_or_else(|| panic!("{pid}: no such mapping in {maps}"))
                .to_owned()
        };
        let parts = vec![
            ("stack", start(&|path| path == "[stack]")),
            ("C library", start(&|path| path.contains("/libc.so"))),
            ("executable", start(&|path| path == exe)),
            ("AT_RANDOM (the stack canary)", at_random(pid)),
        ];
        Layout { pid, parts }
    }

    /// What `self` and `other` share.
    fn shared_with(&self, other: &Layout) -> Vec<&'static str> {
        self.parts
            .iter()
            .zip(&other.parts)
            .filter(|(a, b)| a == b)
            .map(|(a, _)| a.0)
            .collect()
    }
}

/// The 16 bytes at `pid`'s `AT_RANDOM`, in hex.
fn at_random(pid: u32) -> String {
    use std::os::unix::fs::FileExt;
    const AT_RANDOM: u64 = 25;
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).expect("auxv");
    let words: Vec<u64> = auxv
        .chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
        .collect();
    let address = words
        .chunks_exact(2)
        .find(|pair| pair[0] == AT_RANDOM)
        .map(|pair| pair[1])
        .expect("AT_RANDOM in auxv");
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("mem");
    let mut bytes = [0u8; 16];
    mem.read_exact_at(&mut bytes, address)
        .expect("AT_RANDOM's bytes");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The agent above `pid`: PID 1 of its PID namespace.
fn agent_above(pid: u32) -> u32 {
    let mut pid = pid;
    loop {
        if status_fields(pid, "NSpid:").last().map(String::as_str) == Some("1") {
            return pid;
        }
        pid = status_fields(pid, "PPid:")[0].parse().expect("a parent");
        assert!(pid > 1, "no agent above the program");
    }
}

/// A program that names itself `marker` and waits, in `lang`.
fn waiting(lang: &str, marker: &str) -> String {
    match lang {
        "python" => {
            format!("import time\nopen('/proc/self/comm', 'w').write('{marker}')\ntime.sleep(60)\n")
        }
        _ => format!("printf %s {marker} > /proc/$$/comm; sleep 60"),
    }
}

/// One sandbox seen from the host while its program waits: the program's layout, its
/// agent's, and the template the agent's first process was forked from.
#[derive(Debug)]
struct Seen {
    program: Layout,
    agent: Layout,
    template: u32,
}

async fn see(runner: &Runner, lang: &str, n: usize) -> Seen {
    let marker = format!("lay{n}{}", std::process::id() % 10_000);
    let run = {
        let (url, client) = (runner.url.clone(), runner.client.clone());
        let code = waiting(lang, &marker);
        let lang = lang.to_owned();
        tokio::spawn(async move { common::post_run(&client, &url, &lang, &code).await })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let program = loop {
        if let Some(pid) = common::host_pids_named(&marker).first() {
            break *pid;
        }
        assert!(Instant::now() < deadline, "no process named {marker}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let agent = agent_above(program);
    let seen = Seen {
        program: Layout::of(program),
        agent: Layout::of(agent),
        template: status_fields(agent, "PPid:")[0].parse().expect("a parent"),
    };
    let group = nix::unistd::Pid::from_raw(program as i32);
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).expect("ending it");
    run.await.expect("run task");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_share_no_layout_or_canary_with_programs_or_each_other() {
    // The agent holds more than its program (the channel, its capabilities): it must not
    // be a copy of the address space a Python program is forked from, nor of another
    // sandbox's agent. Python programs share their template's layout (by design,
    // docs/security.md), bash ones are executed.
    let runner = Runner::templates(true, 1);
    let mut seen = Vec::new();
    for (n, lang) in ["python", "python", "python", "bash", "bash", "bash"]
        .into_iter()
        .enumerate()
    {
        seen.push(see(&runner, lang, n).await);
    }
    let templates: Vec<Layout> = common::children_with(runner.pid(), "__sandbox-template")
        .into_iter()
        .map(Layout::of)
        .collect();
    for template in &templates {
        let made = seen.iter().filter(|s| s.template == template.pid).count();
        assert!(
            made >= 2,
            "template {} made {made} of the sandboxes",
            template.pid
        );
    }
    for (i, one) in seen.iter().enumerate() {
        let shared = one.agent.shared_with(&one.program);
        assert!(
            shared.is_empty(),
            "sandbox {i}: its agent shares with its program {shared:?}: {one:?}"
        );
        for template in &templates {
            let shared = one.agent.shared_with(template);
            assert!(
                shared.is_empty(),
                "sandbox {i}: its agent shares with a template {shared:?}"
            );
        }
        for (j, other) in seen.iter().enumerate().skip(i + 1) {
            let shared = one.agent.shared_with(&other.agent);
            assert!(
                shared.is_empty(),
                "the agents of sandboxes {i} and {j} share {shared:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_program_forked_from_the_data_stack_s_template_cannot_reach_it() {
    // A program that imports pandas is forked from the template that imported the warm
    // imports (issue 35): it holds only its own descriptors, sees only its sandbox's
    // processes, and what it kills leaves the template making the next one.
    common::require_packages();
    let runner = Runner::with(Options {
        pool_size: 2,
        env: vec![("RUNNER_TEMPLATES".into(), "true".into())],
        ..Default::default()
    });
    let templates = common::children_with(runner.pid(), "__sandbox-template");
    assert_eq!(templates.len(), 3, "{templates:?}");
    let hostile = "import os, signal, sys\n\
                   warm = 'pandas' in sys.modules\n\
                   import pandas\n\
                   fds = sorted(os.listdir('/proc/self/fd'))\n\
                   pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n\
                   print(warm, fds, len(pids) < 10, flush=True)\n\
                   for p in range(2, 4096):\n\
                   \x20   try:\n\
                   \x20       os.kill(p, signal.SIGKILL)\n\
                   \x20   except OSError:\n\
                   \x20       pass\n\
                   os.kill(-1, signal.SIGKILL)\n";
    let out = runner.run("python", hostile).await;
    assert_eq!(stdout(&out), "True ['0', '1', '2', '3'] True\n", "{out}");
    assert_eq!(
        exit_code(&out),
        137,
        "the program survived kill -9 -1: {out}"
    );
    runner.wait_until_full().await;
    let still = common::children_with(runner.pid(), "__sandbox-template");
    assert_eq!(still, templates, "every template lives on");
    let out = runner
        .run(
            "python",
            "import sys\nprint('pandas' in sys.modules)\nimport pandas",
        )
        .await;
    assert_eq!(stdout(&out), "True\n", "{out}");
}
