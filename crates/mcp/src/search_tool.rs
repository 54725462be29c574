//! `search_tools {query?}`: the tools programs may call, as Python and TypeScript stubs
//! (progressive discovery: a model reads the signatures it needs, not every tool's). It
//! exists only when upstreams are configured. The answer lists the allowed tools whose
//! name or description holds a word of the query (all of them without one), best
//! matches first, at most [`MAX_RESULTS`], grouped by server, as text and as
//! `structuredContent`.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde::Serialize;
use serde_json::{json, Value};

use crate::schema::object;
use crate::tools::{ArgsError, SEARCH_TOOLS};
use crate::upstreams::{stubs, AllowedTool, ServerTools};

/// The most tools one answer lists.
pub const MAX_RESULTS: usize = 40;
/// The longest query read, in bytes.
const MAX_QUERY_BYTES: usize = 1024;

/// The tool's definition, for the configured `servers`.
pub fn definition(servers: &[String]) -> Tool {
    let names = servers.join(", ");
    let description = format!(
        "Lists the operator's tools that Python, TypeScript and Node.js programs can call \
         through their `tools` module (servers: {names}), as Python and TypeScript \
         signatures with their descriptions. Give a query (words of a tool's name or \
         purpose) to see only the tools that match, best first; without one, every tool is \
         listed (at most {MAX_RESULTS}). Then write a program (run_python, run_typescript or \
         run_node) that calls them: `tools.<server>.<function>(...)` in Python, `await \
         <server>.<function>({{...}})` in TypeScript and Node. A server that is down is \
         listed without tools until it answers again."
    );
    let input = object(json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Words to look for in the tools' names and descriptions; omit it to list every tool.",
            },
        },
    }));
    let mut tool = Tool::new(SEARCH_TOOLS, description, input);
    tool.title = Some("Search the tools programs can call".into());
    tool.output_schema = Some(output_schema());
    tool.annotations = Some(
        ToolAnnotations::with_title("Search the tools programs can call")
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    );
    tool
}

fn output_schema() -> Arc<JsonObject> {
    let text = |d: &str| json!({"type": "string", "description": d});
    object(json!({
        "type": "object",
        "properties": {
            "servers": {
                "type": "array",
                "description": "The servers with matching tools (every server without a query), in the configured order.",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": text("The server: `tools.<name>` in Python, `import { <name> } from \"tools\"` in TypeScript and Node."),
                        "up": {"type": "boolean", "description": "Whether it is connected now; its tools are absent while it is not."},
                        "tools": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "name": text("The tool's name at its server."),
                                    "function": text("Its function in the tools module."),
                                    "description": text("What it does."),
                                    "python": text("Its Python stub."),
                                    "typescript": text("Its TypeScript stub."),
                                },
                                "required": ["name", "function", "description", "python", "typescript"],
                            },
                        },
                    },
                    "required": ["name", "up", "tools"],
                },
            },
            "matched": {"type": "integer", "minimum": 0, "description": "Tools that match the query."},
            "shown": {"type": "integer", "minimum": 0, "description": "Tools listed here (at most the matches)."},
        },
        "required": ["servers", "matched", "shown"],
    }))
}

/// The query of a call's arguments: `None` lists every tool.
pub fn parse_query(arguments: Option<&JsonObject>) -> Result<Option<String>, ArgsError> {
    match arguments.and_then(|a| a.get("query")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(query)) if query.trim().is_empty() => Ok(None),
        Some(Value::String(query)) if query.len() <= MAX_QUERY_BYTES => Ok(Some(query.clone())),
        Some(_) => Err(ArgsError::Missing {
            field: "query",
            what: "a string of at most 1024 bytes, or omit it",
        }),
    }
}

#[derive(Serialize)]
struct FoundServer {
    name: String,
    up: bool,
    tools: Vec<FoundTool>,
}

#[derive(Serialize)]
struct FoundTool {
    name: String,
    function: String,
    description: String,
    python: String,
    typescript: String,
}

/// How well `tool` matches the query's `words`: the number of words its name or
/// description holds (every tool matches no words, with 1).
fn score(tool: &AllowedTool, words: &[String]) -> usize {
    if words.is_empty() {
        return 1;
    }
    let name = tool.name.to_lowercase();
    let description = tool.description.to_lowercase();
    words
        .iter()
        .filter(|w| name.contains(w.as_str()) || description.contains(w.as_str()))
        .count()
}

