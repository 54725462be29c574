//! What a program inside a sandbox can see and do: escape checks against real sandboxes.

mod common;

use common::{exit_code, host_processes_with, stdout, Runner, TOKEN};
use std::net::TcpListener;

#[tokio::test]
async fn no_network_reaches_the_host() {
    let runner = Runner::start();
    let listener = TcpListener::bind("127.0.0.1:0").expect("host listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let code = format!(
        "import socket\n\
         for host in ['127.0.0.1', '10.0.2.2', '8.8.8.8']:\n\
         \x20   s = socket.socket(); s.settimeout(2)\n\
         \x20   try:\n\
         \x20       s.connect((host, {port})); print('CONNECTED', host)\n\
         \x20   except OSError as e:\n\
         \x20       print('refused', host, e.errno)\n"
    );
    let out = runner.run("python", &code).await;
    assert!(!stdout(&out).contains("CONNECTED"), "{out}");
    assert_eq!(stdout(&out).matches("refused").count(), 3, "{out}");
    assert!(
        listener.accept().is_err(),
        "a connection from the sandbox reached the host"
    );
    let ifaces = runner
        .run(
            "bash",
            "ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1",
        )
        .await;
    assert_eq!(
        stdout(&ifaces).split_whitespace().collect::<Vec<_>>(),
        ["lo"],
        "{ifaces}"
    );
}

