//! Pieces of JSON Schema that the run tools' definitions ([`crate::tools`]) and the
//! sandbox tools' ([`crate::sandbox_tools`]) share.

use std::sync::Arc;

use rmcp::model::JsonObject;
use serde_json::{json, Value};

/// A JSON schema written as a `json!` object.
pub(crate) fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("schemas are written as JSON objects"),
    }
}

/// A JSON schema property of `kind` or null.
pub(crate) fn nullable(kind: &str, description: &str) -> Value {
    json!({ "type": [kind, "null"], "description": description })
}

/// The schema of a result's `error`: null when the call did what it was asked.
pub(crate) fn error_schema(description: &str) -> Value {
    let flag = |d: &str| json!({ "type": "boolean", "description": d });
    let text = |d: &str| json!({ "type": "string", "description": d });
    json!({
        "type": ["object", "null"],
        "description": description,
        "properties": {
            "code": text("A stable code, such as not_configured, runner_busy or sandbox_not_found."),
            "message": text("What happened and what to do."),
            "retryable": flag("Whether the same call may succeed later."),
        },
        "required": ["code", "message", "retryable"],
    })
}