/// The answer to `search_tools` over `servers`' tools now.
pub fn answer(servers: &[ServerTools], query: Option<&str>) -> CallToolResult {
    let words: Vec<String> = query
        .unwrap_or_default()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut matches: Vec<(usize, usize, &AllowedTool)> = Vec::new();
    for (index, server) in servers.iter().enumerate() {
        for tool in &server.tools {
            let score = score(tool, &words);
            if score > 0 {
                matches.push((score, index, tool));
            }
        }
    }
    let matched = matches.len();
    // Best first; a stable sort keeps the servers' and their lists' order within a score.
    matches.sort_by_key(|m| std::cmp::Reverse(m.0));
    matches.truncate(MAX_RESULTS);
    let mut found: Vec<FoundServer> = servers
        .iter()
        .map(|s| FoundServer {
            name: s.name.clone(),
            up: s.up,
            tools: Vec::new(),
        })
        .collect();
    for (_, index, tool) in &matches {
        found[*index].tools.push(FoundTool {
            name: tool.name.clone(),
            function: tool.function(),
            description: tool.description.clone(),
            python: stubs::python(tool),
            typescript: stubs::typescript(tool),
        });
    }
    if !words.is_empty() {
        found.retain(|s| !s.tools.is_empty());
    }
    let text = text(&found, matched, matches.len(), query);
    let structured = json!({"servers": found, "matched": matched, "shown": matches.len()});
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

fn text(found: &[FoundServer], matched: usize, shown: usize, query: Option<&str>) -> String {
    let mut out = Vec::new();
    match query {
        Some(query) if matched == 0 => {
            out.push(format!("No tool matches {query:?}; call search_tools without a query to list them all."));
        }
        _ if shown < matched => out.push(format!(
            "{shown} of {matched} matching tools (the best matches; narrow the query to see others)."
        )),
        _ => {}
    }
    for server in found.iter().filter(|s| !s.up) {
        out.push(format!(
            "Server {} is unreachable now: its tools are absent until it answers again.",
            server.name
        ));
    }
    let listed: Vec<&FoundServer> = found.iter().filter(|s| !s.tools.is_empty()).collect();
    if !listed.is_empty() {
        out.push("Python (`import tools`, then `tools.<server>.<function>(...)`):".into());
        for server in &listed {
            out.push(format!("# tools.{}", server.name));
            out.extend(server.tools.iter().map(|t| t.python.clone()));
        }
        out.push(
            "TypeScript and Node.js (`import { <server> } from \"tools\"` or \
             `require(\"tools\")`, then `await <server>.<function>({...})`):"
                .into(),
        );
        for server in &listed {
            out.push(format!("// {} (from \"tools\")", server.name));
            out.extend(server.tools.iter().map(|t| t.typescript.clone()));
        }
    }
    out.join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstreams::listed::listed_tool;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> AllowedTool {
        let schema = json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]});
        AllowedTool::new(&listed_tool(name, description, schema))
    }

    fn servers() -> Vec<ServerTools> {
        vec![
            ServerTools {
                name: "tracker".into(),
                up: true,
                tools: vec![
                    tool("search_issues", "Finds issues by words."),
                    tool("get_issue", "One issue by its number."),
                ],
            },
            ServerTools {
                name: "docs".into(),
                up: true,
                tools: vec![tool("search_pages", "Finds pages of the manual.")],
            },
            ServerTools {
                name: "down".into(),
                up: false,
                tools: Vec::new(),
            },
        ]
    }

    #[test]
    fn without_a_query_every_tool_is_listed_by_server() {
        let result = answer(&servers(), None);
        let structured = result.structured_content.clone().expect("structured");
        assert_eq!(structured["matched"], 3);
        assert_eq!(structured["servers"].as_array().map(Vec::len), Some(3));
        assert_eq!(
            structured["servers"][0]["tools"][1]["function"],
            "get_issue"
        );
        assert_eq!(structured["servers"][2]["up"], false);
        let text = result.content[0].as_text().expect("text").text.clone();
        for needle in [
            "# tools.tracker",
            "def search_issues(*, query: str) -> Any:",
            "// docs (from \"tools\")",
            "search_pages(args: {query: string}): Promise<any>;",
            "Server down is unreachable now",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
    }

    #[test]
    fn a_query_keeps_the_matches_best_first() {
        let result = answer(&servers(), Some("search issue"));
        let structured = result.structured_content.expect("structured");
        assert_eq!(structured["matched"], 3, "any word matches");
        let names: Vec<&str> = structured["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .map(|s| s["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            ["tracker", "docs"],
            "servers without a match are left out"
        );
        assert_eq!(
            structured["servers"][0]["tools"][0]["name"],
            "search_issues"
        );
        let none = answer(&servers(), Some("weather"));
        let text = none.content[0].as_text().expect("text").text.clone();
        assert!(text.contains("No tool matches"), "{text}");
    }

    #[test]
    fn answers_are_bounded() {
        let many = vec![ServerTools {
            name: "big".into(),
            up: true,
            tools: (0..100).map(|i| tool(&format!("t{i}"), "x")).collect(),
        }];
        let result = answer(&many, None);
        let structured = result.structured_content.expect("structured");
        assert_eq!(structured["matched"], 100);
        assert_eq!(structured["shown"], MAX_RESULTS);
    }

    #[test]
    fn the_query_is_a_string_or_nothing() {
        let args = |v: Value| match json!({"query": v}) {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        assert_eq!(parse_query(None), Ok(None));
        assert_eq!(parse_query(Some(&args(json!(" ")))), Ok(None));
        assert_eq!(
            parse_query(Some(&args(json!("issue")))),
            Ok(Some("issue".into()))
        );
        assert!(parse_query(Some(&args(json!(5)))).is_err());
        assert!(parse_query(Some(&args(json!("x".repeat(2000))))).is_err());
    }
}
