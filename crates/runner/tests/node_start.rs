//! A Node program sees the same on both of its paths: run by the loader a warm sandbox
//! started ahead (which makes its stdout and stderr streams while it waits), and run
//! cold, as `node --experimental-detect-module main.js` in a sandbox prepared for
//! another language. Same stdout, stderr and exit code for plain programs, output
//! written just before an exit, streams' properties, `require` of set packages, ES
//! modules and top-level await; and TypeScript on its loader. A session's run, whose
//! baseline now holds those streams, still waits for a pipe its program reads.
//!
//! Needs root and the package set, as tests/fast_path.rs does.

mod common;

use common::{exit_code, stderr, stdout, Options, Runner};
use serde_json::Value;

/// Programs run on both paths, each named.
const PROGRAMS: [(&str, &str); 10] = [
    ("a plain program", "console.log(1)"),
    (
        "the streams' properties before the first write",
        "console.log(process.stdout.isTTY, process.stderr.isTTY, process.stdout.fd, \
         process.stderr.fd, process.stdout.constructor.name, process.stdout.bytesWritten, \
         process.stdout.writableLength);\n\
         console.error('to stderr');\nprocess.exitCode = 3;",
    ),
    (
        "interleaved streams",
        "for (let i = 0; i < 3; i++) { console.log('out', i); console.error('err', i); }",
    ),
    // Within a pipe's 64 KiB: node itself drops the rest of a larger write at an exit,
    // as much as the reader had not taken yet.
    (
        "a write just before process.exit",
        "process.stdout.write('x'.repeat(60000));\nprocess.stderr.write('y'.repeat(1000));\n\
         process.exit(5);",
    ),
    (
        "a write's callback, a timer and the exit event",
        "process.on('exit', (code) => console.log('exit', code));\n\
         process.stdout.write('a\\n', () => console.error('written'));\n\
         setTimeout(() => console.log('timer'), 5);",
    ),
    (
        "an uncaught error",
        "function f() { throw new Error('boom'); }\nf();",
    ),
    (
        "require of set packages",
        "const _ = require('lodash'); const { z } = require('zod');\n\
         console.log(_.sum([1, 2]), z.number().parse(3), require.main === module);",
    ),
    (
        "an ES module with imports",
        "import os from 'node:os'; import _ from 'lodash';\n\
         console.log(typeof os.EOL, _.max([4, 2]), typeof require);",
    ),
    (
        "top-level await",
        "const v = await new Promise((r) => setTimeout(() => r(7), 5));\nconsole.log(v);",
    ),
    (
        "stdout ended by the program",
        "process.stdout.write('last\\n');\nprocess.stdout.end();\nconsole.error('after end');",
    ),
];

/// Tells whether the run went through the loader: its node was started with `-e`.
const PROBE: &str =
    "console.log(require('fs').readFileSync('/proc/self/cmdline', 'utf8').split('\\0')[2] === '-e')";

/// What a run gave, with the stack frames below the program's taken out of stderr (the
/// loader's frames differ there, as docs/architecture.md says).
fn seen(out: &Value) -> (String, String, i64) {
    let frames_of_the_program = stderr(out)
        .lines()
        .filter(|line| !line.trim_start().starts_with("at ") || line.contains("main.js"))
        .collect::<Vec<_>>()
        .join("\n");
    (
        stdout(out).to_owned(),
        frames_of_the_program,
        exit_code(out),
    )
}

#[tokio::test]
async fn node_programs_see_the_same_cold_and_on_the_warm_loader() {
    common::require_packages();
    // One sandbox at a time: the first is prepared for python, and each replacement is
    // prepared for the language of the run it replaces, so a node run after a python
    // one runs cold and the next node run on the loader.
    let runner = Runner::with(Options {
        pool_size: 1,
        ..Default::default()
    });
    let cold = runner.run("node", PROBE).await;
    let warm = runner.run("node", PROBE).await;
    assert_eq!(
        (stdout(&cold), stdout(&warm)),
        ("false\n", "true\n"),
        "{cold} {warm}"
    );
    for (what, code) in PROGRAMS {
        let other = runner.run("python", "pass").await;
        assert_eq!(exit_code(&other), 0, "{other}");
        let cold = runner.run("node", code).await;
        let warm = runner.run("node", code).await;
        assert_eq!(seen(&cold), seen(&warm), "{what}: cold {cold}, warm {warm}");
    }
}

#[tokio::test]
async fn node_programs_give_what_node_gives() {
    common::require_packages();
    let runner = Runner::start();
    let expected: [(&str, &str, &str, i64); 4] = [
        ("console.log(1)", "1\n", "", 0),
        (
            "console.log(process.stdout.isTTY, process.stdout.bytesWritten);\nconsole.error('e');\nprocess.exitCode = 3;",
            "undefined 0\n",
            "e\n",
            3,
        ),
        (
            "process.stdout.write('x'.repeat(60000));\nprocess.exit(5);",
            &"x".repeat(60_000),
            "",
            5,
        ),
        (
            "const v = await new Promise((r) => setTimeout(() => r(7), 5));\nconsole.log(v);",
            "7\n",
            "",
            0,
        ),
    ];
    for (code, out, err, code_exit) in expected {
        let ran = runner.run("node", code).await;
        assert_eq!(
            (stdout(&ran), stderr(&ran), exit_code(&ran)),
            (out, err, code_exit),
            "{code}: {ran}"
        );
    }
}

#[tokio::test]
async fn typescript_on_its_loader_writes_both_streams() {
    common::require_packages();
    let runner = Runner::start();
    let ran = runner
        .run(
            "typescript",
            "const n: number = 1;\nconsole.log(n, process.stdout.isTTY);\nconsole.error('e');\nprocess.exitCode = 2;",
        )
        .await;
    assert_eq!(
        (stdout(&ran), stderr(&ran), exit_code(&ran)),
        ("1 undefined\n", "e\n", 2),
        "{ran}"
    );
}

#[tokio::test]
async fn a_session_run_waits_for_a_pipe_its_program_still_reads() {
    // The child exits at once; a process it left holds the pipe and writes to it later.
    // `node main.js` prints the late line before it ends, so a session's run must too.
    common::require_packages();
    let runner = Runner::start();
    let id = runner.open_session(serde_json::json!({})).await;
    // In a block: a session keeps what a run declares at its top level.
    let code = "{\n\
                const { spawn } = require('child_process');\n\
                const child = spawn('sh', ['-c', '(sleep 0.3; echo late) &'], \
                { stdio: ['ignore', 'pipe', 'ignore'] });\n\
                child.stdout.on('data', (d) => console.log(String(d).trim()));\n\
                }";
    for round in 0..2 {
        let out = runner.ok_in(&id, "node", code).await;
        assert_eq!(stdout(&out), "late\n", "round {round}: {out}");
    }
}
