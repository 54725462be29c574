//! Interpreters started ahead of their job behave exactly as ones started for it.

mod common;

use common::{exit_code, stderr, stdout, Options, Runner};

const PYTHON: &str = r#"import os, sys
print(__name__, sys.argv, sys.path[0], __file__, os.getcwd(), sorted(os.environ))
print("prepared", open("/proc/self/cmdline", "rb").read().split(b"\0")[1] == b"-c")
sys.stdout.flush()
print("to stderr", file=sys.stderr)
def f():
    raise ValueError("boom")
f()
"#;

const NODE: &str = r#"const fs = require('fs');
console.log(require.main === module, process.argv.slice(1), __filename, process.cwd(), typeof globalThis.exports);
console.log('prepared', fs.readFileSync('/proc/self/cmdline', 'utf8').split('\0')[2] === '-e');
console.error('to stderr');
process.exitCode = 4;
"#;

/// Splits off the line that says which path ran, so the rest can be compared.
fn path_and_rest(out: &serde_json::Value) -> (bool, String) {
    let text = stdout(out);
    let prepared = text.contains("prepared True") || text.contains("prepared true");
    let rest: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("prepared"))
        .collect();
    (prepared, rest.join("\n"))
}

#[tokio::test]
async fn prepared_and_cold_interpreters_behave_the_same() {
    // One sandbox at a time: the first is prepared for python, and each replacement is
    // prepared for the language of the run it replaces. The environment names the
    // package set (PYTHONPATH) and its matplotlib backend (MPLBACKEND).
    common::require_packages();
    let runner = Runner::with(Options {
        pool_size: 1,
        ..Default::default()
    });
    let py_prepared = runner.run("python", PYTHON).await;
    let node_cold = runner.run("node", NODE).await;
    let node_prepared = runner.run("node", NODE).await;
    let py_cold = runner.run("python", PYTHON).await;

    let (a, a_rest) = path_and_rest(&py_prepared);
    let (b, b_rest) = path_and_rest(&py_cold);
    assert!(
        a && !b,
        "expected one prepared and one cold python run: {py_prepared} {py_cold}"
    );
    assert_eq!(a_rest, b_rest);
    assert_eq!(
        a_rest,
        "__main__ ['/home/sandbox/main.py'] /home/sandbox /home/sandbox/main.py /home/sandbox \
         ['HOME', 'LANG', 'MPLBACKEND', 'PATH', 'PYTHONPATH', 'TMPDIR', 'USER']"
    );
    assert_eq!(stderr(&py_prepared), stderr(&py_cold));
    assert!(stderr(&py_cold).starts_with("to stderr\nTraceback (most recent call last):\n  File \"/home/sandbox/main.py\", line 8, in <module>\n"), "{py_cold}");
    assert_eq!(exit_code(&py_prepared), 1);
    assert_eq!(exit_code(&py_cold), 1);

    let (c, c_rest) = path_and_rest(&node_prepared);
    let (d, d_rest) = path_and_rest(&node_cold);
    assert!(
        c && !d,
        "expected one prepared and one cold node run: {node_prepared} {node_cold}"
    );
    assert_eq!(c_rest, d_rest);
    assert_eq!(
        c_rest,
        "true [ '/home/sandbox/main.js' ] /home/sandbox/main.js /home/sandbox undefined"
    );
    assert_eq!(stderr(&node_prepared), "to stderr\n");
    assert_eq!(stderr(&node_cold), "to stderr\n");
    assert_eq!(exit_code(&node_prepared), 4);
    assert_eq!(exit_code(&node_cold), 4);
}

#[tokio::test]
async fn prepared_python_keeps_exit_codes_and_signals() {
    let runner = Runner::with(Options {
        pool_size: 1,
        ..Default::default()
    });
    let exit = runner.run("python", "import sys\nsys.exit(7)").await;
    assert_eq!(exit_code(&exit), 7);
    let message = runner.run("python", "raise SystemExit('bye')").await;
    assert_eq!((exit_code(&message), stderr(&message)), (1, "bye\n"));
    let interrupted = runner.run("python", "raise KeyboardInterrupt").await;
    assert_eq!(exit_code(&interrupted), 128 + 2, "{interrupted}");
    let killed = runner
        .run(
            "python",
            "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)",
        )
        .await;
    assert_eq!(exit_code(&killed), 128 + 15);
}
