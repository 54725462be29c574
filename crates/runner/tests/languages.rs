//! Every built-in language through the real runner and real toolchains: hello, a
//! program that reads the empty stdin, exit codes, compile errors, timeouts and the
//! memory limit; the table in `/health`; an operator's languages file; sessions of a
//! compiled language and of TypeScript; and hostile programs aimed at the compile step.
//! The same programs (tests/common/programs.rs) run in a guest in tests/vm/, one language
//! after the other with TCG's longer compile timeouts.

mod common;

use common::programs::{broken, forever, hello, hog, COMPILED, LANGUAGES};
use common::{exit_code, stderr, stdout, Options, Runner};
use serde_json::{json, Value};
use std::io::Write;

fn flag(out: &Value, name: &str) -> bool {
    out[name]
        .as_bool()
        .unwrap_or_else(|| panic!("{name} is a boolean in {out}"))
}

fn duration(out: &Value) -> u64 {
    out["durationMs"].as_u64().expect("durationMs")
}

/// A runner with `languages` as its operator's file.
fn runner_with_languages(languages: &str) -> (Runner, tempfile::NamedTempFile) {
    let mut file = tempfile::NamedTempFile::new().expect("a temp file");
    file.write_all(languages.as_bytes()).expect("written");
    let path = file.path().to_string_lossy().into_owned();
    let runner = Runner::with(Options {
        env: vec![("RUNNER_LANGUAGES".into(), path)],
        ..Options::default()
    });
    (runner, file)
}

#[tokio::test]
async fn health_lists_the_eight_languages_with_their_toolchains() {
    common::require_packages();
    let runner = Runner::start();
    let health = runner.health().await;
    let languages = health["languages"].as_array().expect("languages");
    let names: Vec<&str> = languages
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    // Debian's languages follow, where the host has their toolchains
    // (languages_debian.rs).
    assert_eq!(names[..8], LANGUAGES, "{health}");
    for language in &languages[..8] {
        let name = language["name"].as_str().unwrap_or_default();
        assert!(
            !language["version"].as_str().unwrap_or_default().is_empty(),
            "{language}"
        );
        let compiled = COMPILED.contains(&name);
        assert_eq!(language["compileTimeoutMs"].as_u64().unwrap() > 0, compiled);
    }
    let c = &languages[4];
    assert_eq!(c["file"], "main.c");
    assert!(c["compile"].as_str().unwrap().starts_with("gcc "), "{c}");
    assert_eq!(languages[7]["warm"], true, "java starts warm");
    assert_eq!(
        languages[3]["keepsState"], true,
        "typescript keeps a session's state"
    );
}

#[tokio::test]
async fn hello_stdin_and_exit_code_in_every_language() {
    common::require_packages();
    let runner = Runner::start();
    for lang in LANGUAGES {
        let out = runner.run(lang, hello(lang)).await;
        assert_eq!(stdout(&out), format!("hello {lang}\n0\n"), "{lang}: {out}");
        assert_eq!(exit_code(&out), 3, "{lang}: {out}");
        assert!(!flag(&out, "compileError"), "{lang}: {out}");
        assert!(!flag(&out, "timedOut"), "{lang}: {out}");
    }
}

#[tokio::test]
async fn a_compile_error_is_told_apart_from_a_failed_run() {
    common::require_packages();
    let runner = Runner::start();
    for lang in COMPILED {
        let out = runner.run(lang, broken(lang)).await;
        assert!(flag(&out, "compileError"), "{lang}: {out}");
        assert_ne!(exit_code(&out), 0, "{lang}: {out}");
        assert!(
            !stderr(&out).is_empty(),
            "{lang}: the compiler's diagnostics: {out}"
        );
        assert_eq!(stdout(&out), "", "{lang}: nothing ran: {out}");
    }
    // A program that compiles and then fails is a failed run, not a compile error; a
    // script's syntax error is its interpreter's failure.
    let out = runner.run("c", "int main(void) { return 9; }\n").await;
    assert_eq!((exit_code(&out), flag(&out, "compileError")), (9, false));
    let out = runner.run("python", "def f(:\n").await;
    assert!(!flag(&out, "compileError") && exit_code(&out) == 1, "{out}");
    // Warnings of a program that compiles come first on stderr, as in a terminal.
    let out = runner
        .run("c", "int main(void) { int unused; return 0; }\n")
        .await;
    assert!(stderr(&out).contains("unused"), "{out}");
    assert!(!flag(&out, "compileError"), "{out}");
}

