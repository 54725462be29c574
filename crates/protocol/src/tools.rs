//! Tools called from code: a program in a sandbox calls tools its caller offers (the
//! operator's MCP tools, which sandbox-mcp calls on the program's behalf).
//!
//! The path of one call, and the types each hop carries:
//!
//! 1. the caller of a run offers tools ([`ToolsOffer`], the `tools` field of a run's
//!    body); the runner hands the offer to the agent with the job (`Job::tools`), and the
//!    agent writes a `tools` module for the program's language from it (no address, no
//!    credential: names, descriptions and input schemas only);
//! 2. the program writes a [`ProgramCall`] line on the agent's socket ([`SOCKET`]); the
//!    agent sends it to the runner as an `AgentMessage::ToolCall` ([`ToolCall`]);
//! 3. the runner hands it to the run's caller as a `{"toolCall": {...}}` line of the
//!    streamed answer ([`ToolCallLine`], which adds the run's id);
//! 4. the caller answers at `POST /runs/{runId}/tool-results/{id}` ([`ToolAnswer`]); the
//!    runner sends the answer to the agent ([`ToolReply`], a `RunnerMessage`), and the
//!    agent writes it on the program's connection as one [`ToolAnswer`] line.
//!
//! Every hop bounds what it carries: arguments and results at most
//! [`MAX_RESULT_BYTES`] of JSON, at most [`MAX_CALLS_PER_RUN`] calls a run whatever the
//! caller allows.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a sandbox's agent listens for its program's calls (a Unix socket, inside the
/// sandbox only: a sandbox has no network).
pub const SOCKET: &str = "/run/sandbox-tools/socket";
/// The folder of the generated modules (`python/tools.py`, `node_modules/tools/`), on a
/// small file system of the sandbox's own.
pub const MODULES: &str = "/run/sandbox-tools";
/// The most bytes of JSON a call's arguments, or an answer's result or error, may take.
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// The most calls one run may make, whatever its caller allows (a caller may allow
/// fewer: sandbox-mcp's `max_calls_per_run`). Calls past it fail in the program.
pub const MAX_CALLS_PER_RUN: usize = 1024;
/// The most calls of one run waiting for their answers at once; more wait in the
/// program until one is answered.
pub const MAX_CALLS_WAITING: usize = 16;
/// The most servers, and tools of each, an offer may name.
pub const MAX_OFFERED: usize = 256;

/// The tools a run's caller offers its program, by server.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolsOffer {
    /// The servers, each a module's attribute in the program (`tools.<name>`).
    pub servers: Vec<OfferedServer>,
}

/// One server of an offer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OfferedServer {
    /// Its name: an identifier in Python and JavaScript (see [`is_identifier`]).
    pub name: String,
    /// The tools the program may call.
    pub tools: Vec<OfferedTool>,
}

/// One tool of an offered server.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OfferedTool {
    /// The tool's name, as the server names it (the module's function is named after it,
    /// made an identifier: [`function_name`]).
    pub name: String,
    /// What it does, as the server describes it.
    #[serde(default)]
    pub description: String,
    /// Its input schema (a JSON Schema object), whose properties become the function's
    /// parameters.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub input_schema: Value,
}

