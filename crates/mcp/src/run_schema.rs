//! What every run tool (`run_<language>` and `run_code`) shares: the arguments beside the
//! program (`timeoutMs`, `sandboxId`), the schema of a run's result (`structuredContent`),
//! and the definition's frame (title, annotations).

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use sandbox_protocol::api::Limits;
use serde_json::{json, Value};

use crate::schema::{error_schema, nullable, object};
use crate::wording::bytes;

/// The schema of every result's `structuredContent` (see [`crate::report::RunReport`]).
pub fn output_schema(limits: &Limits) -> Arc<JsonObject> {
    let cap = bytes(limits.output_cap_bytes);
    let stdout_cap = format!("Stdout passed the {cap} cap and the program was stopped.");
    let stderr_cap = format!("Stderr passed the {cap} cap and the program was stopped.");
    let count = |d: &str| json!({ "type": "integer", "minimum": 0, "description": d });
    let flag = |d: &str| json!({ "type": "boolean", "description": d });
    let text = |d: &str| json!({ "type": "string", "description": d });
    object(json!({
        "type": "object",
        "properties": {
            "stdout": text("Standard output, cut to its first and last lines when long."),
            "stderr": text("Standard error, cut to its first and last lines when long."),
            "stdoutOmittedBytes": count("Bytes of stdout left out of `stdout`."),
            "stderrOmittedBytes": count("Bytes of stderr left out of `stderr`."),
            "stdoutOmittedLines": count("Lines of stdout left out of `stdout` (wholly or in part)."),
            "stderrOmittedLines": count("Lines of stderr left out of `stderr` (wholly or in part)."),
            "exitCode": nullable("integer", "Exit status (128 + signal after a kill); null when nothing ran."),
            "durationMs": nullable("integer", "Run time in milliseconds; null when nothing ran."),
            "timedOut": flag("The program hit its timeout and was killed."),
            "compileError": flag(
                "The program did not compile (compiled languages): stdout, stderr and \
                 exitCode are the compiler's, and the program never ran."
            ),
            "oomKilled": flag("The program ran out of memory and was killed."),
            "stdoutTruncated": flag(&stdout_cap),
            "stderrTruncated": flag(&stderr_cap),
            "outputs": {
                "type": "array",
                "description": "The files the program wrote under /home/sandbox/outputs/ \
                    (path relative to that folder); their contents follow the text.",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": text("Relative to /home/sandbox/outputs/."),
                        "size": count("Bytes."),
                        "mimeType": text("The media type, from the file's bytes and name."),
                    },
                    "required": ["path", "size", "mimeType"],
                },
            },
            "outputsTruncated": flag("More files were written under outputs/ than are listed."),
            "stateLost": flag(
                "Only for a run in a sandbox: the sandbox's interpreter was restarted, so the \
                 variables and imports of earlier calls are gone (its files remain)."
            ),
            "resumed": flag(
                "Only for a run in a sandbox: the sandbox was paused (pause_sandbox, or idle) \
                 and this run woke it; stateLost says whether its variables and processes were \
                 lost (its files never are)."
            ),
            "error": error_schema("Why the sandbox could not run the program; null when it ran."),
        },
        "required": [
            "stdout", "stderr", "stdoutOmittedBytes", "stderrOmittedBytes",
            "stdoutOmittedLines", "stderrOmittedLines", "exitCode",
            "durationMs", "timedOut", "compileError", "oomKilled", "stdoutTruncated", "stderrTruncated",
            "outputs", "outputsTruncated", "error",
        ],
    }))
}

/// `timeoutMs` and `sandboxId`, as the input schema's properties.
pub fn run_properties(limits: &Limits, default_timeout_ms: u64) -> JsonObject {
    let properties = json!({
        "timeoutMs": {
            "type": "integer",
            "minimum": 1,
            "maximum": limits.max_timeout_ms,
            "description": format!(
                "Wall-clock limit in milliseconds (default {default_timeout_ms})."
            ),
        },
        "sandboxId": {
            "type": "string",
            "description": "The sandboxId create_sandbox returned, to run in that sandbox \
                (files and variables kept between calls). Omit it for a fresh one-shot sandbox.",
        },
    });
    match properties {
        Value::Object(properties) => properties,
        _ => JsonObject::new(),
    }
}

/// An input schema: the program's own `properties` (the code, for `run_code` the
/// language too), then [`run_properties`]; `required` as given.
pub fn input_schema(
    mut properties: JsonObject,
    required: &[&str],
    limits: &Limits,
    default_timeout_ms: u64,
) -> Arc<JsonObject> {
    properties.extend(run_properties(limits, default_timeout_ms));
    object(json!({
        "type": "object",
        "properties": properties,
        "required": required,
    }))
}

/// A run tool called `name`, titled `title`: the result's schema and the annotations of
/// every run tool (it changes the sandbox's files, destroys nothing outside it, is not
/// idempotent and reaches no world beyond the sandbox).
pub fn run_tool(
    name: String,
    title: String,
    description: String,
    input: Arc<JsonObject>,
    limits: &Limits,
) -> Tool {
    let annotations = ToolAnnotations::with_title(&title)
        .read_only(false)
        .destructive(false)
        .idempotent(false)
        .open_world(false);
    let mut tool = Tool::new(name, description, input);
    tool.title = Some(title);
    tool.output_schema = Some(output_schema(limits));
    tool.annotations = Some(annotations);
    tool
}
