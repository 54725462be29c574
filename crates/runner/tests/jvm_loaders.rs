//! The warm loaders of Clojure, Groovy and Kotlin (Java's is tested in languages.rs)
//! through the real runner and the real toolchains (scripts/test-toolchains installs
//! them). A language's first run finds no sandbox prepared for it; the pool then
//! prepares them for it, their JVM holding the language's runtime (Kotlin's: its
//! compiler) before the program comes. A program run there behaves as the language's
//! command: its output and exit code, `System.exit`, an uncaught exception's status 1
//! and message, the empty stdin, no arguments, a compile error where the language has
//! one, a class or namespace named like the loader's, and the memory limit.

mod common;

use common::debian_programs::DEBIAN;
use common::{exit_code, stderr, stdout, Runner};
use serde_json::{json, Value};

/// Long enough for a cold Kotlin compile on a loaded machine.
const TIMEOUT_MS: u64 = 60_000;

fn flag(out: &Value, name: &str) -> bool {
    out[name].as_bool().unwrap_or(false)
}

/// A runner whose pool holds sandboxes prepared for `lang`: a first (cold) run of
/// `hello` makes the pool prepare for the language; it must say `said`.
async fn warmed_for(lang: &str, hello: &str, said: &str) -> Runner {
    let runner = Runner::start();
    let out = runner.run_with_timeout(lang, hello, Some(TIMEOUT_MS)).await;
    assert_eq!(stdout(&out), said, "the cold run: {out}");
    runner
}

/// Runs `code` in a sandbox prepared for `lang` (the pool being full again).
async fn warm_run(runner: &Runner, lang: &str, code: &str) -> Value {
    runner.wait_until_full().await;
    runner.run_with_timeout(lang, code, Some(TIMEOUT_MS)).await
}

/// The program ran in the loader, the JVM started ahead ("SandboxLoader.java" is what
/// the JVM was started with), printed `hello`, read an empty stdin and exited 3.
fn ran_warm_and_exited_3(out: &Value, hello: &str) {
    let said = stdout(out);
    assert!(said.starts_with(&format!("{hello}\n0\n")), "{out}");
    assert!(said.contains("SandboxLoader.java"), "not the loader: {out}");
    assert_eq!(exit_code(out), 3, "{out}");
    assert!(
        !flag(out, "compileError") && !flag(out, "timedOut"),
        "{out}"
    );
}

/// An uncaught exception: status 1, what ran before it printed, the message, and none
/// of the loader's frames.
fn failed_with_boom(out: &Value) {
    assert_eq!(exit_code(out), 1, "{out}");
    assert_eq!(stdout(out), "before\n", "{out}");
    assert!(stderr(out).contains("boom"), "{out}");
    assert!(
        !stderr(out).contains("SandboxLoader"),
        "the loader's frames: {out}"
    );
    assert!(!flag(out, "compileError"), "{out}");
}

/// A compile error: the compiler's words (`says`), nothing run, a failed status.
fn did_not_compile(out: &Value, says: &str) {
    assert!(flag(out, "compileError"), "{out}");
    assert_eq!(stdout(out), "", "{out}");
    assert!(stderr(out).contains(says), "{out}");
    assert_ne!(exit_code(out), 0, "{out}");
}

#[tokio::test]
async fn clojure_runs_warm_as_clojure_main_does() {
    let runner = warmed_for("clojure", "(println \"hi\")", "hi\n").await;
    let out = warm_run(
        &runner,
        "clojure",
        "(println \"hello\")\n(println (count (slurp *in*)))\n\
         (println (System/getProperty \"sun.java.command\"))\n(System/exit 3)\n",
    )
    .await;
    ran_warm_and_exited_3(&out, "hello");
    let out = warm_run(
        &runner,
        "clojure",
        "(println \"before\")\n(throw (IllegalStateException. \"boom\"))\n",
    )
    .await;
    failed_with_boom(&out);
    assert!(stderr(&out).contains("(IllegalStateException)"), "{out}");
    // Read form by form as it runs: a syntax error is the run's, after what ran.
    let out = warm_run(&runner, "clojure", "(println \"ran\")\n(println \"x\"\n").await;
    assert_eq!(stdout(&out), "ran\n", "{out}");
    assert!(stderr(&out).contains("Syntax error"), "{out}");
    assert_eq!(exit_code(&out), 1, "{out}");
    assert!(!flag(&out, "compileError"), "{out}");
    // A namespace named like the loader's class, no arguments, a normal end.
    let out = warm_run(
        &runner,
        "clojure",
        "(ns SandboxLoader)\n(def x 41)\n(println (inc x) (str *ns*) (pr-str *command-line-args*))\n",
    )
    .await;
    assert_eq!(stdout(&out), "42 SandboxLoader nil\n", "{out}");
    assert_eq!(exit_code(&out), 0, "{out}");
}

