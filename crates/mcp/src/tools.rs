//! The run tools, one per language the runner offers among those the operator lists
//! ([`crate::language_tools`]; `run_bash`, `run_python`, `run_c`, ...; `run_code`, for
//! all of them, is [`crate::run_code`]'s): their definitions (schemas, descriptions, annotations), written from
//! the runner's language table, and the parsing of a call's arguments; which tool a
//! name stands for ([`ToolKind`]). The sandbox tools are in [`crate::sandbox_tools`], those
//! that pause, snapshot and fork sandboxes in [`crate::snapshot_tools`], the process tools
//! in [`crate::process_tools`].

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool};
use sandbox_protocol::api::{Limits, Packages};
use sandbox_protocol::language::LanguageInfo;
use sandbox_protocol::Lang;
use serde_json::{json, Value};

pub use crate::args_error::ArgsError;
use crate::installed;
use crate::process_tools::ProcessTool;
use crate::run_code;
use crate::run_schema;
use crate::sandbox_tools::SandboxTool;
use crate::snapshot_tools::SnapshotTool;
use crate::wording::{bytes, sandbox_resources};

/// What a tool name stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolKind {
    /// `run_<language>`.
    Run(Lang),
    /// `run_code`, for any offered language (see [`crate::run_code`]).
    RunCode,
    /// One of the sandbox tools.
    Sandbox(SandboxTool),
    /// One of the process tools.
    Process(ProcessTool),
    /// One of the tools that pause, snapshot and fork sandboxes.
    Snapshot(SnapshotTool),
    /// `search_tools` (where upstreams are configured).
    SearchTools,
}

impl ToolKind {
    /// The tool a name stands for, among `run_code`, the run tools of `languages`, the sandbox tools,
    /// the tools that pause, snapshot and fork them, the process tools and search_tools.
    pub fn of(name: &str, languages: &[LanguageInfo]) -> Option<Self> {
        if name == run_code::NAME {
            return Some(ToolKind::RunCode);
        }
        lang_of(name, languages)
            .map(ToolKind::Run)
            .or_else(|| SandboxTool::of(name).map(ToolKind::Sandbox))
            .or_else(|| SnapshotTool::of(name).map(ToolKind::Snapshot))
            .or_else(|| ProcessTool::of(name).map(ToolKind::Process))
            .or_else(|| (name == SEARCH_TOOLS).then_some(ToolKind::SearchTools))
    }
}

/// The name of `search_tools` (see [`crate::search_tool`]).
pub const SEARCH_TOOLS: &str = "search_tools";

/// The tool's name for a language.
pub fn tool_name(lang: &Lang) -> String {
    format!("run_{lang}")
}

/// The language among `languages` that a tool name stands for.
pub fn lang_of(name: &str, languages: &[LanguageInfo]) -> Option<Lang> {
    let lang = name.strip_prefix("run_")?;
    languages
        .iter()
        .find(|l| l.name.as_str() == lang)
        .map(|l| l.name.clone())
}

/// A language's name as people write it.
pub fn display_name(lang: &Lang) -> String {
    match lang.as_str() {
        "bash" => "bash".into(),
        "python" => "Python".into(),
        "node" => "Node.js".into(),
        "typescript" => "TypeScript".into(),
        "c" => "C".into(),
        "cpp" => "C++".into(),
        "go" => "Go".into(),
        "java" => "Java".into(),
        "csharp" => "C#".into(),
        "commonlisp" => "Common Lisp".into(),
        "sql" => "SQL (SQLite)".into(),
        "php" | "cobol" => lang.as_str().to_uppercase(),
        "ocaml" => "OCaml".into(),
        "r" | "d" | "rust" | "ruby" | "perl" | "lua" | "haskell" | "erlang" | "elixir"
        | "fortran" | "pascal" | "nim" | "crystal" | "clojure" | "groovy" | "kotlin" | "racket"
        | "scheme" | "tcl" | "prolog" | "octave" | "ada" | "forth" => capitalized(lang.as_str()),
        other => other.into(),
    }
}

/// `word` with its first letter in upper case.
fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// "a Python program", "a bash script".
fn a_program(info: &LanguageInfo) -> String {
    match info.name.as_str() {
        "bash" => "a bash script".into(),
        "node" => "a Node.js program (CommonJS or ES module)".into(),
        _ => {
            let name = display_name(&info.name);
            // "an Ada program", "an R program".
            let vowel = matches!(name.chars().next(), Some('A' | 'E' | 'I' | 'O' | 'U'));
            let article = if vowel || name == "R" { "an" } else { "a" };
            format!("{article} {name} program")
        }
    }
}

