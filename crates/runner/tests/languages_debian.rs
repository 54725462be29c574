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

/// Fails listing every language's failure, when there is one.
fn assert_none(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn health_lists_debian_s_languages_after_the_built_in_ones_with_versions() {
    let runner = Runner::start();
    let health = runner.health().await;
    let names: Vec<&str> = health["languages"]
        .as_array()
        .expect("languages")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(&names[..8], common::programs::LANGUAGES, "{names:?}");
    let expected: Vec<&str> = DEBIAN.iter().map(|p| p.lang).collect();
    assert_eq!(&names[8..], expected, "in debian.toml's order");
    let mut failures = Vec::new();
    for (programs, info) in offered(&runner).await {
        let version = info["version"].as_str().unwrap_or_default();
        if version.is_empty() || version == programs.lang {
            failures.push(format!("{}: no version: {info}", programs.lang));
        }
        let compiled = info["compileTimeoutMs"].as_u64().unwrap_or(0) > 0;
        if compiled != programs.broken.is_some() {
            failures.push(format!("{}: compiled is {compiled}: {info}", programs.lang));
        }
    }
    assert_none(failures);
}

#[tokio::test]
async fn hello_stdin_and_exit_code_in_every_debian_language() {
    let runner = Runner::start();
    let mut failures = Vec::new();
    for (programs, _) in offered(&runner).await {
        let lang = programs.lang;
        let out = runner
            .run_with_timeout(lang, programs.hello, Some(20_000))
            .await;
        let good = stdout(&out) == format!("hello {lang}\n0\n")
            && exit_code(&out) == Some(programs.exit)
            && !flag(&out, "compileError")
            && !flag(&out, "timedOut");
        if !good {
            failures.push(format!("{lang}: {out}"));
        }
    }
    assert_none(failures);
}

#[tokio::test]
async fn a_compile_error_in_every_compiled_debian_language() {
    let runner = Runner::start();
    let mut failures = Vec::new();
    for (programs, _) in offered(&runner).await {
        let Some(broken) = programs.broken else {
            continue;
        };
        let lang = programs.lang;
        let out = runner.run(lang, broken).await;
        let good = flag(&out, "compileError")
            && !flag(&out, "timedOut")
            && exit_code(&out).is_some_and(|c| c != 0)
            && !(stderr(&out).is_empty() && stdout(&out).is_empty());
        if !good {
            failures.push(format!("{lang}: {out}"));
        }
    }
    assert_none(failures);
}

#[tokio::test]
async fn the_timeout_ends_the_program_in_every_debian_language() {
    let runner = Runner::start();
    let mut failures = Vec::new();
    for (programs, info) in offered(&runner).await {
        let lang = programs.lang;
        let out = runner
            .run_with_timeout(lang, programs.forever, Some(1000))
            .await;
        // durationMs covers the compile too, which has its own time.
        let compile_ms = info["compileTimeoutMs"].as_u64().unwrap_or(0);
        let ms = out["durationMs"].as_u64().unwrap_or(0);
        let good = flag(&out, "timedOut")
            && exit_code(&out) == Some(137)
            && !flag(&out, "compileError")
            && (1000..1000 + compile_ms + 10_000).contains(&ms);
        if !good {
            failures.push(format!("{lang}: {out}"));
        }
    }
    assert_none(failures);
}

#[tokio::test]
async fn the_memory_limit_holds_in_every_debian_language() {
    if common::without_resource_limits("the_memory_limit_holds_in_every_debian_language") {
        return;
    }
    let runner = Runner::start();
    let mut failures = Vec::new();
    for (programs, _) in offered(&runner).await {
        let lang = programs.lang;
        let out = runner
            .run_with_timeout(lang, programs.hog, Some(30_000))
            .await;
        // The kernel kills the program at the cgroup's limit; a runtime that bounds its
        // own heap by the sandbox's memory (the JVM's, SBCL's) stops it first.
        let said = stderr(&out);
        let own_limit = ["OutOfMemoryError", "Heap exhausted"]
            .iter()
            .any(|s| said.contains(s));
        let good = (flag(&out, "oomKilled") || own_limit)
            && !flag(&out, "timedOut")
            && !flag(&out, "compileError")
            && exit_code(&out) != Some(0);
        if !good {
            failures.push(format!("{lang}: {out}"));
        }
    }
    assert_none(failures);
}
