//! The host's interpreter embedded, started once, forked: the child has the parent's
//! state and runs source; the parent goes on; a fork is refused while another thread
//! exists. Its own `main` (no libtest threads). Needs `/usr/bin/python3` and its shared
//! library (Debian's `libpython3.11`): without them it fails, saying which is missing.

use sandbox_pyembed::{shared_library_of, EmbedError, Forked, Python};
use std::path::Path;
use std::time::Duration;

fn main() {
    let python = Path::new("/usr/bin/python3");
    let library = shared_library_of(python)
        .expect("running /usr/bin/python3")
        .expect("the interpreter's shared library (Debian: apt-get install libpython3.11)");
    let py = Python::start(&library, "/usr/bin/python3").expect("starting the interpreter");
    assert!(matches!(
        Python::start(&library, "/usr/bin/python3"),
        Err(EmbedError::AlreadyStarted)
    ));
    py.run("import json, sys\nx = 41\nassert sys.executable == '/usr/bin/python3', sys.executable")
        .expect("running source in __main__");
    assert!(matches!(
        py.run("raise ValueError('on purpose')"),
        Err(EmbedError::Raised)
    ));
    assert!(matches!(py.run("a\0b"), Err(EmbedError::Nul(_))));

    // The child has what the parent imported and defined; what it changes stays its own.
    assert_eq!(
        child_exit(
            &py,
            "x += 1\nos._exit(0 if x == 42 and 'json' in sys.modules else 3)"
        ),
        0
    );
    py.run("assert x == 41, x")
        .expect("the parent's x is its own");
    // A child's exception and SystemExit end it as python3 would.
    assert_eq!(child_exit(&py, "raise SystemExit(7)"), 7);
    assert_eq!(child_exit(&py, "1 / 0"), 1);
    // Each child is a process of its own.
    assert_eq!(
        child_exit(&py, "os._exit(0 if os.getpid() != PARENT else 5)"),
        0
    );

    // Another thread: no fork until it is gone.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        let _ = rx.recv_timeout(Duration::from_secs(30));
    });
    assert!(matches!(py.fork(), Err(EmbedError::Threads(2))));
    drop(tx);
    other.join().expect("the other thread");
    assert_eq!(child_exit(&py, "os._exit(0)"), 0);
    println!("fork: all checks passed");
}

/// Forks; the child runs `source` (with `os`, `sys` and `PARENT`, the parent's pid) and
/// ends; the parent returns the child's exit code.
fn child_exit(py: &Python, source: &str) -> i32 {
    py.run(&format!("import os, sys\nPARENT = {}", std::process::id()))
        .expect("setting PARENT");
    match py.fork().expect("fork") {
        Forked::Child => {
            let rc = match py.run(source) {
                Ok(()) => 0,
                Err(_) => 1,
            };
            // SAFETY: _exit ends the child at once, without running the parent's atexit
            // handlers or destructors twice.
            unsafe { libc::_exit(rc) }
        }
        Forked::Parent(pid) => {
            let mut status = 0;
            // SAFETY: waitpid writes the status of our own child into `status`.
            let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
            assert_eq!(waited, pid, "waitpid");
            assert!(
                libc::WIFEXITED(status),
                "the child ended with status {status}"
            );
            libc::WEXITSTATUS(status)
        }
    }
}
