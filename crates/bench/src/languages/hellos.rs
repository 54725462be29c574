//! The hello worlds the languages figure runs, and each one's direct command.
//!
//! The programs come from `tests/languages/hello-world.json`, which the Python SDK's
//! `run_code` test reads too. The eight built-in languages keep the direct commands
//! written here (a developer's usual command: `go run` with a warm cache, the JDK's
//! source launcher, TypeScript transpiled in a fresh node); every row of Debian's
//! toolchains (`debian.toml`) is run directly as the row runs it in a sandbox: its
//! compile command, then its run command, with its variables; a row that runs through
//! its loader only (groovy, kotlin) runs its toolchain's own command (`LOADER_ONLY`).

use anyhow::{ensure, Context};
use sandbox_protocol::language::{LanguageInfo, BUILD, FILE};
use serde::Deserialize;
use std::collections::BTreeMap;

/// What every hello world prints.
pub const EXPECTED: &str = "hello world\n";
/// The hello worlds, one per language the runner ships.
const PROGRAMS: &str = include_str!("../../../../tests/languages/hello-world.json");
/// The rows of Debian's toolchains, as the runner ships them.
const DEBIAN_ROWS: &str = include_str!("../../../runner/src/languages/debian.toml");
/// Stands for the bench's folder in a direct command's environment.
pub const ROOT: &str = "{root}";
/// Stands for the sandbox's memory in a row's commands.
const MEMORY: &str = "{memory_mb}";
/// A row that gives its compiler more than this (ms) is a slow compiler, left out in
/// smoke mode (the runner's default compile time).
const SLOW_COMPILE_MS: u64 = 30_000;
/// The package set's npm packages, where the direct TypeScript command finds the
/// compiler (the runner's default store: the bench starts it with a clean environment).
const NODE_MODULES: &str = "/var/lib/sandbox-runner/packages/current/node/node_modules";

/// A built-in language's direct command, written by hand.
struct BuiltinDirect {
    name: &'static str,
    file: &'static str,
    steps: &'static [&'static [&'static str]],
    env: &'static [(&'static str, &'static str)],
}

/// The direct commands of the languages the runner has built in, in its table's order.
const BUILTIN: [BuiltinDirect; 8] = [
    BuiltinDirect {
        name: "bash",
        file: "main.sh",
        steps: &[&["bash", "main.sh"]],
        env: &[],
    },
    BuiltinDirect {
        name: "python",
        file: "main.py",
        steps: &[&["python3", "main.py"]],
        env: &[],
    },
    BuiltinDirect {
        name: "node",
        file: "main.js",
        steps: &[&["node", "main.js"]],
        env: &[],
    },
    BuiltinDirect {
        name: "typescript",
        file: "main.ts",
        steps: &[&["node", "transpile.js", "main.ts"]],
        env: &[("NODE_PATH", NODE_MODULES)],
    },
    BuiltinDirect {
        name: "c",
        file: "main.c",
        steps: &[
            &[
                "gcc",
                "-O2",
                "-std=gnu17",
                "-Wall",
                "-o",
                "main",
                "main.c",
                "-lm",
            ],
            &["./main"],
        ],
        env: &[],
    },
    BuiltinDirect {
        name: "cpp",
        file: "main.cpp",
        steps: &[
            &[
                "g++",
                "-O2",
                "-std=gnu++17",
                "-Wall",
                "-o",
                "main",
                "main.cpp",
            ],
            &["./main"],
        ],
        env: &[],
    },
    BuiltinDirect {
        name: "go",
        file: "main.go",
        steps: &[&["go", "run", "main.go"]],
        env: &[
            ("GOCACHE", "{root}/go-build"),
            ("GOPATH", "{root}/go"),
            ("GOPROXY", "off"),
            ("GOFLAGS", "-buildvcs=false"),
            ("GOTELEMETRY", "off"),
        ],
    },
    BuiltinDirect {
        name: "java",
        file: "Main.java",
        steps: &[&["java", "Main.java"]],
        env: &[],
    },
];

/// The JVM options Debian's JVM rows give (`{memory_mb}` filled in per row).
const JVM_OPTIONS: &str = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:MaxRAM={memory_mb}m \
                           -XX:MaxRAMPercentage=50 -Xshare:auto";

/// The direct commands of Debian's rows that run through a loader only (no `run`
/// command of their own): the toolchain's own command, with the rows' JVM options.
const LOADER_ONLY: [BuiltinDirect; 2] = [
    BuiltinDirect {
        name: "groovy",
        file: "main.groovy",
        steps: &[&["groovy", FILE]],
        env: &[("JAVA_OPTS", JVM_OPTIONS)],
    },
    BuiltinDirect {
        name: "kotlin",
        file: "main.kt",
        steps: &[
            &[
                "kotlinc",
                "-nowarn",
                FILE,
                "-include-runtime",
                "-d",
                "{build}/main.jar",
            ],
            &["java", "-jar", "{build}/main.jar"],
        ],
        env: &[("JAVA_OPTS", JVM_OPTIONS)],
    },
];

/// One language's hello world and its direct command.
#[derive(Debug, Clone)]
pub struct Hello {
    /// The language's name in the runner's table.
    pub name: String,
    /// The program's file name (the runner's, in its home folder; the bench's, in the
    /// language's folder).
    pub file: String,
    /// The program.
    pub code: String,
    /// The direct command's steps, run one after the other in the language's folder:
    /// each must succeed, the last prints what every hello world prints. [`FILE`] and
    /// [`BUILD`] stand for the program and an emptied build folder in it.
    pub direct: Vec<Vec<String>>,
    /// Variables added to the direct command's clean environment ([`ROOT`] stands for
    /// the bench's folder).
    pub env: Vec<(String, String)>,
    /// Whether it runs through its own MCP tool (`run_<name>`) rather than `run_code`.
    pub own_tool: bool,
    /// Whether its row gives its compiler more than the default time (left out in smoke
    /// mode).
    pub slow_compiler: bool,
}

impl Hello {
    /// The direct command as a command line (`gcc ... main.c -lm && ./main`), with the
    /// program's file name and `build` for the placeholders.
    pub fn direct_line(&self) -> String {
        let steps: Vec<String> = self
            .direct
            .iter()
            .map(|step| {
                let args: Vec<String> = step.iter().map(|a| self.shown(a)).collect();
                args.join(" ")
            })
            .collect();
        steps.join(" && ")
    }

