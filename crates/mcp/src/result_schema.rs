//! The schema of a run's result (`structuredContent`), the same for every run tool and
//! `run_code`.

use std::sync::Arc;

use rmcp::model::JsonObject;
use sandbox_protocol::api::Limits;
use serde_json::json;

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
