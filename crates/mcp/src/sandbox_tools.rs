//! The sandbox tools: `create_sandbox`, `upload_file`, `download_file`, `list_files` and
//! `close_sandbox`. Their definitions (schemas, descriptions, annotations); the parsing of
//! a call's arguments is in [`crate::sandbox_args`], the calls themselves in
//! `crate::server::sandboxes`; what they share with the process tools is
//! [`SandboxCall`].
//!
//! A sandbox is a runner session behind an opaque `sandboxId` ([`crate::handle`]): its
//! files, and its interpreters' variables, stay between the `run_*` calls that name it.

use std::sync::Arc;

use rmcp::model::JsonObject;
use sandbox_protocol::api::Limits;
use serde_json::{json, Map, Value};

use crate::sandbox_call::SandboxCall;
use crate::schema::{nullable, object};
use crate::wording;

/// The largest file `download_file` returns, in bytes: larger ones are refused with a
/// way to make them smaller.
pub const DOWNLOAD_CAP_BYTES: usize = 4 << 20;

/// The home folder, which a sandbox's paths are relative to.
pub const HOME: &str = "/home/sandbox";

/// One of the sandbox tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxTool {
    /// `create_sandbox`.
    Create,
    /// `upload_file`.
    Upload,
    /// `download_file`.
    Download,
    /// `list_files`.
    List,
    /// `close_sandbox`.
    Close,
}