#[tokio::test]
async fn groovy_compiles_then_runs_warm_as_groovy_does() {
    let runner = warmed_for("groovy", "println 'hi'", "hi\n").await;
    let out = warm_run(
        &runner,
        "groovy",
        "println 'hello'\nprintln System.in.bytes.length\n\
         println System.getProperty('sun.java.command')\nSystem.exit(3)\n",
    )
    .await;
    ran_warm_and_exited_3(&out, "hello");
    let out = warm_run(
        &runner,
        "groovy",
        "println 'before'\nthrow new IllegalStateException('boom')\n",
    )
    .await;
    failed_with_boom(&out);
    assert!(
        stderr(&out).starts_with("Caught: java.lang.IllegalStateException: boom\n"),
        "{out}"
    );
    assert!(stderr(&out).contains("main.groovy:2"), "{out}");
    // A syntax error is found before anything runs: a compile error.
    let out = warm_run(&runner, "groovy", "println 'never'\ndef x = (1 +\n").await;
    did_not_compile(&out, "startup failed");
    assert_eq!(exit_code(&out), 1, "{out}");
    // Classes named like the loader's are the program's; no arguments.
    let out = warm_run(
        &runner,
        "groovy",
        "class SandboxLoader { static String who() { 'mine' } }\n\
         class Groovy { static String who() { 'mine too' } }\n\
         println SandboxLoader.who() + ', ' + Groovy.who() + ', ' + args.length\n",
    )
    .await;
    assert_eq!(stdout(&out), "mine, mine too, 0\n", "{out}");
    assert_eq!(exit_code(&out), 0, "{out}");
    // A file holding a class with a main method (no script) runs that main.
    let out = warm_run(
        &runner,
        "groovy",
        "class App { static void main(String[] a) { println \"app ${a.length}\" } }\n",
    )
    .await;
    assert_eq!(stdout(&out), "app 0\n", "{out}");
}

#[tokio::test]
async fn kotlin_compiles_in_a_warm_jvm_and_runs_there() {
    let runner = warmed_for("kotlin", "fun main() { println(\"hi\") }", "hi\n").await;
    let out = warm_run(
        &runner,
        "kotlin",
        "fun main() {\n    println(\"hello\")\n    println(System.`in`.readBytes().size)\n    \
         println(System.getProperty(\"sun.java.command\"))\n    kotlin.system.exitProcess(3)\n}\n",
    )
    .await;
    ran_warm_and_exited_3(&out, "hello");
    let out = warm_run(
        &runner,
        "kotlin",
        "fun main() {\n    println(\"before\")\n    throw IllegalStateException(\"boom\")\n}\n",
    )
    .await;
    failed_with_boom(&out);
    assert!(
        stderr(&out).starts_with(
            "Exception in thread \"main\" java.lang.IllegalStateException: boom\n\tat MainKt.main"
        ),
        "{out}"
    );
    let out = warm_run(
        &runner,
        "kotlin",
        "fun main() {\n    println(\"never\")\n    val x: Int = \"s\"\n}\n",
    )
    .await;
    did_not_compile(&out, "error: type mismatch");
    // Classes named like the loader's are the program's; main's arguments are none.
    let out = warm_run(
        &runner,
        "kotlin",
        "class SandboxLoader { fun who() = \"mine\" }\nobject Kotlin { val x = 42 }\n\
         fun main(args: Array<String>) { println(SandboxLoader().who() + \" \" + Kotlin.x + \" \" + args.size) }\n",
    )
    .await;
    assert_eq!(stdout(&out), "mine 42 0\n", "{out}");
    assert_eq!(exit_code(&out), 0, "{out}");
}

#[tokio::test]
async fn a_warm_jvm_s_heap_stays_within_the_sandbox_s_memory() {
    if common::without_resource_limits("a_warm_jvm_s_heap_stays_within_the_sandbox_s_memory") {
        return;
    }
    let mut failures = Vec::new();
    for lang in ["clojure", "groovy", "kotlin"] {
        let programs = DEBIAN
            .iter()
            .find(|p| p.lang == lang)
            .expect("the language's programs");
        let said = format!("hello {lang}\n0\n");
        let runner = warmed_for(lang, programs.hello, &said).await;
        let out = warm_run(&runner, lang, programs.hog).await;
        let own_limit = stderr(&out).contains("OutOfMemoryError");
        let stopped = (own_limit || flag(&out, "oomKilled"))
            && exit_code(&out) != 0
            && !flag(&out, "timedOut")
            && !flag(&out, "compileError");
        if !stopped {
            failures.push(format!("{lang}: {out}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn a_clojure_session_keeps_its_definitions_and_namespace() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let out = runner
        .ok_in(
            &id,
            "clojure",
            "(def base 41)\n(defn next-of [n] (inc n))\n",
        )
        .await;
    assert_eq!(exit_code(&out), 0, "{out}");
    let out = runner
        .ok_in(&id, "clojure", "(println (next-of base) (str *ns*))\n")
        .await;
    assert_eq!(stdout(&out), "42 user\n", "{out}");
    assert_eq!(out["stateLost"], false, "{out}");
    // An exception ends its run with status 1, not the session.
    let out = runner
        .ok_in(
            &id,
            "clojure",
            "(println \"before\")\n(throw (IllegalStateException. \"boom\"))\n",
        )
        .await;
    assert_eq!(exit_code(&out), 1, "{out}");
    assert_eq!(stdout(&out), "before\n", "{out}");
    assert!(stderr(&out).contains("boom"), "{out}");
    // The namespace a run ends in is the next one's.
    runner
        .ok_in(
            &id,
            "clojure",
            "(ns work)\n(def answer (user/next-of (user/next-of user/base)))\n",
        )
        .await;
    let out = runner
        .ok_in(&id, "clojure", "(println answer (str *ns*))\n")
        .await;
    assert_eq!(stdout(&out), "43 work\n", "{out}");
    assert_eq!(out["stateLost"], false, "{out}");
    runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
}