impl ToolsOffer {
    /// Why the offer cannot be given to a program, if it cannot: no server, too many
    /// servers or tools, a server name that is not an identifier or is given twice, a
    /// tool given twice.
    pub fn check(&self) -> Result<(), String> {
        if self.servers.is_empty() {
            return Err("an offer of tools names at least one server".into());
        }
        if self.servers.len() > MAX_OFFERED {
            return Err(format!("an offer names at most {MAX_OFFERED} servers"));
        }
        let mut names = std::collections::BTreeSet::new();
        for server in &self.servers {
            if !is_identifier(&server.name) || server.name == "list" {
                return Err(format!(
                    "server name {:?} is not an identifier (ASCII letters, digits and _, \
                     not starting with a digit, not `list`)",
                    server.name
                ));
            }
            if !names.insert(server.name.as_str()) {
                return Err(format!("server {:?} is offered twice", server.name));
            }
            if server.tools.len() > MAX_OFFERED {
                return Err(format!("a server offers at most {MAX_OFFERED} tools"));
            }
            let mut tools = std::collections::BTreeSet::new();
            for tool in &server.tools {
                if tool.name.is_empty() || !tools.insert(function_name(&tool.name)) {
                    return Err(format!(
                        "tool {:?} of server {:?} is empty or offered twice",
                        tool.name, server.name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Whether `name` is an identifier in both Python and JavaScript, and no keyword of
/// either: 1 to 64 ASCII letters, digits and `_`, not starting with a digit.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    let first = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
        && !KEYWORDS.contains(&name)
}

/// The function a tool becomes in the module: its name with every character that is not
/// an ASCII letter, digit or `_` made `_`, prefixed with `_` where it would start with a
/// digit or be a keyword.
pub fn function_name(tool: &str) -> String {
    let mut name: String = tool
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) || KEYWORDS.contains(&name.as_str()) {
        name.insert(0, '_');
    }
    name
}

/// Python's and JavaScript's reserved words (and the module's own names).
const KEYWORDS: &[&str] = &[
    "False",
    "None",
    "True",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "def",
    "default",
    "del",
    "delete",
    "do",
    "elif",
    "else",
    "enum",
    "except",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "from",
    "function",
    "global",
    "if",
    "implements",
    "import",
    "in",
    "instanceof",
    "interface",
    "is",
    "lambda",
    "let",
    "new",
    "nonlocal",
    "not",
    "null",
    "or",
    "package",
    "pass",
    "private",
    "protected",
    "public",
    "raise",
    "return",
    "static",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "ToolError",
];

/// A program's request on the agent's socket: one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramCall {
    /// The server, as offered.
    pub server: String,
    /// The tool, by its name as offered (not its function's).
    pub tool: String,
    /// Its arguments: a JSON object.
    #[serde(default)]
    pub arguments: Value,
}

/// A call on its way from the agent to the runner (and, with the run's id, to the
/// run's caller): its id is the agent's, unique within the run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The call's id within its run.
    pub id: String,
    /// The server.
    pub server: String,
    /// The tool, by its name as offered.
    pub tool: String,
    /// Its arguments (a JSON object, at most [`MAX_RESULT_BYTES`]).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub arguments: Value,
}

/// A streamed answer's `{"toolCall": {...}}` line: a call the run's caller answers at
/// `POST /runs/{runId}/tool-results/{id}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallLine {
    /// The run's id.
    pub run_id: String,
    /// The call.
    #[serde(flatten)]
    pub call: ToolCall,
}

/// The answer to a call: the body of `POST /runs/{runId}/tool-results/{id}`, and the
/// line the agent writes back to the program. Exactly one of the two fields.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolAnswer {
    /// The tool's result: its structured content when it has some, else its text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub result: Option<Value>,
    /// Why the call failed (the program raises `tools.ToolError` or rejects with an
    /// `Error` carrying it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ToolAnswer {
    /// A failed call's answer.
    pub fn error(message: impl Into<String>) -> ToolAnswer {
        ToolAnswer {
            result: None,
            error: Some(message.into()),
        }
    }

    /// Why the answer cannot be passed on, if it cannot: neither or both fields, or more
    /// than [`MAX_RESULT_BYTES`] of JSON.
    pub fn check(&self) -> Result<(), String> {
        if self.result.is_some() == self.error.is_some() {
            return Err("an answer has exactly one of `result` and `error`".into());
        }
        let bytes = serde_json::to_vec(self).map_or(usize::MAX, |b| b.len());
        if bytes > MAX_RESULT_BYTES + 64 {
            return Err(format!(
                "an answer takes at most {MAX_RESULT_BYTES} bytes of JSON"
            ));
        }
        Ok(())
    }
}

/// The runner's answer to a call, on its way to the agent (a `RunnerMessage`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolReply {
    /// The call's id.
    pub tool_result: String,
    /// The answer.
    pub answer: ToolAnswer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_become_identifiers() {
        assert_eq!(function_name("search-issues"), "search_issues");
        assert_eq!(function_name("2fa"), "_2fa");
        assert_eq!(function_name("import"), "_import");
        assert_eq!(function_name("get.issue/v2"), "get_issue_v2");
    }

    #[test]
    fn server_names_must_be_identifiers() {
        let offer = |name: &str| ToolsOffer {
            servers: vec![OfferedServer {
                name: name.into(),
                tools: Vec::new(),
            }],
        };
        assert!(offer("tracker").check().is_ok());
        assert!(offer("my_docs2").check().is_ok());
        for bad in ["", "2x", "a-b", "class", "list", "é"] {
            assert!(offer(bad).check().is_err(), "{bad}");
        }
        assert!(ToolsOffer::default().check().is_err());
    }

    #[test]
    fn an_answer_has_one_field_and_a_bounded_size() {
        assert!(ToolAnswer::error("x").check().is_ok());
        let none = ToolAnswer {
            result: None,
            error: None,
        };
        assert!(none.check().is_err());
        let big = ToolAnswer {
            result: Some(Value::String("x".repeat(MAX_RESULT_BYTES + 100))),
            error: None,
        };
        assert!(big.check().is_err());
    }

    #[test]
    fn a_call_line_carries_the_run_id_beside_the_call() {
        let line = ToolCallLine {
            run_id: "run_1".into(),
            call: ToolCall {
                id: "3".into(),
                server: "tracker".into(),
                tool: "search".into(),
                arguments: serde_json::json!({"q": 1}),
            },
        };
        assert_eq!(
            serde_json::to_string(&line).unwrap(),
            r#"{"runId":"run_1","id":"3","server":"tracker","tool":"search","arguments":{"q":1}}"#
        );
    }
}
