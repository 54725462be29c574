//! Every language of Debian's toolchains (`debian.toml`) through the real runner and the
//! real toolchains, which the README's test command installs (scripts/test-toolchains):
//! each is offered with its version, a hello world reads its empty stdin and exits 3, a
//! compiled one's compile error is told apart, an endless program stops at its timeout
//! and a hungry one at the memory limit. Each test goes through every language and
//! lists all those that failed, not only the first.

mod common;

use common::debian_programs::{Programs, DEBIAN};
use common::{stderr, stdout, Runner};
use serde_json::Value;

fn flag(out: &Value, name: &str) -> bool {
    out[name].as_bool().unwrap_or(false)
}

fn exit_code(out: &Value) -> Option<i64> {
    out["exitCode"].as_i64()
}

/// The `/health` entry of each language of `debian.toml`, failing when one is not
/// offered (its toolchain is not installed: scripts/test-toolchains installs them).
async fn offered(runner: &Runner) -> Vec<(&'static Programs, Value)> {
    let health = runner.health().await;
    let languages = health["languages"].as_array().expect("languages");
    let find = |lang: &str| languages.iter().find(|l| l["name"] == lang).cloned();
    let missing: Vec<&str> = DEBIAN
        .iter()
        .filter(|p| find(p.lang).is_none())
        .map(|p| p.lang)
        .collect();
    assert!(
        missing.is_empty(),
        "not offered (run scripts/test-toolchains, which the test command runs): {missing:?}"
    );
    DEBIAN
        .iter()
        .filter_map(|p| find(p.lang).map(|info| (p, info)))
        .collect()
}

/// Runs the program `pick` gives (none: the language is skipped) of every language, with
/// `timeout_ms`, and fails listing every language whose answer `good` refuses (given its
/// programs, its `/health` entry and the answer).
async fn each_language(
    pick: fn(&Programs) -> Option<&'static str>,
    timeout_ms: u64,
    good: impl Fn(&Programs, &Value, &Value) -> bool,
) {
    let runner = Runner::start();
    let mut failures = Vec::new();
    for (programs, info) in offered(&runner).await {
        let Some(code) = pick(programs) else {
            continue;
        };
        let out = runner
            .run_with_timeout(programs.lang, code, Some(timeout_ms))
            .await;
        if !good(programs, &info, &out) {
            failures.push(format!("{}: {out}", programs.lang));
        }
    }
    let count = failures.len();
    assert!(count == 0, "{count} failed:\n{}", failures.join("\n"));
}

#[tokio::test]
async fn health_lists_debian_s_languages_after_the_built_in_ones_with_versions() {
    let runner = Runner::start();
    let health = runner.health().await;
    let listed = health["languages"].as_array().expect("languages");
    let names: Vec<&str> = listed.iter().filter_map(|l| l["name"].as_str()).collect();
    assert_eq!(names[..8], common::programs::LANGUAGES, "{names:?}");
    let expected: Vec<&str> = DEBIAN.iter().map(|p| p.lang).collect();
    assert_eq!(names[8..], expected, "in debian.toml's order");
    for (programs, info) in offered(&runner).await {
        let version = info["version"].as_str().unwrap_or_default();
        assert!(!version.is_empty() && version != programs.lang, "{info}");
        let compiled = info["compileTimeoutMs"].as_u64().unwrap_or(0) > 0;
        assert_eq!(compiled, programs.broken.is_some(), "{info}");
    }
}

#[tokio::test]
async fn hello_stdin_and_exit_code_in_every_debian_language() {
    each_language(|p| Some(p.hello), 20_000, said_hello).await;
}

#[tokio::test]
async fn a_compile_error_in_every_compiled_debian_language() {
    each_language(|p| p.broken, 20_000, did_not_compile).await;
}

#[tokio::test]
async fn the_timeout_ends_the_program_in_every_debian_language() {
    each_language(|p| Some(p.forever), 1000, timed_out).await;
}

#[tokio::test]
async fn the_memory_limit_holds_in_every_debian_language() {
    if common::without_resource_limits("the_memory_limit_holds_in_every_debian_language") {
        return;
    }
    // A minute: crystal's row has 1024 MiB to fill, after a compile of its own, at half a
    // CPU on a loaded machine (30 s was seen running out, in a CI beside other builds).
    each_language(|p| Some(p.hog), 60_000, stopped_at_the_limit).await;
}

/// `hello <lang>`, the empty stdin's 0, the exit code.
fn said_hello(programs: &Programs, _: &Value, out: &Value) -> bool {
    stdout(out) == format!("hello {}\n0\n", programs.lang)
        && exit_code(out) == Some(programs.exit)
        && !flag(out, "compileError")
        && !flag(out, "timedOut")
}

/// A compile error, with the compiler's words, nothing run.
fn did_not_compile(_: &Programs, _: &Value, out: &Value) -> bool {
    flag(out, "compileError")
        && !flag(out, "timedOut")
        && exit_code(out).is_some_and(|c| c != 0)
        && !(stderr(out).is_empty() && stdout(out).is_empty())
}

/// Killed at the second's timeout, which counts from the program's start (durationMs
/// covers the compile too, which has its own time).
fn timed_out(_: &Programs, info: &Value, out: &Value) -> bool {
    let compile_ms = info["compileTimeoutMs"].as_u64().unwrap_or(0);
    let ms = out["durationMs"].as_u64().unwrap_or(0);
    flag(out, "timedOut")
        && exit_code(out) == Some(137)
        && !flag(out, "compileError")
        && (1000..1000 + compile_ms + 10_000).contains(&ms)
}

/// Stopped by the memory limit: the kernel kills the program at the cgroup's limit; a
/// runtime that bounds its own heap by the sandbox's memory (the JVM's, SBCL's) stops it
/// first.
fn stopped_at_the_limit(_: &Programs, _: &Value, out: &Value) -> bool {
    let said = stderr(out);
    let own_limit = ["OutOfMemoryError", "Heap exhausted"]
        .iter()
        .any(|s| said.contains(s));
    (flag(out, "oomKilled") || own_limit)
        && !flag(out, "timedOut")
        && !flag(out, "compileError")
        && exit_code(out) != Some(0)
}
