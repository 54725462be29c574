//! Languages as data: how the agent runs a program of one language ([`Recipe`], a row
//! of the runner's language table as the agent needs it), and how a runner tells its
//! clients what it offers ([`LanguageInfo`], in `GET /health`).
//!
//! A recipe's commands are argument vectors, run without a shell, in the home folder,
//! as the program's user. The agent fills in two placeholders in each argument:
//! [`FILE`] (the program's file, in the home folder) and [`BUILD`] (a folder made empty
//! for each run, under `/tmp`, for what a compiler writes).

use crate::Lang;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Stands for the program's file (`/home/sandbox/main.c`) in a command.
pub const FILE: &str = "{file}";
/// Stands for the run's build folder (`/tmp/.build`) in a command.
pub const BUILD: &str = "{build}";
/// Stands for the loader's source text in a [`Loader::command`].
pub const LOADER_SOURCE: &str = "{loader}";
/// Stands for the loader's source written to a file, in a [`Loader::command`].
pub const LOADER_FILE: &str = "{loader_file}";

/// How a sandbox runs programs of one language.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// The program's file name in the home folder (`main.c`, `Main.java`).
    pub file: String,
    /// The compile command, run before the program; empty: none. A compile that fails
    /// (or runs out of time) ends the run there, marked as a compile error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compile: Vec<String>,
    /// The run command. Empty when the language runs through its [`Loader`] only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run: Vec<String>,
    /// Variables added to the program's (and the compiler's) environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// How long the compile step may take, in milliseconds, on top of the run's own
    /// timeout (a loader's in-process compile included).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compile_timeout_ms: u64,
    /// The program started ahead of a job, which waits for it (a warm start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loader: Option<Loader>,
    /// The sandbox's memory for this language, in MiB, when its row asks for more than
    /// every sandbox has: the runner raises the sandbox's limit to it before the job
    /// (the agent does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A loader: a program of the agent's that starts the language's runtime ahead of the
/// job, readies what every program needs, then waits for the program on a pipe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loader {
    /// Which of the agent's loaders.
    pub kind: LoaderKind,
    /// The command that starts it: [`LOADER_SOURCE`] or [`LOADER_FILE`] stand for it.
    pub command: Vec<String>,
}

/// The agent's loaders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoaderKind {
    /// CPython, with the warm imports; a session's interpreter keeps its globals.
    Python,
    /// Node.js; a session's context keeps its globals.
    Node,
    /// Node.js with the TypeScript compiler loaded: a program's types are stripped
    /// (transpiled, not checked) before it runs as Node would run it.
    Typescript,
    /// A JVM with the Java compiler loaded: the program is compiled in memory, then its
    /// `main` runs in the same JVM.
    Java,
    /// Ruby; a session's interpreter keeps its top-level binding (local variables,
    /// methods, constants, requires).
    Ruby,
    /// Lua; a session's interpreter keeps its globals (a chunk's `local`s end with it,
    /// as in Lua's own REPL).
    Lua,
    /// Perl; a session's interpreter keeps its subs, package variables and modules (a
    /// file's `my` variables end with it).
    Perl,
    /// A JVM with Clojure loaded (its command names the jar): the program runs as
    /// `clojure.main main.clj` runs it, in the same JVM; a session's runs share one JVM
    /// and namespace, which keep their definitions.
    Clojure,
    /// A JVM with Groovy's compiler and runtime loaded: the program is compiled (a
    /// syntax error is a compile error), then runs as `groovy main.groovy` runs it.
    Groovy,
    /// A JVM with the Kotlin compiler loaded: the program is compiled in it, then its
    /// main class runs in the same JVM.
    Kotlin,
}

impl LoaderKind {
    /// Whether the loader compiles the program (and may report a compile error).
    pub fn compiles(self) -> bool {
        matches!(
            self,
            LoaderKind::Typescript | LoaderKind::Java | LoaderKind::Groovy | LoaderKind::Kotlin
        )
    }

    /// Whether a session's runs share one process of it, keeping its state.
    pub fn resident(self) -> bool {
        !matches!(
            self,
            LoaderKind::Java | LoaderKind::Groovy | LoaderKind::Kotlin
        )
    }
}

/// A language as `GET /health` lists it: what a client needs to offer and describe it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LanguageInfo {
    /// The name a run's `lang` gives.
    pub name: Lang,
    /// The toolchain's version, as it reports it (`gcc 12.2.0`).
    pub version: String,
    /// The program's file name in the home folder.
    pub file: String,
    /// How the program is compiled, as a command line (absent: it is not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile: Option<String>,
    /// How it runs, as a command line or a sentence.
    pub run: String,
    /// Time a compile may take on top of the run's timeout, in milliseconds.
    #[serde(default)]
    pub compile_timeout_ms: u64,
    /// Whether the runtime is started ahead of the program.
    #[serde(default)]
    pub warm: bool,
    /// Whether a session's runs of it share one process, which keeps their variables.
    #[serde(default)]
    pub keeps_state: bool,
    /// The memory of a sandbox running it (compile and program), in MiB (absent from
    /// runners older than this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
}