/// How the program is run, from the runner's table: its file, the compile step, the
/// run command, and the toolchain's version.
fn how_it_runs(info: &LanguageInfo) -> String {
    let run = match &info.compile {
        Some(compile) => format!(
            "it is saved as {file} and compiled with `{compile}` (a compile error comes back \
             as the compiler's output with compileError true, and nothing runs), then run \
             as `{run}`",
            file = info.file,
            run = info.run,
        ),
        None if info.run.contains(' ') && !info.run.contains(&info.file) => {
            format!("it is saved as {}: {}", info.file, info.run)
        }
        None => format!("it is saved as {} and run as `{}`", info.file, info.run),
    };
    format!("Toolchain: {}; {run}.", info.version)
}

/// What a sandbox keeps for the next call of `info`'s language with the same sandboxId.
fn kept(info: &LanguageInfo) -> String {
    let files = "its files (in /home/sandbox and /tmp)";
    match info.name.as_str() {
        "python" => format!("{files} and its Python variables, functions and imports"),
        "bash" => format!("{files} and the processes it leaves running in the background"),
        "ruby" if info.keeps_state => {
            format!("{files} and its Ruby local variables, methods, constants and requires")
        }
        _ if info.keeps_state => format!(
            "{files} and its {} global variables and functions",
            display_name(&info.name)
        ),
        _ => format!(
            "{files} and the processes it leaves running in the background (each call \
             compiles and runs its program anew)"
        ),
    }
}

fn description(info: &LanguageInfo, limits: &Limits, default_timeout_ms: u64) -> String {
    let program = a_program(info);
    // A language whose row gives it more memory says so.
    let own = Limits {
        memory_mb: info.memory_mb.unwrap_or(limits.memory_mb),
        ..limits.clone()
    };
    let compile = match info.compile_timeout_ms {
        0 => String::new(),
        ms => format!(" Compiling may take up to {ms} ms more."),
    };
    format!(
        "Runs {program} in an isolated sandbox and returns its stdout, stderr and exit code. \
         Without sandboxId (the default) every call gets a fresh sandbox and nothing is kept \
         between calls (no files, variables or installed packages), so send the complete \
         program each time. With the sandboxId of a sandbox from create_sandbox (for \
         multi-step work), the program runs in that sandbox and {kept} remain for the next \
         call with the same sandboxId. Files the program writes under /home/sandbox/outputs/ \
         come back with the result (images as images). The sandbox has {resources}. \
         The program is killed after timeoutMs \
         (default {default_timeout_ms} ms, at most {max} ms). Each output stream is capped at \
         {cap} (the program is stopped there), and long output is shown as its first and \
         last lines with the number of lines and bytes left out. Print the results you want to see. \
         A run answers only once its program has ended: for a server, a long job, or anything \
         to watch while it runs or to feed input, use start_process in a sandbox \
         instead.{compile} {how}",
        kept = kept(info),
        how = how_it_runs(info),
        resources = sandbox_resources(&own),
        max = limits.max_timeout_ms,
        cap = bytes(limits.output_cap_bytes),
    )
}

fn input_schema(info: &LanguageInfo, limits: &Limits, default_timeout_ms: u64) -> Arc<JsonObject> {
    let program = a_program(info);
    let code = json!({
        "code": {
            "type": "string",
            "description": format!("The complete source of {program}."),
        },
    });
    let code = code.as_object().cloned().unwrap_or_default();
    run_schema::input_schema(code, &["code"], limits, default_timeout_ms)
}

/// The definition of one language's tool as `tools/list` shows it, for a runner with
/// `limits`.
pub fn definition(
    info: &LanguageInfo,
    limits: &Limits,
    packages: &Packages,
    default_timeout_ms: u64,
) -> Tool {
    run_schema::run_tool(
        tool_name(&info.name),
        format!("Run {}", display_name(&info.name)),
        description(info, limits, default_timeout_ms)
            + &installed::describe(&info.name, packages, limits.network),
        input_schema(info, limits, default_timeout_ms),
        limits,
    )
}

/// The validated arguments of one call.
#[derive(Debug, PartialEq, Eq)]
pub struct RunArgs {
    /// The program text.
    pub code: String,
    /// The wall-clock limit in milliseconds.
    pub timeout_ms: u64,
    /// The sandbox to run in; a fresh one-shot sandbox when `None`.
    pub sandbox_id: Option<String>,
}

