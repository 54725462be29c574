//! What the sandbox tools return: text for the model and `structuredContent` in the shape
//! of each tool's output schema ([`crate::sandbox_tools`]), with `error` null on success;
//! a failed call has the same fields, empty, and `error` saying what to do. The process
//! tools' results ([`crate::process_report`]) take the same shape from here.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use sandbox_protocol::agent::FileKind;
use sandbox_protocol::api::{FileList, SessionInfo};
use sandbox_protocol::media;
use serde_json::{json, Map, Value};

use crate::handle::{HandleError, HandleKind};
use crate::outputs;
use crate::report::ReportError;
use crate::runner_client::RunnerError;
use crate::sandbox_call::SandboxCall;
use crate::sandbox_tools::{SandboxTool, HOME};
use crate::tools::ArgsError;
use crate::wording::{self, plural};

/// Why a call could not reach the sandbox (or, for `create_sandbox` with `snapshotId`,
/// the snapshot) its handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SandboxIdError {
    /// The handle does not open: malformed, altered, forged, another credential's, or a
    /// handle of another kind.
    #[error(transparent)]
    Handle(#[from] HandleError),
    /// The request carried no credential to check the id against (a bug: `/mcp` needs one).
    #[error("this request carries no credential to check the sandboxId or snapshotId against")]
    NoCredential,
}

impl SandboxIdError {
    /// A stable code for the result.
    pub fn code(&self) -> &'static str {
        match self {
            SandboxIdError::Handle(error) if error.kind() == Some(HandleKind::Snapshot) => {
                "invalid_snapshot_id"
            }
            SandboxIdError::Handle(_) | SandboxIdError::NoCredential => "invalid_sandbox_id",
        }
    }
}