#[tokio::test]
async fn the_timeout_ends_the_program_in_every_language_not_its_compile() {
    common::require_packages();
    let runner = Runner::start();
    for lang in LANGUAGES {
        let out = runner
            .run_with_timeout(lang, forever(lang), Some(1000))
            .await;
        assert!(flag(&out, "timedOut"), "{lang}: {out}");
        assert_eq!(exit_code(&out), 137, "{lang}: {out}");
        assert!(!flag(&out, "compileError"), "{lang}: {out}");
        // The second counts from the program's start: a compile before it is not in it.
        let ms = duration(&out);
        assert!(ms >= 1000, "{lang}: ran {ms} ms: {out}");
        assert!(ms < 1000 + 31_000, "{lang}: ran {ms} ms: {out}");
    }
}

#[tokio::test]
async fn the_memory_limit_holds_in_every_language() {
    common::require_packages();
    if common::without_resource_limits("the_memory_limit_holds_in_every_language") {
        return;
    }
    let runner = Runner::start();
    for lang in LANGUAGES {
        let out = runner.run_with_timeout(lang, hog(lang), Some(20_000)).await;
        // The kernel kills the program at the cgroup's limit; a JVM's own heap (half of
        // the sandbox's memory) stops it first, with an OutOfMemoryError.
        let stopped = flag(&out, "oomKilled") || stderr(&out).contains("OutOfMemoryError");
        assert!(stopped, "{lang}: {out}");
        assert_ne!(exit_code(&out), 0, "{lang}: {out}");
        assert!(!stdout(&out).contains("629145600"), "{lang}: {out}");
    }
}