/// Reads `{code, timeoutMs?}` from a call's arguments: `default_timeout_ms` when it gives
/// no timeout, and at most `max_timeout_ms`.
pub fn parse_args(
    arguments: Option<&JsonObject>,
    default_timeout_ms: u64,
    max_timeout_ms: u64,
) -> Result<RunArgs, ArgsError> {
    let empty = JsonObject::new();
    let arguments = arguments.unwrap_or(&empty);
    let code = match arguments.get("code") {
        Some(Value::String(code)) => code.clone(),
        _ => return Err(ArgsError::MissingCode),
    };
    let timeout_ms = match arguments.get("timeoutMs") {
        None | Some(Value::Null) => default_timeout_ms,
        Some(value) => whole_number(value)
            .filter(|t| (1..=max_timeout_ms).contains(t))
            .ok_or(ArgsError::BadTimeout {
                max: max_timeout_ms,
            })?,
    };
    // An empty id is a model's way of giving none.
    let sandbox_id = match arguments.get("sandboxId") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if id.trim().is_empty() => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => return Err(ArgsError::BadSandboxId),
    };
    Ok(RunArgs {
        code,
        timeout_ms,
        sandbox_id,
    })
}

/// An integer, also when a client wrote it as `5000.0`.
pub(crate) fn whole_number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
            .map(|f| f as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox_call::SandboxCall;

    fn args(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    const DEFAULT: u64 = 15_000;
    const MAX: u64 = 300_000;

    fn info(name: &str, compile: Option<&str>, run: &str) -> LanguageInfo {
        LanguageInfo {
            name: Lang::new(name).unwrap(),
            version: format!("{name} 1.0"),
            file: format!("main.{name}"),
            compile: compile.map(str::to_owned),
            run: run.to_owned(),
            compile_timeout_ms: if compile.is_some() { 30_000 } else { 0 },
            warm: false,
            keeps_state: false,
            memory_mb: None,
        }
    }

    #[test]
    fn names_round_trip() {
        let languages = sandbox_protocol::language::classic();
        for info in &languages {
            let name = tool_name(&info.name);
            assert_eq!(lang_of(&name, &languages), Some(info.name.clone()));
            let kind = ToolKind::of(&name, &languages);
            assert_eq!(kind, Some(ToolKind::Run(info.name.clone())));
        }
        for tool in SandboxTool::ALL {
            let kind = ToolKind::of(tool.name(), &languages);
            assert_eq!(kind, Some(ToolKind::Sandbox(tool)));
        }
        for tool in ProcessTool::ALL {
            let kind = ToolKind::of(tool.name(), &languages);
            assert_eq!(kind, Some(ToolKind::Process(tool)));
        }
        for tool in SnapshotTool::ALL {
            let kind = ToolKind::of(tool.name(), &languages);
            assert_eq!(kind, Some(ToolKind::Snapshot(tool)));
        }
        let search = ToolKind::of(SEARCH_TOOLS, &languages);
        assert_eq!(search, Some(ToolKind::SearchTools));
        assert_eq!(lang_of("run_ruby", &languages), None);
        assert_eq!(ToolKind::of("run_ruby", &languages), None);
        let ruby = [info("ruby", None, "ruby main.rb")];
        assert_eq!(lang_of("run_ruby", &ruby), Some(Lang::new("ruby").unwrap()));
    }

    #[test]
    fn languages_are_named_as_people_write_them() {
        let name = |lang: &str| display_name(&Lang::new(lang).unwrap());
        assert_eq!(name("csharp"), "C#");
        assert_eq!(name("commonlisp"), "Common Lisp");
        assert_eq!(name("ocaml"), "OCaml");
        assert_eq!(name("cobol"), "COBOL");
        assert_eq!(name("ruby"), "Ruby");
        assert_eq!(
            name("klingon"),
            "klingon",
            "an operator's row keeps its name"
        );
        let program = |lang: &str| a_program(&info(lang, None, "x"));
        assert_eq!(program("ada"), "an Ada program");
        assert_eq!(program("r"), "an R program");
        assert_eq!(program("rust"), "a Rust program");
    }

    #[test]
    fn a_resident_interpreter_s_tool_says_what_a_sandbox_keeps() {
        let kept_by = |name: &str, keeps_state: bool| {
            kept(&LanguageInfo {
                keeps_state,
                ..info(name, None, "x")
            })
        };
        assert!(kept_by("ruby", true).contains("Ruby local variables, methods"));
        assert!(kept_by("lua", true).contains("global variables and functions"));
        assert!(kept_by("ruby", false).contains("runs its program anew"));
    }

    #[test]
    fn a_compiled_languages_tool_says_how_it_is_built() {
        let c = info("c", Some("gcc -O2 -o ./main main.c"), "./main");
        let tool = definition(&c, &Limits::default(), &Packages::default(), DEFAULT);
        assert_eq!(tool.name, "run_c");
        assert_eq!(tool.title.as_deref(), Some("Run C"));
        let text = tool.description.as_deref().unwrap_or_default();
        for needle in [
            "a C program",
            "c 1.0",
            "gcc -O2 -o ./main main.c",
            "compileError",
            "30000 ms",
            "256 MB of memory",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
        // A row that gives its sandboxes more memory: its tool says how much.
        let big = LanguageInfo {
            memory_mb: Some(640),
            ..c
        };
        let tool = definition(&big, &Limits::default(), &Packages::default(), DEFAULT);
        let text = tool.description.as_deref().unwrap_or_default();
        assert!(text.contains("640 MB of memory"), "{text}");
    }

    #[test]
    fn arguments_are_checked() {
        let ok = parse_args(Some(&args(json!({"code": "print(1)"}))), DEFAULT, MAX);
        assert_eq!(
            ok,
            Ok(RunArgs {
                code: "print(1)".into(),
                timeout_ms: 15_000,
                sandbox_id: None,
            })
        );
        let in_sandbox = parse_args(
            Some(&args(json!({"code": "1", "sandboxId": "sbx_x"}))),
            DEFAULT,
            MAX,
        );
        assert_eq!(in_sandbox.unwrap().sandbox_id.as_deref(), Some("sbx_x"));
        for none in [json!(null), json!(""), json!("  ")] {
            let call = args(json!({"code": "1", "sandboxId": none}));
            assert_eq!(
                parse_args(Some(&call), DEFAULT, MAX).unwrap().sandbox_id,
                None
            );
        }
        let call = args(json!({"code": "1", "sandboxId": 7}));
        assert_eq!(
            parse_args(Some(&call), DEFAULT, MAX),
            Err(ArgsError::BadSandboxId)
        );
        let ok = parse_args(
            Some(&args(json!({"code": "", "timeoutMs": 500.0}))),
            DEFAULT,
            MAX,
        );
        assert_eq!(ok.map(|a| a.timeout_ms), Ok(500));
        assert_eq!(parse_args(None, DEFAULT, MAX), Err(ArgsError::MissingCode));
        assert_eq!(
            parse_args(Some(&args(json!({"code": 1}))), DEFAULT, MAX),
            Err(ArgsError::MissingCode)
        );
        for bad in [
            json!(0),
            json!(300_001),
            json!(1.5),
            json!("100"),
            json!(-1),
        ] {
            let call = args(json!({"code": "x", "timeoutMs": bad}));
            assert_eq!(
                parse_args(Some(&call), DEFAULT, MAX),
                Err(ArgsError::BadTimeout { max: MAX })
            );
        }
    }

    #[test]
    fn a_timeout_is_a_whole_number_of_milliseconds_up_to_the_largest() {
        let call = |timeout: Value| {
            let call = args(json!({"code": "x", "timeoutMs": timeout, "other": 1}));
            parse_args(Some(&call), DEFAULT, MAX).map(|a| a.timeout_ms)
        };
        assert_eq!(call(json!(null)), Ok(DEFAULT), "null is none given");
        assert_eq!(call(json!(1)), Ok(1));
        assert_eq!(call(json!(MAX)), Ok(MAX), "the largest is allowed");
        for bad in [json!(1e300), json!(true), json!([5000]), json!(-0.5)] {
            assert_eq!(call(bad), Err(ArgsError::BadTimeout { max: MAX }));
        }
        assert_eq!(whole_number(&json!(5000.0)), Some(5_000));
        assert_eq!(whole_number(&json!(u64::MAX)), Some(u64::MAX));
        assert_eq!(whole_number(&json!(1e300)), None);
        assert_eq!(whole_number(&json!(-3)), None);
        assert_eq!(whole_number(&json!("7")), None);
    }

    #[test]
    fn definitions_say_what_a_model_gets() {
        let python = sandbox_protocol::language::classic().remove(1);
        let tool = definition(&python, &Limits::default(), &Packages::default(), DEFAULT);
        let text = tool.description.as_deref().unwrap_or_default();
        for needle in [
            "fresh",
            "no network",
            "256 MB",
            "half a CPU",
            "15000 ms",
            "1 MiB",
            "Without sandboxId",
            "create_sandbox",
            "Python variables",
            "outputs/",
            "start_process",
            "a server, a long job",
        ] {
            assert!(text.contains(needle), "description lacks {needle:?}");
        }
        assert!(!text.contains("Every call gets a new sandbox: nothing is kept"));
        let schema = Value::Object((*tool.input_schema).clone());
        assert_eq!(schema["properties"]["sandboxId"]["type"], "string");
        assert_eq!(schema["required"], json!(["code"]));
        let annotations = tool.annotations.unwrap();
        assert_eq!(annotations.read_only_hint, Some(false));
        assert_eq!(annotations.open_world_hint, Some(false));
        assert!(tool.output_schema.is_some());
    }
}