#[tokio::test]
async fn host_secrets_and_the_token_are_invisible() {
    let dir = std::env::temp_dir().join(format!("sandbox-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("secret dir");
    let secret = dir.join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-7d1e").expect("secret file");
    let runner = Runner::start();
    let code = format!(
        "cat {path} 2>&1; cat /root/.bashrc 2>&1 | head -1; ls /work /root /run 2>&1\n\
         for f in /proc/*/environ /proc/*/cmdline; do cat $f 2>/dev/null | tr '\\0' '\\n'; done\n\
         env\n",
        path = secret.display()
    );
    let out = runner.run("bash", &code).await;
    let text = stdout(&out);
    assert!(!text.contains("TOP-SECRET"), "{out}");
    assert!(!text.contains(TOKEN), "the runner token leaked: {out}");
    assert!(text.contains("No such file or directory"), "{out}");
    let env = runner
        .run("python", "import os; print(sorted(os.environ))")
        .await;
    common::require_packages();
    assert_eq!(
        stdout(&env).trim(),
        "['HOME', 'LANG', 'MPLBACKEND', 'PATH', 'PYTHONPATH', 'TMPDIR', 'USER']",
        "the program's environment is fixed (the package set's path and plots backend)"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[tokio::test]
async fn writes_outside_tmp_and_home_fail() {
    let runner = Runner::start();
    let code = "for p in /usr/x /etc/x /x /bin/x /dev/x /proc/x /home/x; do \
                  if touch $p 2>/dev/null; then echo WROTE $p; else echo denied $p; fi; done; \
                touch /tmp/ok && echo tmp-ok; touch ~/ok && echo home-ok; pwd";
    let out = runner.run("bash", code).await;
    let text = stdout(&out);
    assert!(!text.contains("WROTE"), "{out}");
    assert_eq!(text.matches("denied").count(), 7, "{out}");
    assert!(text.contains("tmp-ok") && text.contains("home-ok"), "{out}");
    assert!(text.contains("/home/sandbox"), "{out}");
}

#[tokio::test]
async fn the_program_inherits_no_descriptor_but_its_stdio() {
    let runner = Runner::start();
    let out = runner
        .run(
            "python",
            "import os\nprint(sorted(int(f) for f in os.listdir('/proc/self/fd')))",
        )
        .await;
    // 0-2, plus the descriptor listdir itself holds open
    assert_eq!(stdout(&out).trim(), "[0, 1, 2, 3]", "{out}");
    let link = runner
        .run(
            "bash",
            "readlink /proc/self/fd/3; ls -l /proc/1/fd 2>&1 | grep -c socket",
        )
        .await;
    assert!(!stdout(&link).contains("socket:"), "{link}");
}

#[tokio::test]
async fn the_program_cannot_reach_into_the_agent() {
    let runner = Runner::start();
    let code = "for f in /proc/1/mem /proc/1/environ /proc/1/fd/3; do \
                  if cat $f >/dev/null 2>&1; then echo OPENED $f; else echo denied $f; fi; done; \
                cat /proc/self/oom_score_adj";
    let out = runner.run("bash", code).await;
    assert!(!stdout(&out).contains("OPENED"), "{out}");
    assert!(
        stdout(&out).ends_with("1000\n"),
        "the program is the OOM killer's choice: {out}"
    );
}

#[tokio::test]
async fn only_the_sandbox_processes_are_visible() {
    let runner = Runner::start();
    let out = runner
        .run(
            "bash",
            "ls -d /proc/[0-9]* | wc -l; cat /proc/1/cmdline | tr '\\0' ' '",
        )
        .await;
    let text = stdout(&out);
    let mut lines = text.lines();
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("count");
    // the agent, bash, ls (and the subshell of the pipeline)
    assert!(count <= 5, "saw {count} processes: {out}");
    assert!(
        lines.next().is_some_and(|l| l.starts_with("sandbox-agent")),
        "{out}"
    );
}

#[tokio::test]
async fn unprivileged_user_without_capabilities() {
    let runner = Runner::start();
    let out = runner
        .run("bash", "id -u; id -g; id -G; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")
        .await;
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(&lines[..3], ["1000", "1000", "1000"], "{out}");
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            text.contains(&format!("{cap}:\t0000000000000000")),
            "{cap}: {out}"
        );
    }
    assert!(text.contains("NoNewPrivs:\t1"), "{out}");
    assert!(text.contains("Seccomp:\t2"), "{out}");
}

#[tokio::test]
async fn seccomp_refuses_dangerous_calls() {
    let runner = Runner::start();
    // x86_64 numbers: mount 165, umount2 166, ptrace 101, unshare 272, bpf 321, keyctl 250,
    // setns 308, kexec_load 246, init_module 175, finit_module 313, delete_module 176,
    // chroot 161
    let code = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {"mount": (165, 0, 0, 0, 0, 0), "umount2": (166, 0, 0), "ptrace": (101, 16, 1, 0, 0),
         "unshare": (272, 0x10000000), "bpf": (321, 0, 0, 0), "keyctl": (250, 0, 0),
         "setns": (308, 0, 0), "kexec_load": (246, 0, 0, 0, 0), "init_module": (175, 0, 0, 0),
         "finit_module": (313, 0, 0, 0), "delete_module": (176, 0, 0), "chroot": (161, 0)}
for name, args in calls.items():
    rc = libc.syscall(*[ctypes.c_long(a) for a in args])
    print(name, rc, os.strerror(ctypes.get_errno()))
"#;
    let out = runner.run("python", code).await;
    let text = stdout(&out);
    for name in [
        "mount",
        "umount2",
        "ptrace",
        "unshare",
        "bpf",
        "keyctl",
        "setns",
        "kexec_load",
        "init_module",
        "finit_module",
        "delete_module",
        "chroot",
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name}: {out}"));
        assert_eq!(line, format!("{name} -1 Operation not permitted"), "{out}");
    }
}

/// The filter is one program chained from five parts (jail `seccomp::chain`): a call each
/// part answers must get that part's answer, wherever it sits in the chain, and a call
/// no part matches must pass all of them. x86_64 numbers: clone 56, clone3 435, seccomp
/// 317, getpid 39 (and its x32 number, 0x40000000 + 39), socket 41, modify_ldt 154.
#[tokio::test]
async fn every_part_of_the_seccomp_filter_answers_and_the_rest_passes() {
    let runner = Runner::start();
    let code = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(*[ctypes.c_long(a) for a in args])
    if rc == 0 and name == "clone_newuser":
        os._exit(0)  # a child the filter should never have let be made
    err = ctypes.get_errno()
    print(name, "ok" if rc >= 0 else os.strerror(err))
call("clone_newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
call("clone3", 435, 0, 0)
call("seccomp_listener", 317, 1, 8, 0)
call("modify_ldt", 154, 0, 0, 0)
call("socket_packet", 41, 17, 3, 0)
call("x32_getpid", 0x40000000 + 39)
call("getpid", 39)
fd = libc.syscall(ctypes.c_long(41), ctypes.c_long(2), ctypes.c_long(1), ctypes.c_long(0))
print("socket_inet", "ok" if fd >= 0 else os.strerror(ctypes.get_errno()))
"#;
    let out = runner.run("python", code).await;
    let text = stdout(&out);
    let expected = [
        "clone_newuser Operation not permitted",
        "clone3 Function not implemented",
        "seccomp_listener Operation not permitted",
        "modify_ldt Function not implemented",
        "socket_packet Address family not supported by protocol",
        "x32_getpid Function not implemented",
        "getpid ok",
        "socket_inet ok",
    ];
    assert_eq!(text.lines().collect::<Vec<_>>(), expected, "{out}");
}

/// Every host-wide `/proc` entry docs/security.md names is masked (an empty file or
/// folder) or closed to the program, and every per-namespace count is zero, whatever
/// the maker read of the host before the sandbox was made.
#[tokio::test]
async fn every_masked_proc_entry_is_empty_or_closed() {
    let runner = Runner::start();
    let code = r#"
import os
files = """cmdline config.gz kallsyms kcore keys key-users timer_list timer_stats sched_debug
schedstat latency_stats modules kmsg kpagecount kpageflags kpagecgroup sysrq-trigger iomem
ioports vmallocinfo slabinfo pagetypeinfo buddyinfo zoneinfo interrupts softirqs locks
diskstats partitions swaps devices mtrr dma misc consoles bootconfig mdstat execdomains
crypto""".split()
folders = """acpi asound scsi bus fs irq driver tty pressure dynamic_debug
device-tree""".split()
for name in files:
    path = "/proc/" + name
    if not os.path.lexists(path):
        continue
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
        if data:
            print("READ", path, len(data))
    except OSError:
        pass
for name in folders:
    path = "/proc/" + name
    if os.path.isdir(path) and os.listdir(path):
        print("LISTED", path, os.listdir(path)[:3])
for name in sorted(os.listdir("/proc/sys/user")):
    value = open("/proc/sys/user/" + name).read().strip()
    if name.startswith("max_") and value != "0":
        print("COUNT", name, value)
print("done")
"#;
    let out = runner.run("python", code).await;
    assert_eq!(stdout(&out), "done\n", "{out}");
}

/// The kernel's own interfaces are out of reach on every backend: no device but the
/// harmless ones (no memory, kernel log or disk device, which a VM guest's /dev has), no
/// /sys, and the writable kernel switches of /proc read-only or closed.
#[tokio::test]
async fn kernel_interfaces_are_closed() {
    let runner = Runner::start();
    let code = "ls /dev; ls /sys >/dev/null 2>&1 && echo SYS-VISIBLE; \
                for f in /dev/mem /dev/kmem /dev/port /dev/kmsg /dev/vda /dev/sda /dev/console \
                         /dev/ttyS0 /dev/vport0p1 /dev/vsock /dev/kvm; do \
                  [ -e $f ] && echo PRESENT $f; done; \
                for f in /proc/sysrq-trigger /proc/sys/kernel/core_pattern \
                         /proc/sys/kernel/modprobe /proc/sys/vm/drop_caches \
                         /proc/sys/kernel/hostname; do \
                  if (echo x > $f) 2>/dev/null; then echo WROTE $f; else echo refused $f; fi; done";
    let out = runner.run("bash", code).await;
    let text = stdout(&out);
    let devices: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("refused") && !l.starts_with("WROTE"))
        .filter(|l| !l.starts_with("PRESENT") && !l.starts_with("SYS"))
        .collect();
    assert_eq!(
        devices,
        ["fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "urandom", "zero"],
        "{out}"
    );
    assert!(!text.contains("SYS-VISIBLE"), "{out}");
    assert!(!text.contains("PRESENT"), "{out}");
    assert!(!text.contains("WROTE"), "{out}");
    assert_eq!(text.matches("refused").count(), 5, "{out}");
}

#[tokio::test]
async fn nothing_passes_from_one_run_to_the_next() {
    let runner = Runner::with(common::Options {
        pool_size: 1,
        ..Default::default()
    });
    let first = runner
        .run("bash", "echo mark > /tmp/mark; echo mark > ~/mark; echo mark > /dev/shm/mark; ls /tmp ~ /dev/shm")
        .await;
    assert_eq!(stdout(&first).matches("mark").count(), 3, "{first}");
    for _ in 0..3 {
        let next = runner
            .run("bash", "ls -A /tmp ~ /dev/shm | grep -c mark; true")
            .await;
        assert_eq!(stdout(&next).trim(), "0", "{next}");
    }
}

#[tokio::test]
async fn concurrent_runs_never_mix() {
    let runner = Runner::with(common::Options {
        pool_size: 4,
        ..Default::default()
    });
    let runs = (0..12).map(|i| {
        let runner = &runner;
        async move {
            let code = format!(
                "import os, time\n\
                 open('/tmp/id', 'w').write('{i}')\n\
                 time.sleep(0.3)\n\
                 print('run', {i}, open('/tmp/id').read(), sorted(os.listdir('/tmp')), len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
            );
            (i, runner.run("python", &code).await)
        }
    });
    for (i, out) in futures::future::join_all(runs).await {
        assert_eq!(exit_code(&out), 0, "{out}");
        assert_eq!(
            stdout(&out).trim(),
            format!("run {i} {i} ['id'] 2"),
            "{out}"
        );
    }
    assert!(host_processes_with("open('/tmp/id'").is_empty());
}

/// On the host, the program runs as a uid of its own: not root, not the runner's user,
/// and not its agent's (which runs as another uid of the sandbox's, so the program can
/// neither signal, trace nor re-limit it).
#[tokio::test]
async fn the_program_runs_as_a_host_uid_of_its_own() {
    if common::backend() == "vm" {
        eprintln!("SKIPPED the_program_runs_as_a_host_uid_of_its_own: a VM's program is not a host process");
        return;
    }
    let runner = Runner::start();
    let marker = format!("3.0{}", std::process::id());
    let code = format!("sleep {marker}; echo done");
    let run = runner.run("bash", &code);
    let look = async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(found) = host_processes_with(&format!("sleep {marker}")).first() {
                let pid: u32 = found.split(':').next().unwrap().parse().unwrap();
                return program_and_agent_uids(pid);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the program never showed up"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    let (out, (program_uid, agent_uid)) = tokio::join!(run, look);
    assert_eq!(stdout(&out), "done\n", "{out}");
    let runner_uid = common::test_uid().unwrap_or(0);
    for uid in [program_uid, agent_uid] {
        assert_ne!(uid, 0, "a sandbox process runs as host root");
        assert_ne!(
            uid, runner_uid,
            "a sandbox process runs as the runner's user"
        );
    }
    assert_ne!(
        program_uid, agent_uid,
        "the program runs as its agent's user"
    );
}

/// The host uids of a sandboxed process and of the agent above it (the nearest ancestor
/// whose command line starts with sandbox-agent), read while the process runs.
fn program_and_agent_uids(pid: u32) -> (u32, u32) {
    let status =
        |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |text: &str, name: &str| -> u32 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    let program = status(pid);
    let mut ancestor = field(&program, "PPid:");
    loop {
        let text = status(ancestor);
        let cmdline = std::fs::read(format!("/proc/{ancestor}/cmdline")).unwrap_or_default();
        if cmdline.starts_with(b"sandbox-agent\0") {
            return (field(&program, "Uid:"), field(&text, "Uid:"));
        }
        ancestor = field(&text, "PPid:");
        assert!(ancestor > 1, "no agent above the program");
    }
}

/// The time shared_files.py's attack sets (its CHOSEN_NS).
const CHOSEN_NS: i64 = 1_000_000_000_000_000_000;

/// What a sandbox sees of the files it may share with another (common/shared_files.py);
/// with `attack`, after trying every change a program can make to them.
fn shared_files(attack: bool) -> String {
    let attack = if attack { "True" } else { "False" };
    format!(
        "ATTACK = {attack}\n{}",
        include_str!("common/shared_files.py")
    )
}

/// The answer of a shared_files.py program.
fn seen(out: &serde_json::Value) -> serde_json::Value {
    assert_eq!(exit_code(out), 0, "{out}");
    serde_json::from_str(stdout(out).trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The host's own device nodes as its processes see them: mode, owner and times.
fn host_devices() -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    ["null", "zero", "full", "random", "urandom"]
        .iter()
        .map(|name| {
            let m = std::fs::metadata(format!("/dev/{name}")).expect("a host device");
            format!(
                "{name} {:o} {} {}.{} {}.{} {}.{}",
                m.mode(),
                m.uid(),
                m.atime(),
                m.atime_nsec(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec()
            )
        })
        .collect()
}

/// Nothing a sandbox can change is seen by another: of every file it may share with a
/// sandbox running meanwhile or with a later one on its slot (device nodes, which a
/// template makes once per slot and an ordinary user's runner binds from the host; the
/// empty file and folder its /proc masks show; the system files), a program can change
/// nothing (times set to now or to a chosen time, mode, owner, an extended attribute:
/// all refused), and neither a sandbox running meanwhile (a session) nor the next one
/// on the attacker's slot, nor the host, sees a difference.
#[tokio::test]
async fn no_sandbox_changes_a_file_another_one_sees() {
    let runner = Runner::with(common::Options {
        pool_size: 1,
        ..Default::default()
    });
    let look = shared_files(false);
    let meanwhile = runner.open_session(serde_json::json!({})).await;
    let meanwhile_before = seen(&runner.ok_in(&meanwhile, "python", &look).await);
    // A Python run first: the sandbox that replaces it, the attacker's, is prepared for
    // Python as the later ones are (made alike: by the same template, if any).
    seen(&runner.run("python", &look).await);
    let host_before = host_devices();
    let attacker = seen(&runner.run("python", &shared_files(true)).await);
    let host_after = host_devices();
    let meanwhile_after = seen(&runner.ok_in(&meanwhile, "python", &look).await);
    eprintln!("the attack's refusals: {}", attacker["refused"]);
    assert_eq!(
        host_before, host_after,
        "a program changed the host's devices"
    );
    assert_eq!(
        meanwhile_before["before"], meanwhile_after["before"],
        "a sandbox running meanwhile saw a change"
    );
    // The next sandbox on the attacker's slot: with one sandbox in the pool, one of the
    // next few (an index is given back once its sandbox is gone).
    let mut later = None;
    for _ in 0..8 {
        let next = seen(&runner.run("python", &look).await);
        if next["slot"] == attacker["slot"] {
            later = Some(next);
            break;
        }
    }
    let later = later.expect("no later sandbox on the attacker's slot");
    let attacked = attacker["before"].as_object().expect("files");
    for (path, file) in later["before"].as_object().expect("files") {
        let times = &file.as_array().expect("a file")[6..9];
        assert!(
            times.iter().all(|t| t.as_i64() != Some(CHOSEN_NS)),
            "{path} has the time the attacker chose: {file}"
        );
        assert!(
            !file[9].to_string().contains("user.sandbox"),
            "{path}: {file}"
        );
        // The same file: device, inode and birth (a file system that keeps no birth
        // time is a new /proc's, the sandbox's own).
        let same_file = |before: &&serde_json::Value| {
            (0..3).all(|i| before[i] == file[i]) && file[2].as_i64() != Some(0)
        };
        if let Some(before) = attacked.get(path).filter(same_file) {
            assert_eq!(
                before, file,
                "{path}, a file of the attacker's, changed for the next sandbox on its slot"
            );
        }
    }
    // Nor can it change anything that only it sees: nothing to tell apart.
    assert_eq!(
        attacker["changed"],
        serde_json::json!([]),
        "a program changed files another sandbox may see"
    );
    assert_eq!(
        attacker["before"], attacker["after"],
        "a shared file changed"
    );
}