    /// An argument as a shell would need it: quoted when it holds anything but plain
    /// characters.
    fn shown(&self, arg: &str) -> String {
        let arg = arg.replace(FILE, &self.file).replace(BUILD, "build");
        let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=+,@%".contains(c);
        if !arg.is_empty() && arg.chars().all(plain) {
            arg
        } else {
            format!("'{}'", arg.replace('\'', r"'\''"))
        }
    }

    /// The MCP tool that runs it: `run_<name>`, or `run_code` for a language without a
    /// tool of its own.
    pub fn tool(&self) -> String {
        if self.own_tool {
            format!("run_{}", self.name)
        } else {
            "run_code".to_owned()
        }
    }
}

/// `tests/languages/hello-world.json`.
#[derive(Debug, Deserialize)]
struct ProgramFile {
    /// What every program prints.
    stdout: String,
    /// A program per language.
    programs: BTreeMap<String, String>,
}

/// `debian.toml`, the fields the direct command needs.
#[derive(Debug, Deserialize)]
struct DebianFile {
    language: Vec<DebianRow>,
}

/// One row of `debian.toml`, as far as the bench runs it.
#[derive(Debug, Deserialize)]
struct DebianRow {
    name: String,
    file: String,
    #[serde(default)]
    compile: Vec<String>,
    #[serde(default)]
    run: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    compile_timeout_ms: u64,
    #[serde(default)]
    memory_mb: Option<u64>,
}

/// Every hello world the bench knows, built-in languages first then Debian's rows, in
/// their tables' order; each prints [`EXPECTED`]. `memory_mb` is a sandbox's memory (a
/// row's commands may name it; a row's own is used when larger).
pub fn hellos(memory_mb: u64) -> anyhow::Result<Vec<Hello>> {
    let programs: ProgramFile =
        serde_json::from_str(PROGRAMS).context("reading tests/languages/hello-world.json")?;
    ensure!(
        programs.stdout == EXPECTED,
        "hello-world.json's programs print {:?}, the bench expects {EXPECTED:?}",
        programs.stdout
    );
    let rows: DebianFile = toml::from_str(DEBIAN_ROWS).context("reading debian.toml")?;
    let code = |name: &str| {
        programs
            .programs
            .get(name)
            .cloned()
            .with_context(|| format!("hello-world.json has no program for {name}"))
    };
    let mut hellos = Vec::new();
    for builtin in &BUILTIN {
        hellos.push(Hello {
            name: builtin.name.to_owned(),
            file: builtin.file.to_owned(),
            code: code(builtin.name)?,
            direct: owned_steps(builtin.steps),
            env: builtin
                .env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            own_tool: true,
            slow_compiler: false,
        });
    }
    for row in rows.language {
        let code = code(&row.name)?;
        let hello = from_row(row, code, memory_mb);
        ensure!(
            !hello.direct.is_empty(),
            "debian.toml's {} runs through its loader only, and the bench has no direct \
             command for it (LOADER_ONLY)",
            hello.name
        );
        hellos.push(hello);
    }
    Ok(hellos)
}

fn owned_steps(steps: &[&[&str]]) -> Vec<Vec<String>> {
    steps
        .iter()
        .map(|step| step.iter().map(|a| (*a).to_owned()).collect())
        .collect()
}

/// A row of Debian's toolchains run directly as it runs in a sandbox.
fn from_row(row: DebianRow, code: String, memory_mb: u64) -> Hello {
    let memory = row.memory_mb.unwrap_or(0).max(memory_mb).to_string();
    let fill = |arg: &str| arg.replace(MEMORY, &memory);
    let (steps, env) = match LOADER_ONLY.iter().find(|d| d.name == row.name) {
        Some(plain) if row.run.is_empty() => (
            owned_steps(plain.steps),
            plain
                .env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        _ => {
            let steps = [row.compile, row.run].into_iter().filter(|s| !s.is_empty());
            (steps.collect(), row.env.into_iter().collect::<Vec<_>>())
        }
    };
    Hello {
        direct: steps
            .iter()
            .map(|step| step.iter().map(|a| fill(a)).collect())
            .collect(),
        env: env.iter().map(|(k, v)| (k.clone(), fill(v))).collect(),
        name: row.name,
        file: row.file,
        code,
        own_tool: false,
        slow_compiler: row.compile_timeout_ms > SLOW_COMPILE_MS,
    }
}

/// The names of `hellos` that `offered` lacks, and the names of `offered` that have no
/// hello world.
pub fn unmatched(hellos: &[Hello], offered: &[LanguageInfo]) -> (Vec<String>, Vec<String>) {
    let offers = |name: &str| offered.iter().any(|l| l.name.as_str() == name);
    let knows = |name: &str| hellos.iter().any(|h| h.name == name);
    let not_offered = hellos
        .iter()
        .map(|h| h.name.clone())
        .filter(|name| !offers(name))
        .collect();
    let unknown = offered
        .iter()
        .map(|l| l.name.as_str())
        .filter(|name| !knows(name))
        .map(str::to_owned)
        .collect();
    (not_offered, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Hello> {
        hellos(512).unwrap()
    }

    #[test]
    fn every_language_shipped_has_a_hello_and_a_direct_command() {
        let hellos = all();
        assert!(hellos.len() >= 39, "{}", hellos.len());
        for (i, hello) in hellos.iter().enumerate() {
            assert!(!hello.direct.is_empty() && hello.direct.iter().all(|s| !s.is_empty()));
            assert!(hello.direct_line().contains(&hello.file), "{hello:?}");
            assert!(hellos[..i].iter().all(|h| h.name != hello.name));
            assert!(!hello.code.is_empty());
        }
        let c = &hellos[4];
        assert_eq!(
            c.direct_line(),
            "gcc -O2 -std=gnu17 -Wall -o main main.c -lm && ./main"
        );
        assert_eq!(c.tool(), "run_c");
    }

    #[test]
    fn a_debian_row_runs_as_in_the_sandbox() {
        let hellos = all();
        let find = |name: &str| hellos.iter().find(|h| h.name == name).unwrap();
        let rust = find("rust");
        assert_eq!(
            rust.direct_line(),
            "rustc --edition 2021 -C opt-level=1 -o build/main main.rs && build/main"
        );
        assert_eq!(rust.direct[1], ["{build}/main"]);
        assert_eq!(rust.tool(), "run_code");
        let kotlin = find("kotlin");
        assert!(kotlin.slow_compiler && !find("ruby").slow_compiler);
        assert!(
            kotlin.direct_line().starts_with("kotlinc -nowarn main.kt"),
            "a loader-only row runs its toolchain's own command: {}",
            kotlin.direct_line()
        );
        assert!(
            kotlin
                .env
                .iter()
                .any(|(k, v)| k == "JAVA_OPTS" && v.contains("-XX:MaxRAM=1024m")),
            "its own memory: {:?}",
            kotlin.env
        );
        assert!(find("clojure").direct_line().contains("-XX:MaxRAM=512m"));
        let ocaml = find("ocaml").direct_line();
        assert!(
            ocaml.starts_with("sh -c 'cp \"$1\" \"$2\"/main.ml && cd"),
            "quoted: {ocaml}"
        );
        assert!(
            ocaml.ends_with("' ocaml main.ml build && build/main"),
            "{ocaml}"
        );
        let erlang = find("erlang").direct_line();
        assert!(erlang.contains(r"printf '\''#!"), "{erlang}");
        let opts = &find("groovy").env[0];
        assert_eq!(opts.0, "JAVA_OPTS");
        assert!(opts.1.contains("-XX:MaxRAM=512m"), "{opts:?}");
    }

    #[test]
    fn unmatched_names_both_ways() {
        let hellos = all();
        let info = |name: &str| LanguageInfo {
            name: sandbox_protocol::Lang::new(name).unwrap(),
            version: "1".into(),
            file: "main".into(),
            compile: None,
            run: "x".into(),
            compile_timeout_ms: 0,
            warm: false,
            keeps_state: false,
            memory_mb: None,
        };
        let offered = [info("bash"), info("klingon")];
        let (not_offered, unknown) = unmatched(&hellos, &offered);
        assert_eq!(unknown, ["klingon"]);
        assert_eq!(not_offered.len(), hellos.len() - 1);
        assert!(!not_offered.contains(&"bash".to_owned()));
    }
}
