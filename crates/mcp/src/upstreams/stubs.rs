//! The allowed tools as a program sees them: Python and TypeScript signatures written
//! from their input schemas, with their descriptions (a docstring, a JSDoc comment), for
//! `search_tools`. A model reads only the stubs it asks for, and writes its calls from
//! them.
//!
//! A schema's types become the languages' (`string` is `str` and `string`, `integer`
//! `int` and `number`, an `enum` a `Literal` and a union of literals, ...), down to a
//! bounded depth; anything else is `Any` and `unknown`.

use serde_json::Value;

use super::listed::{cut, AllowedTool};

/// The deepest a type is written out; deeper is `Any` / `unknown`.
const MAX_DEPTH: usize = 3;
/// The most parameters written; more are left to `**more` / an index signature.
const MAX_PARAMS: usize = 64;
/// The most values of an enum written.
const MAX_ENUM: usize = 16;
/// The longest description in a stub, in bytes.
const MAX_DOC_BYTES: usize = 2048;
/// The longest parameter description, in bytes.
const MAX_PARAM_DOC_BYTES: usize = 512;

/// One parameter: a property of the input schema.
struct Param<'a> {
    name: &'a str,
    schema: &'a Value,
    required: bool,
}

/// The input schema's properties, required ones first, at most [`MAX_PARAMS`].
fn params(schema: &Value) -> (Vec<Param<'_>>, bool) {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return (Vec::new(), false);
    };
    let mut params: Vec<Param> = properties
        .iter()
        .map(|(name, schema)| Param {
            name,
            schema,
            required: required.contains(&name.as_str()),
        })
        .collect();
    params.sort_by_key(|p| !p.required);
    let more = params.len() > MAX_PARAMS;
    params.truncate(MAX_PARAMS);
    (params, more)
}