/// The longest a run keeps its sandbox busy: its language's compile timeout (zero for a
/// language without a compile step) and its own timeout, which counts from the program's
/// start. The runner waits this long for the agent's report (and its backend's grace);
/// a caller adds the runner's allowances ([`crate::api::Limits::answer_within`]).
pub fn run_time(timeout_ms: u64, compile_timeout_ms: u64) -> Duration {
    Duration::from_millis(timeout_ms.saturating_add(compile_timeout_ms))
}

/// Whether a program declares inline dependencies: a line `# /// script` opens a PEP 723
/// block (the runner reads it whole; this only tells whether there is one to read).
pub fn declares_dependencies(code: &str) -> bool {
    code.lines().any(|line| line.trim_end() == "# /// script")
}

/// The languages every runner offered before runners listed theirs.
pub fn classic() -> Vec<LanguageInfo> {
    let info = |name: Lang, version: &str, file: &str, warm: bool| LanguageInfo {
        run: format!("{} {file}", if warm { version } else { "bash" }),
        name,
        version: version.to_owned(),
        file: file.to_owned(),
        compile: None,
        compile_timeout_ms: 0,
        warm,
        keeps_state: warm,
        memory_mb: None,
    };
    vec![
        info(Lang::BASH, "bash", "main.sh", false),
        info(Lang::PYTHON, "python3", "main.py", true),
        info(Lang::NODE, "node", "main.js", true),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_block_is_told_by_its_opening_line() {
        assert!(declares_dependencies(
            "# /// script\n# dependencies = []\n# ///\n"
        ));
        assert!(declares_dependencies("import x\n# /// script  \n"));
        assert!(!declares_dependencies("print('# /// script')\n"));
        assert!(!declares_dependencies("# /// scripts\n"));
        let limits = crate::api::Limits {
            dependencies_timeout_ms: 7_000,
            ..crate::api::Limits::default()
        };
        let block = "# /// script\n# dependencies = [\"x\"]\n# ///\n";
        assert_eq!(
            limits.code_allowance("python", block),
            std::time::Duration::from_secs(7)
        );
        assert_eq!(
            limits.code_allowance("bash", block),
            std::time::Duration::ZERO
        );
        assert_eq!(
            limits.code_allowance("python", "print(1)"),
            std::time::Duration::ZERO
        );
        let old: crate::api::Limits = serde_json::from_str(
            &serde_json::to_string(&crate::api::Limits::default())
                .unwrap()
                .replace(",\"dependenciesTimeoutMs\":120000", ""),
        )
        .unwrap();
        assert_eq!(
            old.dependencies_timeout_ms, 120_000,
            "an older runner's assumed"
        );
    }

    #[test]
    fn recipes_round_trip_and_loaders_say_what_they_do() {
        let c = Recipe {
            file: "main.c".into(),
            compile: vec![
                "gcc".into(),
                FILE.into(),
                "-o".into(),
                "{build}/main".into(),
            ],
            run: vec!["{build}/main".into()],
            env: BTreeMap::new(),
            compile_timeout_ms: 30_000,
            loader: None,
            memory_mb: None,
        };
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Recipe>(&text).unwrap(), c);
        let java = Recipe {
            file: "Main.java".into(),
            compile: Vec::new(),
            run: Vec::new(),
            env: BTreeMap::new(),
            compile_timeout_ms: 30_000,
            loader: Some(Loader {
                kind: LoaderKind::Java,
                command: vec!["java".into(), LOADER_FILE.into()],
            }),
            memory_mb: None,
        };
        let text = serde_json::to_string(&java).unwrap();
        assert_eq!(serde_json::from_str::<Recipe>(&text).unwrap(), java);
        assert!(LoaderKind::Java.compiles() && !LoaderKind::Java.resident());
        for interpreter in [LoaderKind::Ruby, LoaderKind::Lua, LoaderKind::Perl] {
            assert!(interpreter.resident() && !interpreter.compiles());
        }
        let ruby: Loader =
            serde_json::from_str(r#"{"kind": "ruby", "command": ["ruby", "-e", "{loader}"]}"#)
                .unwrap();
        assert_eq!(ruby.kind, LoaderKind::Ruby);
        // A syntax error in Groovy, a type error in Kotlin is a compile error; Clojure
        // compiles form by form as it runs, so its errors are the run's.
        assert!(LoaderKind::Groovy.compiles() && LoaderKind::Kotlin.compiles());
        assert!(!LoaderKind::Clojure.compiles());
        let kinds: Vec<LoaderKind> = serde_json::from_str(r#"["groovy", "kotlin"]"#).unwrap();
        assert!(kinds.iter().all(|k| !k.resident()), "{kinds:?}");
        assert!(
            LoaderKind::Clojure.resident(),
            "a session keeps its definitions"
        );
    }

    #[test]
    fn a_runs_time_is_its_compile_timeout_and_its_own() {
        assert_eq!(run_time(15_000, 30_000), Duration::from_secs(45));
        assert_eq!(run_time(1, 0), Duration::from_millis(1));
        assert_eq!(run_time(u64::MAX, 1), Duration::from_millis(u64::MAX));
    }
}
