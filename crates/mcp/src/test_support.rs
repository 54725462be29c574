//! Helpers the unit tests share.

use rmcp::model::{CallToolResult, JsonObject};
use serde_json::Value;

/// A call's arguments, written as a `json!` object.
pub(crate) fn args(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("arguments are an object, not {other}"),
    }
}

/// The text blocks of a result, joined.
pub(crate) fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}
