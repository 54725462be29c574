//! What the run tools say about tools called from code, when upstreams are configured
//! (`MCP_UPSTREAMS`): which languages get a `tools` module, how a program of each imports
//! it and calls a tool, which servers it names, and the `toolCalls` of a run's result.
//! With no upstream configured none of this is written anywhere.

use rmcp::model::Tool;
use serde_json::{json, Value};

use crate::run_code;

/// The languages whose programs get a `tools` module.
pub const LANGUAGES: [&str; 3] = ["python", "typescript", "node"];

/// Whether programs of `lang` get a `tools` module.
pub fn offered_to(lang: &str) -> bool {
    LANGUAGES.contains(&lang)
}

/// The paragraph a run tool's description gains, for a language among [`LANGUAGES`]
/// (`None` for the others), naming the configured `servers`.
pub fn paragraph(lang: &str, servers: &[String]) -> Option<String> {
    let first = servers.first()?;
    let names = servers
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let how = match lang {
        "python" => format!(
            "`import tools`, then `r = tools.{first}.some_tool(arg=\"value\")`: each tool is a \
             function taking keyword arguments; a failed call raises `tools.ToolError` with \
             the server's message"
        ),
        "typescript" => format!(
            "`import {{ {first} }} from \"tools\"`, then `const r = await \
             {first}.some_tool({{ arg: \"value\" }})`: each tool is an async function taking one \
             object of arguments; a failed call rejects with an Error carrying the server's \
             message"
        ),
        "node" => format!(
            "`const {{ {first} }} = require(\"tools\")` (or `import {{ {first} }} from \"tools\"` \
             in an ES module), then `const r = await {first}.some_tool({{ arg: \"value\" }})`: \
             each tool is an async function taking one object of arguments; a failed call \
             rejects with an Error carrying the server's message"
        ),
        _ => return None,
    };
    Some(format!(
        " Tools from code: the program can call the operator's tools through a `tools` \
         module (servers: {names}) that needs no network and no setup: {how}. A call returns the \
         tool's structured result, else its text. Call search_tools first to read the \
         functions' signatures (their names are the tools' names made identifiers); \
         `tools.list()` lists them from inside the program. Calls are checked against each \
         tool's input schema and counted (each server allows a number of calls per run); \
         the result's toolCalls lists them. Filter and join the tools' results in the \
         program and print only what you need."
    ))
}

/// What `run_code`'s description gains for configured `servers`.
fn run_code_sentence(servers: &[String]) -> String {
    format!(
        " Python, TypeScript and Node.js programs can call the operator's tools (servers: \
         {}) through a `tools` module; search_tools shows their signatures.",
        servers.join(", ")
    )
}

/// Rewrites the run tools of `tools` for configured `servers`: the description of each
/// language's run tool that gets a `tools` module gains [`paragraph`], `run_code`'s a
/// sentence, and every run tool's output schema gains `toolCalls`.
pub fn describe(tools: &mut [Tool], servers: &[String]) {
    for tool in tools.iter_mut() {
        let Some(lang) = tool.name.strip_prefix("run_") else {
            continue;
        };
        let added = match tool.name == run_code::NAME {
            true => Some(run_code_sentence(servers)),
            false => paragraph(lang, servers),
        };
        if let Some(paragraph) = added {
            let mut description = tool.description.as_deref().unwrap_or_default().to_owned();
            description.push_str(&paragraph);
            tool.description = Some(description.into());
        }
        if let Some(schema) = &mut tool.output_schema {
            let mut schema = (**schema).clone();
            if let Some(Value::Object(properties)) = schema.get_mut("properties") {
                properties.insert("toolCalls".into(), tool_calls_schema());
            }
            tool.output_schema = Some(std::sync::Arc::new(schema));
        }
    }
}

/// The schema of a run result's `toolCalls`.
fn tool_calls_schema() -> Value {
    json!({
        "type": "array",
        "description": "The calls the program made of the tools module, in call order.",
        "items": {
            "type": "object",
            "properties": {
                "server": {"type": "string"},
                "tool": {"type": "string"},
                "durationMs": {"type": "integer", "minimum": 0},
                "isError": {"type": "boolean"},
            },
            "required": ["server", "tool", "durationMs", "isError"],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, ToolChoice};
    use sandbox_protocol::api::Limits;

    #[test]
    fn only_python_typescript_and_node_name_the_module() {
        let servers = vec!["tracker".to_owned(), "docs".to_owned()];
        let python = paragraph("python", &servers).expect("python");
        for needle in [
            "import tools",
            "tools.tracker.",
            "`tracker`, `docs`",
            "tools.ToolError",
            "search_tools",
            "tools.list()",
        ] {
            assert!(python.contains(needle), "{needle:?} missing from {python}");
        }
        let typescript = paragraph("typescript", &servers).expect("typescript");
        assert!(
            typescript.contains("import { tracker } from \"tools\""),
            "{typescript}"
        );
        let node = paragraph("node", &servers).expect("node");
        assert!(node.contains("require(\"tools\")"), "{node}");
        assert!(paragraph("bash", &servers).is_none());
        assert!(paragraph("python", &[]).is_none());
    }

    #[test]
    fn run_tools_gain_the_paragraph_and_tool_calls() {
        let catalog = Catalog::new(Limits::default(), &ToolChoice::default());
        let mut tools = catalog.tools().to_vec();
        describe(&mut tools, &["tracker".to_owned()]);
        let description = |name: &str| {
            let tool = tools.iter().find(|t| t.name == name).expect("a tool");
            tool.description.as_deref().unwrap_or_default().to_owned()
        };
        assert!(description("run_python").contains("tools.tracker"));
        assert!(description("run_node").contains("require(\"tools\")"));
        assert!(!description("run_bash").contains("tools module"));
        assert!(!description("create_sandbox").contains("tools module"));
        assert!(description("run_code").contains("`tools` module"));
        assert!(description("run_code").contains("servers: tracker"));
        let python = tools
            .iter()
            .find(|t| t.name == "run_python")
            .expect("python");
        let schema = python.output_schema.as_ref().expect("a schema");
        assert!(schema["properties"].get("toolCalls").is_some());
    }
}