/// A result of `tool`: `content`, and `fields` over the failed call's in its
/// `structuredContent`, with `error`.
pub(crate) fn result(
    tool: impl SandboxCall,
    content: Vec<ContentBlock>,
    fields: Value,
    error: Option<ReportError>,
) -> CallToolResult {
    let mut structured = tool.failed_fields();
    if let Value::Object(fields) = fields {
        structured.extend(fields);
    }
    let failed = error.is_some();
    // ReportError holds strings and a boolean: it always serializes.
    structured.insert(
        "error".into(),
        error
            .and_then(|e| serde_json::to_value(e).ok())
            .unwrap_or(Value::Null),
    );
    let mut result = if failed {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = Some(Value::Object(structured));
    result
}

/// A failed call of `tool`.
pub fn failure(
    tool: impl SandboxCall,
    code: &'static str,
    message: String,
    retryable: bool,
) -> CallToolResult {
    let text = format!("{} failed: {message}", tool.name());
    let error = ReportError {
        code,
        message,
        retryable,
    };
    result(
        tool,
        vec![ContentBlock::text(text)],
        Value::Object(Map::new()),
        Some(error),
    )
}

/// A call of `tool` the runner (or its absence) refused.
pub fn from_runner_error(tool: impl SandboxCall, error: &RunnerError) -> CallToolResult {
    failure(tool, error.code(), error.to_string(), error.retryable())
}

/// A call of `tool` with unusable arguments.
pub fn from_args_error(tool: impl SandboxCall, error: &ArgsError) -> CallToolResult {
    failure(tool, "invalid_arguments", error.to_string(), false)
}

/// A call of `tool` whose sandboxId does not lead to a sandbox.
pub fn from_sandbox_id_error(tool: impl SandboxCall, error: &SandboxIdError) -> CallToolResult {
    failure(tool, error.code(), error.to_string(), false)
}

/// `create_sandbox`'s answer.
pub fn created(sandbox_id: &str, info: &SessionInfo) -> CallToolResult {
    let text = format!(
        "Created a sandbox. sandboxId: {sandbox_id}\n\
         Pass it as sandboxId to the run_* tools (files in {HOME} and /tmp, and Python, \
         Node.js and TypeScript variables, stay between those calls), to upload_file, \
         download_file and list_files, and to start_process for a server or a long job; \
         pause_sandbox, snapshot_sandbox and fork_sandbox keep or copy it. After {idle} ms \
         without a call it is paused (its files kept, woken by its next call) or ended, as \
         the runner is set; awake, it ends at {expires} at the latest, or when you call \
         close_sandbox.",
        idle = info.idle_timeout_ms,
        expires = info.expires_at,
    );
    result(
        SandboxTool::Create,
        vec![ContentBlock::text(text)],
        json!({
            "sandboxId": sandbox_id,
            "expiresAt": info.expires_at,
            "idleTimeoutMs": info.idle_timeout_ms,
        }),
        None,
    )
}

/// `upload_file`'s answer.
pub fn uploaded(path: &str, size: usize) -> CallToolResult {
    let text = format!("Wrote {} to {HOME}/{path}.", plural(size, "byte"));
    result(
        SandboxTool::Upload,
        vec![ContentBlock::text(text)],
        json!({ "path": path, "size": size }),
        None,
    )
}

/// `download_file`'s answer: the text of a text file, an image as an image, any other
/// file as an embedded blob resource.
pub fn downloaded(path: &str, bytes: Vec<u8>) -> CallToolResult {
    let size = bytes.len();
    let mime = media::mime_type(path, &bytes, true);
    let content = if media::is_image(mime) {
        ContentBlock::image(STANDARD.encode(&bytes), mime)
    } else {
        match String::from_utf8(bytes) {
            Ok(text) if media::is_text(mime) => ContentBlock::text(text),
            Ok(text) => blob(path, text.as_bytes(), mime),
            Err(not_text) => blob(path, not_text.as_bytes(), mime),
        }
    };
    result(
        SandboxTool::Download,
        vec![content],
        json!({ "path": path, "size": size, "mimeType": mime }),
        None,
    )
}

fn blob(path: &str, bytes: &[u8], mime: &str) -> ContentBlock {
    ContentBlock::resource(
        ResourceContents::blob(STANDARD.encode(bytes), outputs::uri(path)).with_mime_type(mime),
    )
}

/// `list_files`' answer.
pub fn listed(list: FileList) -> CallToolResult {
    let count = |kind| list.files.iter().filter(|f| f.kind == kind).count();
    let (files, dirs) = (count(FileKind::File), count(FileKind::Dir));
    let others = list.files.len() - files - dirs;
    let mut lines = vec![format!(
        "{HOME}: {} and {}{}{}",
        plural(files, "file"),
        plural(dirs, "folder"),
        if others > 0 {
            format!(", {} (symlinks, FIFOs, sockets)", plural(others, "other"))
        } else {
            String::new()
        },
        if list.truncated {
            " (more than listed: the listing stops there)"
        } else {
            ""
        }
    )];
    for entry in &list.files {
        lines.push(match entry.kind {
            FileKind::Dir => format!("{}/", entry.path),
            FileKind::File => format!("{} ({})", entry.path, wording::bytes(entry.size)),
            kind => format!("{} ({}, not a regular file)", entry.path, kind.described()),
        });
    }
    let fields = json!({
        "files": serde_json::to_value(&list.files).unwrap_or_else(|_| json!([])),
        "truncated": list.truncated,
    });
    result(
        SandboxTool::List,
        vec![ContentBlock::text(lines.join("\n"))],
        fields,
        None,
    )
}

/// `close_sandbox`'s answer.
pub fn closed() -> CallToolResult {
    result(
        SandboxTool::Close,
        vec![ContentBlock::text(
            "Closed the sandbox: its processes and files are gone, and its sandboxId no longer \
             works. create_sandbox makes a new one.",
        )],
        json!({ "closed": true }),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_protocol::agent::FileEntry;

    fn text_of(result: &CallToolResult) -> String {
        result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect()
    }

    #[test]
    fn created_gives_the_contract_fields() {
        let info = SessionInfo {
            id: "runner-id".into(),
            idle_timeout_ms: 600_000,
            expires_at: "2026-12-04T07:00:00.000Z".into(),
            runs: 0,
            busy: false,
            state: sandbox_protocol::snapshot::SessionState::Active,
            paused_at: None,
            egress: None,
        };
        let result = created("sbx_abc", &info);
        assert_eq!(result.is_error, Some(false));
        assert_eq!(
            result.structured_content.unwrap(),
            json!({
                "sandboxId": "sbx_abc",
                "expiresAt": "2026-12-04T07:00:00.000Z",
                "idleTimeoutMs": 600_000,
                "error": null,
            })
        );
        assert!(text_of(&created("sbx_abc", &info)).contains("sbx_abc"));
        assert!(!text_of(&created("sbx_abc", &info)).contains("runner-id"));
    }

    #[test]
    fn downloads_come_back_as_text_image_or_blob() {
        let text = downloaded("notes/a.txt", "héllo\n".into());
        assert_eq!(text_of(&text), "héllo\n");
        assert_eq!(text.structured_content.unwrap()["mimeType"], "text/plain");
        for (name, bytes, mime) in [
            ("p.png", &b"\x89PNG\r\n\x1a\nxx"[..], "image/png"),
            ("j", &b"\xff\xd8\xff\xe0xx"[..], "image/jpeg"),
            ("g.gif", &b"GIF89a.."[..], "image/gif"),
            ("w", &b"RIFF\0\0\0\0WEBPVP8 "[..], "image/webp"),
        ] {
            let image = downloaded(name, bytes.to_vec());
            let block = image.content[0].as_image().expect("an image");
            assert_eq!(block.mime_type, mime);
            assert_eq!(STANDARD.decode(&block.data).unwrap(), bytes);
        }
        let binary = downloaded("data.bin", vec![0, 159, 146, 150]);
        match &binary.content[0]
            .as_resource()
            .expect("a resource")
            .resource
        {
            ResourceContents::BlobResourceContents {
                blob, mime_type, ..
            } => {
                assert_eq!(STANDARD.decode(blob).unwrap(), [0, 159, 146, 150]);
                assert_eq!(mime_type.as_deref(), Some("application/octet-stream"));
            }
            other => panic!("{other:?}"),
        }
        // An ASCII PDF is still a PDF.
        let pdf = downloaded("r.pdf", b"%PDF-1.4 ascii".to_vec());
        assert!(pdf.content[0].as_resource().is_some());
    }

    #[test]
    fn failures_keep_the_schema_and_say_what_to_do() {
        let gone = from_runner_error(SandboxTool::List, &RunnerError::SandboxNotFound);
        assert_eq!(gone.is_error, Some(true));
        assert!(
            text_of(&gone).contains("create_sandbox"),
            "{}",
            text_of(&gone)
        );
        let structured = gone.structured_content.unwrap();
        assert_eq!(structured["files"], json!([]));
        assert_eq!(structured["error"]["code"], "sandbox_not_found");
        let forged = from_sandbox_id_error(
            SandboxTool::Close,
            &SandboxIdError::Handle(HandleError::NotValid(HandleKind::Sandbox)),
        );
        assert!(text_of(&forged).contains("create_sandbox"));
        assert_eq!(
            forged.structured_content.unwrap()["error"]["code"],
            "invalid_sandbox_id"
        );
    }

    #[test]
    fn a_listing_names_files_folders_and_what_else_is_there() {
        let entry = |path: &str, size, kind| FileEntry {
            path: path.into(),
            size,
            kind,
        };
        let list = FileList {
            files: vec![
                entry("data", 0, FileKind::Dir),
                entry("data/a.csv", 2048, FileKind::File),
                entry("link", 1, FileKind::Symlink),
                entry("pipe", 0, FileKind::Fifo),
            ],
            truncated: true,
        };
        let result = listed(list);
        let text = text_of(&result);
        assert!(
            text.contains("1 file and 1 folder, 2 others (symlinks, FIFOs, sockets) (more"),
            "{text}"
        );
        assert!(text.contains("data/\ndata/a.csv (2 KiB)\nlink (a symlink, not a regular file)\npipe (a FIFO (named pipe), not a regular file)"), "{text}");
        let structured = result.structured_content.unwrap();
        assert_eq!(structured["files"][1]["path"], "data/a.csv");
        assert_eq!(structured["files"][2]["kind"], "symlink");
        assert_eq!(structured["truncated"], true);
    }
}
