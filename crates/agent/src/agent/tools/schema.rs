//! What a tool's input schema says of its parameters, for the modules' documentation:
//! each property's name, JSON type, whether it is required, and its description.
//! Anything the schema leaves out or gives in another shape is simply not said (a tool
//! whose schema is not an object with `properties` documents no parameter).

use sandbox_protocol::tools::OfferedTool;
use serde_json::Value;

/// One parameter of a tool, from its input schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Parameter {
    /// The property's name, as the tool takes it (not necessarily an identifier).
    pub(super) name: String,
    /// Its JSON type (`string`, `integer`, ...; several joined by `|`), or empty when
    /// the schema gives none.
    pub(super) kind: String,
    /// Whether the schema lists it as required.
    pub(super) required: bool,
    /// Its description, or empty.
    pub(super) description: String,
}

/// The parameters of `tool`: the required ones first, each group in the schema's order
/// of property names.
pub(super) fn parameters(tool: &OfferedTool) -> Vec<Parameter> {
    let Some(properties) = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    let required: Vec<&str> = tool
        .input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut parameters: Vec<Parameter> = properties
        .iter()
        .map(|(name, schema)| Parameter {
            name: name.clone(),
            kind: kind(schema),
            required: required.contains(&name.as_str()),
            description: schema
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        })
        .collect();
    parameters.sort_by_key(|p| !p.required);
    parameters
}

/// A schema's `type`: one name, or several joined by `|`.
fn kind(schema: &Value) -> String {
    match schema.get("type") {
        Some(Value::String(name)) => name.clone(),
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("|"),
        _ => String::new(),
    }
}

/// The documentation of a tool as plain text: its description, then its parameters,
/// one a line (`name (type, required): description`).
pub(super) fn doc(tool: &OfferedTool) -> String {
    let mut text = if tool.description.trim().is_empty() {
        format!("The tool {:?}.", tool.name)
    } else {
        tool.description.trim().to_owned()
    };
    let parameters = parameters(tool);
    if !parameters.is_empty() {
        text.push_str("\n\nParameters:");
        for p in &parameters {
            text.push_str(&format!("\n  {}", line(p)));
        }
    }
    text
}

/// A parameter's line of documentation.
pub(super) fn line(p: &Parameter) -> String {
    let kind = if p.kind.is_empty() { "any" } else { &p.kind };
    let need = if p.required { "required" } else { "optional" };
    let mut line = format!("{} ({kind}, {need})", p.name);
    if !p.description.is_empty() {
        line.push_str(": ");
        line.push_str(&p.description);
    }
    line
}

/// `text` as a JSON string literal, which is also a string literal of Python and of
/// JavaScript: quotes, backslashes and control characters escaped, no raw line break.
pub(super) fn literal(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(description: &str, schema: Value) -> OfferedTool {
        OfferedTool {
            name: "search-issues".into(),
            description: description.into(),
            input_schema: schema,
        }
    }

    #[test]
    fn parameters_come_from_the_properties_required_first() {
        let schema = json!({
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "description": "At most this many."},
                "query": {"type": "string", "description": "What to look for."},
                "tags": {"type": ["array", "null"]},
                "x": true
            },
            "required": ["query"]
        });
        let found = parameters(&tool("", schema));
        let names: Vec<_> = found
            .iter()
            .map(|p| (p.name.as_str(), p.kind.as_str(), p.required))
            .collect();
        assert_eq!(
            names,
            [
                ("query", "string", true),
                ("limit", "integer", false),
                ("tags", "array|null", false),
                ("x", "", false),
            ]
        );
        assert!(parameters(&tool("", json!({"type": "object"}))).is_empty());
        assert!(parameters(&tool("", Value::Null)).is_empty());
    }

    #[test]
    fn the_doc_says_the_description_then_each_parameter() {
        let schema = json!({
            "properties": {"query": {"type": "string", "description": "What."}},
            "required": ["query"]
        });
        assert_eq!(
            doc(&tool(" Finds issues. ", schema)),
            "Finds issues.\n\nParameters:\n  query (string, required): What."
        );
        assert_eq!(doc(&tool("", Value::Null)), "The tool \"search-issues\".");
    }

    #[test]
    fn a_literal_holds_any_text_on_one_line() {
        let text = "a \"quote\", a \\ backslash, */ and </script>\nnew line\u{7}\u{2028}";
        let literal = literal(text);
        assert!(!literal.contains('\n'));
        assert_eq!(serde_json::from_str::<String>(&literal).unwrap(), text);
    }
}
