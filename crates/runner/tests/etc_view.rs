//! A sandbox forked from a template shows `/etc` through one overlay of its own over the
//! template's copy of the host's folders (issue 35), where a jail overlays each folder:
//! the two must show the same names, kinds, modes, link targets and bytes; the
//! overlay's inodes must be the sandbox's own (a lock taken in one sandbox blocks no
//! other), and nothing of it may be written or reached beyond it.

mod common;

use common::{stdout, Runner};
use std::time::Duration;

/// Every path below `/etc`, with its kind and mode, and its link target or a digest of
/// its bytes.
const LISTING: &str = r#"
import hashlib, os, stat
lines = []
for folder, dirs, files in os.walk("/etc"):
    dirs.sort()
    for name in sorted(dirs + files):
        path = os.path.join(folder, name)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            what = "-> " + os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            with open(path, "rb") as f:
                what = hashlib.sha256(f.read()).hexdigest()[:16]
        else:
            what = ""
        lines.append(f"{path} {oct(st.st_mode)} {what}")
print(len(lines))
print("\n".join(lines))
"#;

/// The same listing in a plain sandbox (not Python's), from the shell.
const SHELL_LISTING: &str = "find /etc -mindepth 1 -printf '%p %m %y %l\\n' | LC_ALL=C sort\n\
    find /etc -type f -exec sha256sum {} + | LC_ALL=C sort -k2";

#[tokio::test]
async fn a_forked_sandbox_shows_etc_as_a_jail_does() {
    let (forked, jailed) = (Runner::templates(true, 1), Runner::templates(false, 1));
    for (lang, code) in [("python", LISTING), ("bash", SHELL_LISTING)] {
        let (got, want) = (forked.run(lang, code).await, jailed.run(lang, code).await);
        let (got, want) = (stdout(&got), stdout(&want));
        assert!(want.lines().count() > 50, "{lang}: {want}");
        for path in [
            "/etc/passwd ",
            "/etc/ssl/certs/",
            "/etc/alternatives/",
            "/etc/fonts/",
        ] {
            assert!(want.contains(path), "{lang}: {path} not in {want}");
        }
        if got != want {
            let (g, w): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
            let only_forked: Vec<_> = g.iter().filter(|l| !w.contains(l)).take(10).collect();
            let only_jailed: Vec<_> = w.iter().filter(|l| !g.contains(l)).take(10).collect();
            panic!("{lang}: forked only {only_forked:?}; jailed only {only_jailed:?}");
        }
    }
}

#[tokio::test]
async fn a_forked_sandbox_s_etc_is_one_mount_that_cannot_be_written() {
    let runner = Runner::templates(true, 1);
    let out = runner
        .run(
            "bash",
            "awk '$5 == \"/etc\" || $5 ~ /^\\/etc\\// {print $5, $9}' /proc/self/mountinfo\n\
             for p in /etc/new /etc/fonts/new /etc/alternatives/python3; do\n\
               (echo x > \"$p\") 2>/dev/null && echo \"wrote $p\"\n\
             done\n\
             rm -f /etc/passwd 2>/dev/null && echo removed\n\
             ls -d /home/.etc 2>&1 | grep -c 'No such'",
        )
        .await;
    assert_eq!(stdout(&out), "/etc overlay\n1\n", "{out}");
}

/// Takes an exclusive lock on a file below `/etc` and holds it `hold` seconds; says
/// whether it got it at once.
fn locker(hold: u32) -> String {
    format!(
        "import fcntl, time\nf = open('/etc/fonts/fonts.conf', 'rb')\n\
         try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('locked')\n\
         except OSError:\n    print('blocked')\ntime.sleep({hold})"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_on_etc_in_one_sandbox_blocks_no_other() {
    let runner = Runner::templates(true, 2);
    let holder = async { runner.run("python", &locker(4)).await };
    let other = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        runner.run("python", &locker(0)).await
    };
    let (held, other) = tokio::join!(holder, other);
    assert_eq!(stdout(&held), "locked\n", "{held}");
    assert_eq!(stdout(&other), "locked\n", "{other}");
}