#[tokio::test]
async fn an_unknown_language_gets_a_400_naming_the_offered_ones() {
    let runner = Runner::start();
    for lang in ["klingon", "C++", "", "Python"] {
        let (status, out) = runner.post(&json!({"lang": lang, "code": "x"})).await;
        assert_eq!(status, 400, "{lang}: {out}");
        let message = out["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("bash, python, node"), "{message}");
        assert!(message.contains(&format!("{lang:?}")), "{message}");
    }
}

#[tokio::test]
async fn an_operator_file_adds_and_removes_languages() {
    if !std::path::Path::new("/usr/bin/perl").exists() {
        panic!("perl is part of every Debian system; this test needs /usr/bin/perl");
    }
    let (runner, _file) = runner_with_languages(
        r#"
remove = ["go"]

[[language]]
name = "perl"
file = "main.pl"
run = ["perl", "{file}"]
requires = ["/usr/bin/perl"]
version = ["perl", "-e", "print qq(Perl $^V\n)"]

[[language]]
name = "nowhere"
file = "main.x"
run = ["/nonexistent/x", "{file}"]
requires = ["/nonexistent/x"]
"#,
    );
    let health = runner.health().await;
    let names: Vec<&str> = health["languages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert!(names.contains(&"perl"), "{names:?}");
    assert!(!names.contains(&"go"), "removed: {names:?}");
    assert!(
        !names.contains(&"nowhere"),
        "no toolchain, not offered: {names:?}"
    );
    let perl = health["languages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "perl")
        .unwrap();
    assert!(
        perl["version"].as_str().unwrap().starts_with("Perl v5"),
        "{perl}"
    );
    let out = runner.run("perl", "print \"hello perl\\n\"; exit 4;").await;
    assert_eq!((stdout(&out), exit_code(&out)), ("hello perl\n", 4));
    let (status, out) = runner
        .post(&json!({"lang": "go", "code": "package main"}))
        .await;
    assert_eq!(status, 400, "{out}");
}

#[tokio::test]
async fn a_bad_languages_file_stops_the_runner_with_the_reason() {
    let mut file = tempfile::NamedTempFile::new().expect("a temp file");
    file.write_all(b"[[language]]\nname = \"C++\"\nfile = \"a\"\nrun = [\"x\"]\n")
        .expect("written");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox-runner"))
        .args(["serve", "--no-auth", "--listen", "127.0.0.1:0"])
        .env("RUNNER_LANGUAGES", file.path())
        .output()
        .expect("the runner ran");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("RUNNER_LANGUAGES") && said.contains("not a language name"),
        "{said}"
    );
}

#[tokio::test]
async fn a_compile_that_never_ends_stops_at_the_compile_timeout() {
    // Constant evaluation that takes g++ minutes in little memory: the compile step, not
    // the run, runs out of time.
    let (runner, _file) = runner_with_languages(
        r#"
[[language]]
name = "cpp"
file = "main.cpp"
compile = ["g++", "-o", "{build}/main", "{file}"]
run = ["{build}/main"]
compile_timeout_ms = 2000
requires = ["/usr/bin/g++"]
"#,
    );
    let endless = "constexpr long spin() {\n  long s = 0;\n  \
                   for (long i = 0; i < 200000; i++)\n    for (long j = 0; j < 200000; j++) s += j;\n  \
                   return s;\n}\nstatic_assert(spin() != 1);\nint main() {}\n";
    let out = runner.run_with_timeout("cpp", endless, Some(60_000)).await;
    assert!(flag(&out, "compileError"), "{out}");
    assert!(flag(&out, "timedOut"), "{out}");
    assert!(duration(&out) < 10_000, "{out}");
    // A compile that eats the memory is stopped by the sandbox's limit.
    let out = runner
        .run("cpp", "#include \"/dev/zero\"\nint main() {}\n")
        .await;
    assert!(
        flag(&out, "compileError") && flag(&out, "oomKilled"),
        "{out}"
    );
    // The sandbox's processes went with them: a new run works.
    let out = runner.run("cpp", "int main() { return 0; }\n").await;
    assert_eq!(exit_code(&out), 0, "{out}");
}

/// A row may give its sandboxes more memory than every sandbox has (a toolchain that
/// needs it): its programs get it, the other languages' do not.
#[tokio::test]
async fn a_row_with_more_memory_gets_it_and_the_others_keep_theirs() {
    common::require_packages();
    if common::without_resource_limits("a_row_with_more_memory_gets_it_and_the_others_keep_theirs")
    {
        return;
    }
    let (runner, _file) = runner_with_languages(
        r#"
[[language]]
name = "bigpython"
file = "main.py"
run = ["python3", "{file}"]
loader = { kind = "python", command = ["python3", "-c", "{loader}"] }
memory_mb = 640
requires = ["/usr/bin/python3"]
version = ["python3", "--version"]
"#,
    );
    let health = runner.health().await;
    let memory = |name: &str| {
        health["languages"]
            .as_array()
            .and_then(|all| all.iter().find(|l| l["name"] == name))
            .map(|l| l["memoryMb"].clone())
    };
    assert_eq!(memory("bigpython"), Some(json!(640)), "{health}");
    assert_eq!(memory("python"), Some(json!(256)), "{health}");
    let big = "b = bytearray(400 << 20)\nprint(len(b))";
    let out = runner
        .run_with_timeout("bigpython", big, Some(20_000))
        .await;
    assert_eq!(stdout(&out), "419430400\n", "{out}");
    assert!(!flag(&out, "oomKilled"), "{out}");
    let beyond = "b = bytearray(800 << 20)\nprint(len(b))";
    let out = runner
        .run_with_timeout("bigpython", beyond, Some(20_000))
        .await;
    assert!(flag(&out, "oomKilled"), "its own limit holds: {out}");
    let out = runner.run_with_timeout("python", big, Some(20_000)).await;
    assert!(flag(&out, "oomKilled"), "python keeps 256 MiB: {out}");
}

#[tokio::test]
async fn a_java_program_cannot_forge_its_compile_report() {
    common::require_packages();
    let runner = Runner::start();
    // The loader said "compiled" before the program ran: what the program writes on the
    // report pipe afterwards is not read.
    let forged = "import java.io.*;\n\
        public class Main { public static void main(String[] a) throws Exception {\n\
          try (OutputStream o = new FileOutputStream(\"/proc/self/fd/4\")) {\n\
            o.write(\"{\\\"compiled\\\":false}\\n\".getBytes());\n\
          } catch (Exception e) { System.out.println(\"no pipe: \" + e.getMessage()); }\n\
          System.out.println(\"ran\");\n} }\n";
    let out = runner.run("java", forged).await;
    assert!(stdout(&out).ends_with("ran\n"), "{out}");
    assert!(!flag(&out, "compileError"), "{out}");
    assert_eq!(exit_code(&out), 0, "{out}");
}

#[tokio::test]
async fn a_session_compiles_each_run_and_keeps_its_files() {
    common::require_packages();
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    // A hostile run first: the build folder made a symlink into the home folder, with a
    // file there that must survive the next compile.
    let out = runner
        .ok_in(
            &id,
            "bash",
            "echo keep > /home/sandbox/keep.txt; ln -s /home/sandbox /tmp/.build; ls /tmp/.build/",
        )
        .await;
    assert!(stdout(&out).contains("keep.txt\n"), "{out}");
    let write = "#include <stdio.h>\nint main(void) {\n  FILE *f = fopen(\"data.txt\", \"w\");\n  \
                 fputs(\"41\", f);\n  fclose(f);\n  puts(\"written\");\n  return 0;\n}\n";
    let out = runner.ok_in(&id, "c", write).await;
    assert_eq!(stdout(&out), "written\n", "{out}");
    let read = "#include <stdio.h>\nint main(void) {\n  int n;\n  FILE *f = fopen(\"data.txt\", \"r\");\n  \
                fscanf(f, \"%d\", &n);\n  printf(\"%d\\n\", n + 1);\n  return 0;\n}\n";
    let out = runner.ok_in(&id, "c", read).await;
    assert_eq!(stdout(&out), "42\n", "{out}");
    let out = runner.ok_in(&id, "bash", "cat keep.txt; ls").await;
    assert!(stdout(&out).starts_with("keep\n"), "{out}");
    assert!(
        !stdout(&out).contains("main\n"),
        "the binary is not in the home folder: {out}"
    );
    let out = runner.ok_in(&id, "java", hello("java")).await;
    assert_eq!(stdout(&out), "hello java\n0\n", "{out}");
    let out = runner.ok_in(&id, "java", broken("java")).await;
    assert!(flag(&out, "compileError"), "{out}");
    runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
}

#[tokio::test]
async fn a_typescript_session_keeps_its_variables() {
    common::require_packages();
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    runner
        .ok_in(
            &id,
            "typescript",
            "const base: number = 41;\nfunction next(n: number): number { return n + 1; }",
        )
        .await;
    let out = runner
        .ok_in(&id, "typescript", "console.log(next(base));")
        .await;
    assert_eq!(stdout(&out), "42\n", "{out}");
    assert_eq!(out["stateLost"], false, "{out}");
    let out = runner.ok_in(&id, "typescript", broken("typescript")).await;
    assert!(flag(&out, "compileError"), "{out}");
    assert_eq!(
        out["stateLost"], false,
        "a compile error keeps the session: {out}"
    );
    let out = runner
        .ok_in(&id, "typescript", "console.log(base as number);")
        .await;
    assert_eq!(stdout(&out), "41\n", "{out}");
    runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
}

#[tokio::test]
async fn java_runs_the_first_class_whatever_its_name_or_package() {
    common::require_packages();
    let runner = Runner::start();
    for (code, expected) in [
        // Named like the loader's own class: the program's class is the one that runs.
        (
            "class SandboxLoader { public static void main(String[] a) { System.out.println(\"mine\"); } }\n\
             class Other { }\n",
            "mine\n",
        ),
        (
            "package demo.app;\npublic class Hello {\n  public static void main(String[] a) {\n    \
             System.out.println(Hello.class.getName() + \" \" + Helper.twice(21));\n  }\n}\n\
             class Helper { static int twice(int n) { return 2 * n; } }\n",
            "demo.app.Hello 42\n",
        ),
        (
            "public class Main {\n  public static void main(String[] a) throws Exception {\n    \
             Thread t = new Thread(() -> System.out.println(\"from a thread\"));\n    \
             t.start();\n    t.join();\n    throw new IllegalStateException(\"boom\");\n  }\n}\n",
            "from a thread\n",
        ),
    ] {
        let out = runner.run("java", code).await;
        assert_eq!(stdout(&out), expected, "{out}");
        assert!(!flag(&out, "compileError"), "{out}");
    }
    let out = runner
        .run("java", "public class Main { public static void main(String[] a) { throw new IllegalStateException(\"boom\"); } }\n")
        .await;
    assert_eq!(exit_code(&out), 1, "{out}");
    let trace = stderr(&out);
    assert!(
        trace.starts_with("Exception in thread \"main\" java.lang.IllegalStateException: boom"),
        "{out}"
    );
    assert!(
        !trace.contains("SandboxLoader"),
        "the loader's frames are not shown: {out}"
    );
}

#[tokio::test]
async fn a_shared_toolchain_path_is_read_only_and_private() {
    let runner = Runner::start();
    let code = "ls /etc/java-17-openjdk/security >/dev/null && echo seen; \
                touch /etc/java-17-openjdk/planted 2>/dev/null && echo wrote; \
                rm -f /etc/java-17-openjdk/security/java.security 2>/dev/null && echo removed; \
                echo done";
    let out = runner.run("bash", code).await;
    assert_eq!(stdout(&out), "seen\ndone\n", "{out}");
    assert!(!std::path::Path::new("/etc/java-17-openjdk/planted").exists());
    assert!(std::path::Path::new("/etc/java-17-openjdk/security/java.security").exists());
}
