//! Top-level `await` in TypeScript (and Node.js) programs, wherever an ES module allows
//! it: as a declaration's value, inside an expression (`console.log(await x)`), in a
//! block, in `for await`, with and without `import`; one-shot and in a session, through
//! the real runner, the agent's loader and real node.
//!
//! Needs root and the package set (TypeScript's compiler), as tests/languages.rs does.

mod common;

use common::{exit_code, stderr, stdout, Runner};
use serde_json::{json, Value};

/// Programs that await at their top level, and what each prints.
const FORMS: [(&str, &str, &str); 8] = [
    (
        "an await inside a call's arguments",
        "console.log(await Promise.resolve(7));",
        "7\n",
    ),
    (
        "an await as a declaration's value",
        "const x: number = await Promise.resolve(6);\nconsole.log(x);",
        "6\n",
    ),
    (
        "an await in a template and an arithmetic expression",
        "console.log(`${1 + (await Promise.resolve(4))}`);",
        "5\n",
    ),
    (
        "an await in a block",
        "if (Date.now() > 0) {\n  console.log(await new Promise<number>((r) => setTimeout(() => r(8), 10)));\n}",
        "8\n",
    ),
    (
        "for await",
        "async function* numbers() { yield 1; yield 2; }\nfor await (const n of numbers()) console.log(n);",
        "1\n2\n",
    ),
    (
        "an await of a parenthesized call (a call of `await` in a script)",
        "const id = (n: number) => Promise.resolve(n);\nconsole.log(await (id)(9));",
        "9\n",
    ),
    (
        "an await with an import",
        "import os from 'node:os';\nconsole.log(await Promise.resolve(os.EOL.length));",
        "1\n",
    ),
    (
        "an await with a named import and an export",
        "import { setTimeout as sleep } from 'node:timers/promises';\nexport const v: number = 3;\nconsole.log(await sleep(5, v));",
        "3\n",
    ),
];

fn ran(out: &Value, expected: &str, what: &str) {
    assert_eq!(out["compileError"], false, "{what}: {out}");
    assert_eq!(exit_code(out), 0, "{what}: {}", stderr(out));
    assert_eq!(stdout(out), expected, "{what}: {out}");
}

#[tokio::test]
async fn typescript_awaits_at_its_top_level_in_a_one_shot_run() {
    common::require_packages();
    let runner = Runner::start();
    for (what, code, expected) in FORMS {
        let out = runner.run("typescript", code).await;
        ran(&out, expected, what);
    }
}

#[tokio::test]
async fn typescript_awaits_at_its_top_level_in_a_session() {
    common::require_packages();
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    runner
        .ok_in(&id, "typescript", "const kept: number = 41;")
        .await;
    for (what, code, expected) in FORMS {
        let out = runner.ok_in(&id, "typescript", code).await;
        ran(&out, expected, what);
    }
    let out = runner
        .ok_in(&id, "typescript", "console.log(kept + 1);")
        .await;
    ran(
        &out,
        "42\n",
        "the session's state outlives its ES module runs",
    );
    runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
}

#[tokio::test]
async fn node_awaits_inside_an_expression_at_its_top_level() {
    let runner = Runner::start();
    let code = "console.log(await Promise.resolve(7));";
    ran(&runner.run("node", code).await, "7\n", "one-shot");
    let id = runner.open_session(json!({})).await;
    let out = runner.ok_in(&id, "node", code).await;
    ran(&out, "7\n", "in a session");
    runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
}

#[tokio::test]
async fn a_misplaced_await_is_still_the_programs_error() {
    common::require_packages();
    let runner = Runner::start();
    // An await in a function that is not async is an error in a module too.
    let code = "function f() { return await Promise.resolve(1); }\nconsole.log(f());";
    let out = runner.run("typescript", code).await;
    assert_ne!(exit_code(&out), 0, "{out}");
    assert_eq!(stdout(&out), "", "{out}");
    assert!(
        stderr(&out).contains("await") && !stderr(&out).contains("ERR_UNKNOWN_FILE_EXTENSION"),
        "{out}"
    );
}
