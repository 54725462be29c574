//! The host's interpreter embedded, started once, forked: the child has the parent's
//! state and runs source; the parent goes on; a fork is refused while another thread
//! exists. Its own `main` (no libtest threads). Needs `/usr/bin/python3` and its shared
//! library (Debian's `libpython3.11`): without them it fails, saying which is missing.

use sandbox_pyembed::{shared_library_of, EmbedError, Forked, Python, RESEED};
use std::path::Path;
use std::time::Duration;

/// The runner's default package set, where numpy is found when it has been built.
const SET: &str = "/var/lib/sandbox-runner/packages/current/python";

fn main() {
    if Path::new(SET).is_dir() {
        // Before the interpreter starts, which reads them once. One BLAS thread: the
        // template must stay single-threaded to fork.
        std::env::set_var("PYTHONPATH", SET);
        std::env::set_var("OPENBLAS_NUM_THREADS", "1");
    }
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

    // `random` reseeds itself in a child (CPython registers that at fork); numpy's global
    // generator does not, until RESEED.
    py.run("import random\ntry:\n    import numpy, numpy.random\nexcept ImportError:\n    numpy = None")
        .expect("importing random (and numpy where the interpreter finds it)");
    let plain = [draw(&py, false), draw(&py, false)];
    let reseeded = [draw(&py, true), draw(&py, true)];
    assert_ne!(plain[0].0, plain[1].0, "random: {plain:?}");
    assert_ne!(reseeded[0].0, reseeded[1].0, "random: {reseeded:?}");
    if plain[0].1 == "absent" {
        println!("fork: SKIPPED numpy's generator: numpy is not importable (no set at {SET})");
    } else {
        assert_eq!(plain[0].1, plain[1].1, "siblings share numpy's stream");
        assert_ne!(reseeded[0].1, reseeded[1].1, "RESEED: {reseeded:?}");
    }

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

/// Forks a child that (after [`RESEED`] when `reseed`) writes what `random` and numpy's
/// global generator draw next ("absent" without numpy).
fn draw(py: &Python, reseed: bool) -> (String, String) {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array it is given.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let [read, write] = fds;
    let source = format!(
        "{}import os\nn = repr(numpy.random.random()) if numpy else 'absent'\n\
         os.write({write}, f'{{random.random()!r}} {{n}}'.encode())\nos._exit(0)",
        if reseed { RESEED } else { "" }
    );
    assert_eq!(child_exit(py, &source), 0, "the drawing child");
    // SAFETY: closing our copy of the write end, then reading into a buffer we own.
    let text = unsafe {
        libc::close(write);
        let mut buf = [0u8; 256];
        let n = libc::read(read, buf.as_mut_ptr().cast(), buf.len());
        libc::close(read);
        String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned()
    };
    let (random, numpy) = text.split_once(' ').expect("two draws");
    (random.to_owned(), numpy.to_owned())
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