impl SandboxCall for SandboxTool {
    fn name(self) -> &'static str {
        match self {
            SandboxTool::Create => "create_sandbox",
            SandboxTool::Upload => "upload_file",
            SandboxTool::Download => "download_file",
            SandboxTool::List => "list_files",
            SandboxTool::Close => "close_sandbox",
        }
    }

    fn failed_fields(self) -> Map<String, Value> {
        let fields = match self {
            SandboxTool::Create => {
                json!({"sandboxId": null, "expiresAt": null, "idleTimeoutMs": null})
            }
            SandboxTool::Upload => json!({"path": null, "size": null}),
            SandboxTool::Download => json!({"path": null, "size": null, "mimeType": null}),
            SandboxTool::List => json!({"files": [], "truncated": false}),
            SandboxTool::Close => json!({"closed": false}),
        };
        match fields {
            Value::Object(map) => map,
            _ => unreachable!("written as objects"),
        }
    }

    fn title(self) -> &'static str {
        match self {
            SandboxTool::Create => "Create a sandbox",
            SandboxTool::Upload => "Upload a file to a sandbox",
            SandboxTool::Download => "Download a file from a sandbox",
            SandboxTool::List => "List a sandbox's files",
            SandboxTool::Close => "Close a sandbox",
        }
    }

    fn description(self, limits: &Limits) -> String {
        match self {
            SandboxTool::Create => format!(
                "Creates a sandbox that stays between calls, for multi-step work and data to \
                 keep: pass the sandboxId it returns to the run_* tools (run_bash, run_python, \
                 run_node, ...), and the files in {HOME} and /tmp, Python, Node.js and \
                 TypeScript variables, functions and \
                 imports, and background processes are still there at the next call with that \
                 sandboxId. upload_file puts files in, download_file and list_files take them \
                 out; start_process runs a server or a long job in it, to watch \
                 (process_output) and feed (write_stdin) while it runs. For a self-contained program, call run_* without sandboxId: a fresh \
                 one-shot sandbox is the default. With snapshotId (from snapshot_sandbox) the \
                 new sandbox starts with that snapshot's files. A sandbox has {resources}, the \
                 same limits per call as a one-shot run, and runs one call at a time. After \
                 idleTimeoutMs without a call it is paused (its files kept, woken by its next \
                 call) or ended, as the runner is set; pause_sandbox pauses it at once before \
                 a long wait. Awake, it ends at expiresAt at the latest (both in the answer); \
                 paused, it is kept for as long as the runner allows, and a wake starts its \
                 time again. close_sandbox ends it: close it when done.",
                resources = wording::sandbox_resources(limits),
            ),
            SandboxTool::Upload => format!(
                "Writes a file into a sandbox from create_sandbox, for its programs to read. \
                 path is relative to the home folder {HOME} (folders are made as needed; an \
                 existing file is replaced). content is the text, or the bytes in base64 with \
                 encoding \"base64\" (for binary files)."
            ),
            SandboxTool::Download => format!(
                "Reads a file from a sandbox from create_sandbox. path is relative to the home \
                 folder {HOME} (a program's outputs/ files are under outputs/). Text comes back \
                 as text, PNG, JPEG, GIF and WebP images as images, other files as an embedded \
                 resource (base64). At most {cap}: have a program make a larger file smaller \
                 first.",
                cap = wording::bytes(DOWNLOAD_CAP_BYTES as u64),
            ),
            SandboxTool::List => format!(
                "Lists the files and folders in a sandbox's home folder {HOME}, recursively, \
                 with their sizes."
            ),
            SandboxTool::Close => "Ends a sandbox from create_sandbox now: its processes are \
                 stopped and its files deleted, and its sandboxId stops working. Close a \
                 sandbox once its work is done; one left alone ends after its idle timeout."
                .to_owned(),
        }
    }

    fn input_schema(self) -> Arc<JsonObject> {
        let sandbox_id = json!({
            "type": "string",
            "description": "The sandboxId create_sandbox returned.",
        });
        let path = |what: &str| {
            json!({
                "type": "string",
                "description": format!("{what}, relative to the home folder {HOME}, such as data/input.csv."),
            })
        };
        let duration = |what: &str| json!({ "type": "integer", "minimum": 1, "description": what });
        object(match self {
            SandboxTool::Create => json!({
                "type": "object",
                "properties": {
                    "idleTimeoutMs": duration("End the sandbox after this many milliseconds without a call (the server's default when absent, within its maximum)."),
                    "ttlMs": duration("End the sandbox this many milliseconds after it was made, whatever it does (the server's default when absent, within its maximum)."),
                    "snapshotId": {
                        "type": "string",
                        "description": "Start from the files of this snapshot (the snapshotId snapshot_sandbox returned) instead of an empty home folder.",
                    },
                },
            }),
            SandboxTool::Upload => json!({
                "type": "object",
                "properties": {
                    "sandboxId": sandbox_id,
                    "path": path("Where to write the file"),
                    "content": {
                        "type": "string",
                        "description": "The file's content: text, or base64 with encoding \"base64\".",
                    },
                    "encoding": {
                        "type": "string",
                        "enum": ["utf-8", "base64"],
                        "default": "utf-8",
                        "description": "How content is written: \"utf-8\" text (the default) or \"base64\" bytes.",
                    },
                },
                "required": ["sandboxId", "path", "content"],
            }),
            SandboxTool::Download => json!({
                "type": "object",
                "properties": { "sandboxId": sandbox_id, "path": path("The file to read") },
                "required": ["sandboxId", "path"],
            }),
            SandboxTool::List | SandboxTool::Close => json!({
                "type": "object",
                "properties": { "sandboxId": sandbox_id },
                "required": ["sandboxId"],
            }),
        })
    }

    fn output_properties(self) -> Value {
        let text = |d: &str| nullable("string", d);
        let count = |d: &str| nullable("integer", d);
        match self {
            SandboxTool::Create => json!({
                "sandboxId": text("The sandbox's id: pass it as sandboxId to the other tools."),
                "expiresAt": text("When the sandbox ends at the latest (RFC 3339, UTC)."),
                "idleTimeoutMs": count("The sandbox ends after this many milliseconds without a call."),
            }),
            SandboxTool::Upload => json!({
                "path": text("The file written, relative to the home folder."),
                "size": count("Bytes written."),
            }),
            SandboxTool::Download => json!({
                "path": text("The file read, relative to the home folder."),
                "size": count("Its size in bytes."),
                "mimeType": text("Its media type."),
            }),
            SandboxTool::List => json!({
                "files": {
                    "type": "array",
                    "description": "Files and folders, folders before what they hold.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": { "type": "string", "description": "Relative to the home folder." },
                            "size": { "type": "integer", "minimum": 0, "description": "Bytes (0 for a folder; a symlink's is the length of what it points to)." },
                            "kind": {
                                "type": "string",
                                "enum": ["file", "dir", "symlink", "fifo", "socket", "device"],
                                "description": "Only a file can be downloaded or uploaded; a symlink is listed, never followed.",
                            },
                        },
                        "required": ["path", "size", "kind"],
                    },
                },
                "truncated": { "type": "boolean", "description": "The listing stopped early (too many entries, too many bytes, or folders too deep): more exist than listed." },
            }),
            SandboxTool::Close => json!({
                "closed": { "type": "boolean", "description": "The sandbox was closed." },
            }),
        }
    }

    fn hints(self) -> (bool, bool, bool) {
        match self {
            SandboxTool::Create => (false, false, false),
            SandboxTool::Upload => (false, true, true),
            SandboxTool::Download | SandboxTool::List => (true, false, true),
            SandboxTool::Close => (false, true, true),
        }
    }

    fn says_resources(self) -> bool {
        self == SandboxTool::Create
    }
}

impl SandboxTool {
    /// Every sandbox tool, in the order `tools/list` gives them.
    pub const ALL: [SandboxTool; 5] = [
        SandboxTool::Create,
        SandboxTool::Upload,
        SandboxTool::Download,
        SandboxTool::List,
        SandboxTool::Close,
    ];

    /// The tool a name stands for.
    pub fn of(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_say_when_a_sandbox_helps() {
        let limits = Limits::default();
        let create = SandboxTool::Create.definition(&limits);
        let text = create.description.as_deref().unwrap_or_default();
        for needle in [
            "multi-step",
            "sandboxId",
            "variables",
            "one-shot",
            "default",
            "close_sandbox",
            "start_process",
            "no network",
            "256 MB",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
        let create_schema = Value::Object((*create.output_schema.unwrap()).clone());
        for field in ["sandboxId", "expiresAt", "idleTimeoutMs"] {
            assert!(create_schema["properties"][field].is_object(), "{field}");
        }
    }
}
