//! `run_code {language, code, timeoutMs?, sandboxId?}`: one tool that runs a program of
//! any language the runner offers, with the behaviour and result of that language's
//! `run_<name>` tool ([`crate::tools`]). Its description stays short whatever the number
//! of languages: the sandbox's limits once, then the languages as `name version` pairs
//! on one line. Which languages also have a tool of their own is
//! [`crate::language_tools`]'s business.

use rmcp::model::{JsonObject, Tool};
use sandbox_protocol::api::Limits;
use sandbox_protocol::language::LanguageInfo;
use sandbox_protocol::Lang;
use serde_json::{json, Value};

use crate::args_error::ArgsError;
use crate::run_schema;
use crate::wording::{bytes, sandbox_resources};

/// The tool's name.
pub const NAME: &str = "run_code";

/// The longest version shown for a language.
const MAX_VERSION_CHARS: usize = 24;

/// The longest `language` a refusal repeats.
const MAX_GIVEN_CHARS: usize = 64;

/// A language's version as its description shows it: the first dotted number of the
/// toolchain's version line (`Python 3.11.2` gives `3.11.2`, `go version go1.19.8
/// linux/amd64` gives `1.19.8`), else nothing (a runner that names no version).
pub fn short_version(version: &str) -> String {
    let mut current = String::new();
    for c in version.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() || (c == '.' && !current.is_empty()) {
            current.push(c);
            continue;
        }
        let run = current.trim_end_matches('.');
        if run.contains('.') {
            return run.chars().take(MAX_VERSION_CHARS).collect();
        }
        current.clear();
    }
    String::new()
}