fn description(schema: &Value) -> Option<String> {
    schema
        .get("description")
        .and_then(Value::as_str)
        .map(|d| one_line(&cut(d, MAX_PARAM_DOC_BYTES)))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `name` can be a Python keyword argument and a bare TypeScript property name.
fn plain(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && sandbox_protocol::tools::is_identifier(name)
}

/// The Python stub of `tool`: `def f(*, a: str, b: int = ...) -> Any:` and its docstring.
pub fn python(tool: &AllowedTool) -> String {
    let (params, more) = params(&tool.input_schema);
    let mut args: Vec<String> = Vec::new();
    let mut odd = Vec::new();
    for param in &params {
        if !plain(param.name) {
            odd.push(param.name);
            continue;
        }
        let default = if param.required { "" } else { " = ..." };
        args.push(format!(
            "{}: {}{default}",
            param.name,
            py_type(param.schema, 0)
        ));
    }
    if !odd.is_empty() || more {
        args.push("**more: Any".into());
    }
    let signature = if args.is_empty() {
        String::new()
    } else {
        format!("*, {}", args.join(", "))
    };
    let mut doc = vec![cut(&tool.description, MAX_DOC_BYTES)];
    let described: Vec<String> = params
        .iter()
        .filter_map(|p| Some(format!("    {}: {}", p.name, description(p.schema)?)))
        .collect();
    if !described.is_empty() {
        doc.push(String::new());
        doc.push("Args:".into());
        doc.extend(described);
    }
    if !odd.is_empty() {
        let names: Vec<String> = odd.iter().map(|n| format!("{n:?}")).collect();
        doc.push(format!("Pass {} as **{{name: value}}.", names.join(", ")));
    }
    let doc = doc
        .join("\n")
        .lines()
        .map(|line| match line {
            "" => String::new(),
            line => format!("    {line}"),
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\"\"\"", "\\\"\\\"\\\"");
    format!(
        "def {}({signature}) -> Any:\n    \"\"\"{}\n    \"\"\"",
        tool.function(),
        doc.trim_start().trim_end()
    )
}

/// The TypeScript stub of `tool`: `f(args: {a: string; b?: number}): Promise<any>` and
/// its JSDoc.
pub fn typescript(tool: &AllowedTool) -> String {
    let (params, more) = params(&tool.input_schema);
    let mut fields: Vec<String> = params
        .iter()
        .map(|p| {
            let optional = if p.required { "" } else { "?" };
            format!("{}{optional}: {}", ts_key(p.name), ts_type(p.schema, 0))
        })
        .collect();
    if more {
        fields.push("[name: string]: unknown".into());
    }
    let any_required = params.iter().any(|p| p.required);
    let args = if any_required { "args" } else { "args?" };
    // A description cannot end the comment early.
    let safe = |text: &str| text.replace("*/", "*\\/");
    let mut doc = vec![format!(
        "/**\n * {}",
        safe(&cut(&tool.description, MAX_DOC_BYTES)).replace('\n', "\n * ")
    )];
    for param in &params {
        if let Some(what) = description(param.schema) {
            doc.push(format!(
                " * @param args.{} {}",
                safe(param.name),
                safe(&what)
            ));
        }
    }
    doc.push(" */".into());
    let doc = doc.join("\n");
    format!(
        "{doc}\n{}({args}: {{{}}}): Promise<any>;",
        tool.function(),
        fields.join("; ")
    )
}

fn ts_key(name: &str) -> String {
    if plain(name) {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

/// The JSON types a schema names (`"type": "x"` or `"type": ["x", "y"]`).
fn types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The alternatives of `anyOf` / `oneOf`, if the schema has them.
fn alternatives(schema: &Value) -> Option<&Vec<Value>> {
    schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
}

fn enum_values(schema: &Value) -> Option<Vec<String>> {
    let values = schema.get("enum")?.as_array()?;
    if values.is_empty() || values.len() > MAX_ENUM {
        return None;
    }
    values
        .iter()
        .map(|v| serde_json::to_string(v).ok())
        .collect()
}

fn py_type(schema: &Value, depth: usize) -> String {
    if depth > MAX_DEPTH {
        return "Any".into();
    }
    if let Some(values) = enum_values(schema) {
        let values: Vec<String> = values.iter().map(|v| py_literal(v)).collect();
        return format!("Literal[{}]", values.join(", "));
    }
    if let Some(alternatives) = alternatives(schema) {
        return union(alternatives.iter().map(|s| py_type(s, depth + 1)), "Any");
    }
    let written = types(schema).into_iter().map(|t| match t {
        "string" => "str".into(),
        "integer" => "int".into(),
        "number" => "float".into(),
        "boolean" => "bool".into(),
        "null" => "None".into(),
        "array" => match schema.get("items") {
            Some(items) => format!("list[{}]", py_type(items, depth + 1)),
            None => "list".into(),
        },
        "object" => "dict[str, Any]".into(),
        _ => "Any".into(),
    });
    union(written, "Any")
}

/// A JSON literal as Python writes it.
fn py_literal(json: &str) -> String {
    match json {
        "true" => "True".into(),
        "false" => "False".into(),
        "null" => "None".into(),
        other => other.into(),
    }
}

fn ts_type(schema: &Value, depth: usize) -> String {
    if depth > MAX_DEPTH {
        return "unknown".into();
    }
    if let Some(values) = enum_values(schema) {
        return values.join(" | ");
    }
    if let Some(alternatives) = alternatives(schema) {
        return union(
            alternatives.iter().map(|s| ts_type(s, depth + 1)),
            "unknown",
        );
    }
    let written = types(schema).into_iter().map(|t| match t {
        "string" => "string".into(),
        "integer" | "number" => "number".into(),
        "boolean" => "boolean".into(),
        "null" => "null".into(),
        "array" => match schema.get("items") {
            Some(items) => format!("Array<{}>", ts_type(items, depth + 1)),
            None => "unknown[]".into(),
        },
        "object" => ts_object(schema, depth),
        _ => "unknown".into(),
    });
    union(written, "unknown")
}

fn ts_object(schema: &Value, depth: usize) -> String {
    let (params, more) = params(schema);
    if params.is_empty() {
        return "Record<string, unknown>".into();
    }
    let mut fields: Vec<String> = params
        .iter()
        .map(|p| {
            let optional = if p.required { "" } else { "?" };
            format!(
                "{}{optional}: {}",
                ts_key(p.name),
                ts_type(p.schema, depth + 1)
            )
        })
        .collect();
    if more {
        fields.push("[name: string]: unknown".into());
    }
    format!("{{{}}}", fields.join("; "))
}

/// The alternatives joined with `|`, each once; `none` when there are none.
fn union(alternatives: impl Iterator<Item = String>, none: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    for alternative in alternatives {
        if !seen.contains(&alternative) {
            seen.push(alternative);
        }
    }
    if seen.is_empty() {
        none.into()
    } else {
        seen.join(" | ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstreams::listed::listed_tool;
    use serde_json::json;

    fn tool(name: &str, description: &str, schema: Value) -> AllowedTool {
        AllowedTool::new(&listed_tool(name, description, schema))
    }

    fn search() -> AllowedTool {
        tool(
            "search-issues",
            "Searches the tracker's issues.",
            json!({
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "description": "At most this many."},
                    "query": {"type": "string", "description": "The words to look for."},
                    "state": {"enum": ["open", "closed"]},
                    "labels": {"type": "array", "items": {"type": "string"}},
                    "since": {"type": ["string", "null"]},
                },
                "required": ["query"],
            }),
        )
    }

    #[test]
    fn python_stubs_take_keyword_arguments_with_types_and_a_docstring() {
        let stub = python(&search());
        assert!(
            stub.starts_with(
                "def search_issues(*, query: str, labels: list[str] = ..., limit: int = ..., since: str | None = ..., state: Literal[\"open\", \"closed\"] = ...) -> Any:\n    \"\"\"Searches the tracker's issues."
            ),
            "{stub}"
        );
        assert!(
            stub.contains("issues.\n\n    Args:\n        query: The words to look for.\n        limit: At most this many.\n    \"\"\""),
            "{stub}"
        );
        assert!(stub.ends_with("\"\"\""), "{stub}");
        let bare = python(&tool("ping", "Answers pong.", json!({"type": "object"})));
        assert_eq!(
            bare,
            "def ping() -> Any:\n    \"\"\"Answers pong.\n    \"\"\""
        );
    }

    #[test]
    fn typescript_stubs_take_one_object_with_jsdoc() {
        let stub = typescript(&search());
        assert!(
            stub.ends_with(
                "search_issues(args: {query: string; labels?: Array<string>; limit?: number; since?: string | null; state?: \"open\" | \"closed\"}): Promise<any>;"
            ),
            "{stub}"
        );
        assert!(stub.starts_with("/**\n * Searches the tracker's issues.\n * @param args.query The words to look for.\n * @param args.limit At most this many.\n */\n"), "{stub}");
        let bare = typescript(&tool("ping", "Answers pong.", json!({"type": "object"})));
        assert!(bare.ends_with("ping(args?: {}): Promise<any>;"), "{bare}");
    }

    #[test]
    fn odd_names_and_hostile_descriptions_stay_inside_their_stub() {
        let odd = tool(
            "get.user",
            "Ends a docstring \"\"\" and a comment */ early.",
            json!({"properties": {"user-id": {"type": "integer"}, "class": {"type": "string"}}, "required": ["user-id"]}),
        );
        let py = python(&odd);
        assert!(
            py.starts_with("def get_user(*, **more: Any) -> Any:"),
            "{py}"
        );
        assert!(
            !py["def".len()..py.len() - 3].contains("\"\"\" and"),
            "{py}"
        );
        assert!(
            py.contains("Pass \"user-id\", \"class\" as **{name: value}."),
            "{py}"
        );
        let ts = typescript(&odd);
        assert!(
            ts.contains("get_user(args: {\"user-id\": number; \"class\"?: string}): Promise<any>;"),
            "{ts}"
        );
        assert!(ts.contains("comment *\\/ early"), "{ts}");
        assert_eq!(ts.matches("*/").count(), 1, "{ts}");
    }

    #[test]
    fn deep_and_unknown_schemas_end_in_any() {
        let deep = json!({"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}}}});
        assert_eq!(py_type(&deep, 0), "list[list[list[list[Any]]]]");
        assert_eq!(ts_type(&json!({}), 0), "unknown");
        assert_eq!(
            py_type(
                &json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
                0
            ),
            "str | int"
        );
        assert_eq!(
            ts_type(
                &json!({"type": "object", "properties": {"a": {"type": "boolean"}}}),
                0
            ),
            "{a?: boolean}"
        );
        assert_eq!(
            py_type(&json!({"enum": [true, null, 1]}), 0),
            "Literal[True, None, 1]"
        );
    }
}
