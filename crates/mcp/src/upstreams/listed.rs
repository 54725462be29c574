//! An upstream's tools as its `tools/list` gave them, kept when `allow` lets programs
//! call them: their names, descriptions and input schemas, and a compiled check of
//! arguments against each schema.
//!
//! The check does bounded work: a schema over [`MAX_SCHEMA_BYTES`] is not compiled,
//! references are never fetched (no network, no files), formats are not checked, and
//! patterns use the `regex` engine (linear time) with bounded sizes. A schema that does
//! not compile is no reason to refuse a call: the upstream decides.

use std::sync::Arc;

use rmcp::model::Tool;
use sandbox_protocol::tools::{function_name, OfferedTool};
use serde_json::Value;

use super::glob::{any_matches, Glob};

/// The largest input schema compiled into a check, in bytes of JSON.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;
/// The longest description kept, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 8 * 1024;
/// The longest text of a failed check, in bytes.
const MAX_CHECK_MESSAGE_BYTES: usize = 1024;
/// The most bytes a compiled pattern (and its DFA's cache) may take.
const MAX_PATTERN_BYTES: usize = 1 << 20;

/// One tool programs may call.
#[derive(Debug, Clone)]
pub struct AllowedTool {
    /// Its name, as the upstream names it.
    pub name: String,
    /// What it does, cut to [`MAX_DESCRIPTION_BYTES`].
    pub description: String,
    /// Its input schema (a JSON object).
    pub input_schema: Value,
    /// Its arguments' check; `None` when the schema did not compile.
    check: Option<Arc<jsonschema::Validator>>,
}

impl AllowedTool {
    /// The tool as listed, with its check compiled.
    pub fn new(tool: &Tool) -> Self {
        let input_schema = Value::Object((*tool.input_schema).clone());
        AllowedTool {
            name: tool.name.to_string(),
            description: cut(
                tool.description.as_deref().unwrap_or_default(),
                MAX_DESCRIPTION_BYTES,
            ),
            check: compile(&input_schema).map(Arc::new),
            input_schema,
        }
    }

    /// The function it becomes in a program's module.
    pub fn function(&self) -> String {
        function_name(&self.name)
    }

    /// Why `arguments` do not match the input schema, if they do not (with a schema that
    /// did not compile, they match).
    pub fn check(&self, arguments: &Value) -> Result<(), String> {
        let Some(check) = &self.check else {
            return Ok(());
        };
        check.validate(arguments).map_err(|error| {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() {
                String::new()
            } else {
                format!(" at {path}")
            };
            cut(&format!("{error}{at}"), MAX_CHECK_MESSAGE_BYTES)
        })
    }

    /// The tool as a run's offer names it.
    pub fn offered(&self) -> OfferedTool {
        OfferedTool {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
        }
    }
}

/// The tools of `listed` that `allow` lets programs call, at most `max` of them, and no
/// two whose functions would have the same name (the first listed is kept).
pub fn allowed(listed: &[Tool], allow: &[Glob], max: usize) -> Vec<AllowedTool> {
    let mut functions = std::collections::BTreeSet::new();
    listed
        .iter()
        .filter(|tool| !tool.name.is_empty() && any_matches(allow, &tool.name))
        .filter(|tool| functions.insert(function_name(&tool.name)))
        .take(max)
        .map(AllowedTool::new)
        .collect()
}

/// The check of `schema`, if it compiles within the bounds.
fn compile(schema: &Value) -> Option<jsonschema::Validator> {
    let size = serde_json::to_vec(schema).map_or(usize::MAX, |b| b.len());
    if size > MAX_SCHEMA_BYTES {
        return None;
    }
    let patterns = jsonschema::PatternOptions::regex()
        .size_limit(MAX_PATTERN_BYTES)
        .dfa_size_limit(MAX_PATTERN_BYTES);
    jsonschema::options()
        .offline()
        .should_validate_formats(false)
        .with_pattern_options(patterns)
        .build(schema)
        .ok()
}

/// `text` cut to at most `max` bytes, on a character boundary.
pub(crate) fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// A tool as an upstream lists it, for tests: `name`, described as `description`,
/// whose input schema is `schema` (an object).
#[cfg(test)]
pub(crate) fn listed_tool(name: &str, description: &str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        panic!("a schema is an object");
    };
    Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: Value) -> Tool {
        listed_tool(name, &format!("{name} does things"), schema)
    }

    fn search() -> AllowedTool {
        AllowedTool::new(&tool(
            "search-issues",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "pattern": "^[a-z ]+$"},
                    "limit": {"type": "integer", "minimum": 1},
                },
                "required": ["query"],
            }),
        ))
    }

    #[test]
    fn arguments_are_checked_against_the_schema() {
        let search = search();
        assert_eq!(search.function(), "search_issues");
        assert!(search.check(&json!({"query": "crash"})).is_ok());
        assert!(search.check(&json!({"query": "crash", "limit": 3})).is_ok());
        let missing = search
            .check(&json!({"limit": 3}))
            .expect_err("query missing");
        assert!(missing.contains("query"), "{missing}");
        let wrong = search
            .check(&json!({"query": 5}))
            .expect_err("not a string");
        assert!(wrong.contains("/query"), "{wrong}");
        assert!(
            search.check(&json!({"query": "CRASH!"})).is_err(),
            "the pattern counts"
        );
        assert!(search.check(&json!({"query": "x", "limit": 0})).is_err());
        assert!(search.check(&json!([1])).is_err());
    }

    #[test]
    fn a_schema_that_does_not_compile_lets_the_upstream_decide() {
        for schema in [
            json!({"type": "no such type"}),
            json!({"$ref": "http://127.0.0.1:1/schema.json"}),
            json!({"properties": {"a": {"pattern": "(unclosed"}}}),
        ] {
            let odd = AllowedTool::new(&tool("odd", schema.clone()));
            assert!(odd.check(&json!({"a": "x"})).is_ok(), "{schema}");
        }
        let huge: serde_json::Map<String, Value> = (0..20_000)
            .map(|i| (format!("property_{i}"), json!({"type": "string"})))
            .collect();
        let big = AllowedTool::new(&tool(
            "big",
            json!({"type": "object", "properties": huge, "required": ["x"]}),
        ));
        assert!(
            big.check(&json!({})).is_ok(),
            "over the bound: not compiled"
        );
    }

    #[test]
    fn only_allowed_tools_are_kept_and_bounded() {
        let listed = vec![
            tool("search_issues", json!({})),
            tool("get_issue", json!({})),
            tool("delete_issue", json!({})),
            tool("search-issues", json!({})),
        ];
        let allow = [Glob::new("search*"), Glob::new("get_issue")];
        let names: Vec<String> = allowed(&listed, &allow, 10)
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(
            names,
            ["search_issues", "get_issue"],
            "one function per name"
        );
        assert_eq!(allowed(&listed, &allow, 1).len(), 1);
        assert!(allowed(&listed, &[], 10).is_empty());
    }

    #[test]
    fn long_text_is_cut_on_a_character() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc...");
        assert_eq!(cut("ééé", 3), "é...");
    }
}