/// The offered languages as one line: `bash 5.2.15, python 3.11.2, ...`, with the memory
/// of a language whose sandboxes get more than `limits`' (`kotlin 1.3.31 (1024 MB)`).
fn language_line(languages: &[LanguageInfo], limits: &Limits) -> String {
    languages
        .iter()
        .map(|info| {
            let mut pair = info.name.to_string();
            let version = short_version(&info.version);
            if !version.is_empty() {
                pair.push(' ');
                pair.push_str(&version);
            }
            if let Some(mb) = info.memory_mb.filter(|mb| *mb > limits.memory_mb) {
                pair.push_str(&format!(" ({mb} MB)"));
            }
            pair
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn description(languages: &[LanguageInfo], limits: &Limits, default_timeout_ms: u64) -> String {
    let compile = match languages.iter().map(|l| l.compile_timeout_ms).max() {
        None | Some(0) => String::new(),
        Some(ms) => format!(
            " Compiled languages may take up to {ms} ms more to compile; a compile error \
             comes back as the compiler's output with compileError true, and nothing runs."
        ),
    };
    format!(
        "Runs a program in any language listed below, in an isolated sandbox, and returns \
         its stdout, stderr and exit code, exactly as that language's run_<language> tool \
         does (where it has one). Without sandboxId every call gets a fresh sandbox and \
         nothing is kept; with the sandboxId of a sandbox from create_sandbox the program \
         runs there, and its files (and an interpreter's variables, where the language \
         keeps them) remain for the next call. Files written under /home/sandbox/outputs/ \
         come back with the result. The sandbox has {resources}. The program is killed \
         after timeoutMs (default {default_timeout_ms} ms, at most {max} ms); each output \
         stream is capped at {cap}.{compile} Languages (name version): {line}.",
        resources = sandbox_resources(limits),
        max = limits.max_timeout_ms,
        cap = bytes(limits.output_cap_bytes),
        line = language_line(languages, limits),
    )
}

fn input_schema(limits: &Limits, default_timeout_ms: u64) -> std::sync::Arc<JsonObject> {
    let own = json!({
        "language": {
            "type": "string",
            "description": "The language's name as the description lists it, such as \"python\".",
        },
        "code": {"type": "string", "description": "The complete source of the program."},
    });
    let own = own.as_object().cloned().unwrap_or_default();
    run_schema::input_schema(own, &["language", "code"], limits, default_timeout_ms)
}

/// The definition of `run_code` for `languages` (none: no tool), on a runner with
/// `limits`.
pub fn definition(
    languages: &[LanguageInfo],
    limits: &Limits,
    default_timeout_ms: u64,
) -> Option<Tool> {
    if languages.is_empty() {
        return None;
    }
    Some(run_schema::run_tool(
        NAME.into(),
        "Run code".into(),
        description(languages, limits, default_timeout_ms),
        input_schema(limits, default_timeout_ms),
        limits,
    ))
}

/// The language a call of `run_code` names, among the `offered` ones.
pub fn language(
    arguments: Option<&JsonObject>,
    offered: &[LanguageInfo],
) -> Result<Lang, ArgsError> {
    let given = match arguments.and_then(|a| a.get("language")) {
        Some(Value::String(given)) => given.trim(),
        _ => {
            return Err(ArgsError::Missing {
                field: "language",
                what: "the name of one of the languages the description lists",
            })
        }
    };
    offered
        .iter()
        .find(|info| info.name.as_str() == given)
        .map(|info| info.name.clone())
        .ok_or_else(|| ArgsError::UnknownLanguage {
            given: given.chars().take(MAX_GIVEN_CHARS).collect(),
            offered: offered
                .iter()
                .map(|info| info.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::args;
    use sandbox_protocol::language;

    #[test]
    fn versions_are_cut_to_their_number() {
        for (line, short) in [
            ("Python 3.11.2", "3.11.2"),
            (
                "GNU bash, version 5.2.15(1)-release (x86_64-pc-linux-gnu)",
                "5.2.15",
            ),
            ("Node.js v18.19.0", "18.19.0"),
            ("TypeScript 5.9.3 on Node.js v18.19.0", "5.9.3"),
            ("gcc (Debian 12.2.0-14) 12.2.0", "12.2.0"),
            ("go version go1.19.8 linux/amd64", "1.19.8"),
            ("openjdk version \"17.0.13\" 2024-10-15", "17.0.13"),
            ("ruby 3.1.2p20 (2022-04-12 revision 4491bb740a)", "3.1.2"),
            (
                "The Glorious Glasgow Haskell Compilation System, version 9.0.2",
                "9.0.2",
            ),
            ("GNU Awk 5.2.1, API: 3.2", "5.2.1"),
            ("SBCL 2.2.9.debian", "2.2.9"),
            ("python3", ""),
            ("no number here.", ""),
        ] {
            assert_eq!(short_version(line), short, "{line}");
        }
        let long = format!("v{}", "1.".repeat(100));
        assert!(short_version(&long).chars().count() <= MAX_VERSION_CHARS);
    }

    #[test]
    fn the_description_lists_every_language_on_one_line() {
        let mut languages = language::classic();
        let mut kotlin = languages[0].clone();
        kotlin.name = Lang::new("kotlin").unwrap();
        kotlin.version = "kotlinc-jvm 1.3.31 (JRE 17.0.13+11-Debian-2)".into();
        kotlin.memory_mb = Some(1024);
        kotlin.compile_timeout_ms = 90_000;
        languages.push(kotlin);
        let limits = Limits::default();
        let tool = definition(&languages, &limits, 15_000).expect("a tool");
        assert_eq!(tool.name, NAME);
        let text = tool.description.as_deref().unwrap_or_default();
        let line = language_line(&languages, &limits);
        assert!(text.ends_with(&format!("Languages (name version): {line}.")));
        assert_eq!(
            line, "bash, python, node, kotlin 1.3.31 (1024 MB)",
            "the classic rows name no version"
        );
        for needle in [
            "sandboxId",
            "create_sandbox",
            "default 15000 ms",
            "90000 ms",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
        // Thirty languages keep it short.
        let many: Vec<_> = (0..30)
            .map(|i| LanguageInfo {
                name: Lang::new(&format!("lang{i}")).unwrap(),
                version: format!("Lang {i}.{i}.{i}"),
                ..language::classic().remove(0)
            })
            .collect();
        let text = definition(&many, &limits, 15_000)
            .and_then(|t| t.description.map(|d| d.to_string()))
            .unwrap_or_default();
        assert!(text.len() < 2_000, "{} bytes: {text}", text.len());
        let schema = Value::Object((*tool.input_schema).clone());
        assert_eq!(schema["required"], json!(["language", "code"]));
        assert!(tool.output_schema.is_some());
        assert!(definition(&[], &limits, 15_000).is_none());
    }

    #[test]
    fn the_language_must_be_an_offered_one() {
        let offered = language::classic();
        let call = |value: Value| language(Some(&args(value)), &offered);
        assert_eq!(
            call(json!({"language": "python", "code": ""})),
            Ok(Lang::PYTHON)
        );
        assert_eq!(call(json!({"language": " bash "})), Ok(Lang::BASH));
        let unknown = call(json!({"language": "klingon"})).unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "invalid arguments: unknown language \"klingon\": this server runs bash, python, node"
        );
        let long = call(json!({"language": "x".repeat(10_000)})).unwrap_err();
        assert!(long.to_string().len() < 200, "{long}");
        for missing in [json!({}), json!({"language": 3}), json!({"language": null})] {
            assert!(matches!(
                call(missing),
                Err(ArgsError::Missing {
                    field: "language",
                    ..
                })
            ));
        }
        assert!(language(None, &offered).is_err());
    }
}
