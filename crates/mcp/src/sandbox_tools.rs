//! The sandbox tools: `create_sandbox`, `upload_file`, `download_file`, `list_files` and
//! `close_sandbox`. Their definitions (schemas, descriptions, annotations) and the parsing
//! of a call's arguments; the calls themselves are in `crate::server::sandboxes`.
//!
//! A sandbox is a runner session behind an opaque `sandboxId` ([`crate::handle`]): its
//! files, and its interpreters' variables, stay between the `run_*` calls that name it.

use std::sync::Arc;

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use sandbox_protocol::api::Limits;
use serde_json::{json, Map, Value};

use crate::tools::{self, error_schema, nullable, object, ArgsError};

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

impl SandboxTool {
    /// Every sandbox tool, in the order `tools/list` gives them.
    pub const ALL: [SandboxTool; 5] = [
        SandboxTool::Create,
        SandboxTool::Upload,
        SandboxTool::Download,
        SandboxTool::List,
        SandboxTool::Close,
    ];

    /// The tool's name.
    pub fn name(self) -> &'static str {
        match self {
            SandboxTool::Create => "create_sandbox",
            SandboxTool::Upload => "upload_file",
            SandboxTool::Download => "download_file",
            SandboxTool::List => "list_files",
            SandboxTool::Close => "close_sandbox",
        }
    }

    /// The tool a name stands for.
    pub fn of(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
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

    /// The fields of this tool's `structuredContent` besides `error`, as they are when the
    /// call failed.
    pub fn failed_fields(self) -> Map<String, Value> {
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

    fn description(self, limits: &Limits) -> String {
        match self {
            SandboxTool::Create => format!(
                "Creates a sandbox that stays between calls, for multi-step work and data to \
                 keep: pass the sandboxId it returns to run_bash, run_python and run_node, and \
                 the files in {HOME} and /tmp, Python and Node.js variables, functions and \
                 imports, and background processes are still there at the next call with that \
                 sandboxId. upload_file puts files in, download_file and list_files take them \
                 out. For a self-contained program, call run_* without sandboxId: a fresh \
                 one-shot sandbox is the default. A sandbox has {resources}, the same limits \
                 per call as a one-shot run, and runs one call at a time. It ends after \
                 idleTimeoutMs without a call, at expiresAt at the latest (both in the answer), \
                 or at close_sandbox: close it when done.",
                resources = tools::sandbox_resources(limits),
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
                cap = tools::bytes(DOWNLOAD_CAP_BYTES as u64),
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

    fn output_schema(self) -> Arc<JsonObject> {
        let text = |d: &str| nullable("string", d);
        let count = |d: &str| nullable("integer", d);
        let mut properties = match self {
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
                            "size": { "type": "integer", "minimum": 0, "description": "Bytes (0 for a folder)." },
                            "kind": { "type": "string", "enum": ["file", "dir"] },
                        },
                        "required": ["path", "size", "kind"],
                    },
                },
                "truncated": { "type": "boolean", "description": "There were more entries than listed." },
            }),
            SandboxTool::Close => json!({
                "closed": { "type": "boolean", "description": "The sandbox was closed." },
            }),
        };
        let mut required: Vec<String> = self.failed_fields().keys().cloned().collect();
        required.push("error".into());
        if let Value::Object(map) = &mut properties {
            map.insert(
                "error".into(),
                error_schema("Why the call failed; null when it succeeded."),
            );
        }
        object(json!({ "type": "object", "properties": properties, "required": required }))
    }

    fn annotations(self) -> ToolAnnotations {
        // (read-only, destructive, idempotent)
        let (read_only, destructive, idempotent) = match self {
            SandboxTool::Create => (false, false, false),
            SandboxTool::Upload => (false, true, true),
            SandboxTool::Download | SandboxTool::List => (true, false, true),
            SandboxTool::Close => (false, true, true),
        };
        ToolAnnotations::with_title(self.title())
            .read_only(read_only)
            .destructive(destructive)
            .idempotent(idempotent)
            .open_world(false)
    }

    /// The definition as `tools/list` shows it, for a runner with `limits`.
    pub fn definition(self, limits: &Limits) -> Tool {
        let mut tool = Tool::new(self.name(), self.description(limits), self.input_schema());
        tool.title = Some(self.title().to_owned());
        tool.output_schema = Some(self.output_schema());
        tool.annotations = Some(self.annotations());
        tool
    }
}

/// The arguments of `create_sandbox`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CreateArgs {
    /// `idleTimeoutMs`, if given.
    pub idle_timeout_ms: Option<u64>,
    /// `ttlMs`, if given.
    pub ttl_ms: Option<u64>,
}

/// The arguments of `upload_file`.
#[derive(Debug, PartialEq, Eq)]
pub struct UploadArgs {
    /// The sandbox.
    pub sandbox_id: String,
    /// Relative to the home folder, `/`-separated, without `.` or `..`.
    pub path: String,
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

/// The arguments of `download_file`.
#[derive(Debug, PartialEq, Eq)]
pub struct FileArgs {
    /// The sandbox.
    pub sandbox_id: String,
    /// Relative to the home folder, `/`-separated, without `.` or `..`.
    pub path: String,
}

/// Reads `create_sandbox`'s arguments.
pub fn parse_create(arguments: Option<&JsonObject>) -> Result<CreateArgs, ArgsError> {
    let duration = |field: &'static str| match arguments.and_then(|a| a.get(field)) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => tools::whole_number(value)
            .filter(|n| *n >= 1)
            .map(Some)
            .ok_or(ArgsError::BadDuration(field)),
    };
    Ok(CreateArgs {
        idle_timeout_ms: duration("idleTimeoutMs")?,
        ttl_ms: duration("ttlMs")?,
    })
}

/// Reads the `sandboxId` every tool but `create_sandbox` needs.
pub fn parse_sandbox_id(arguments: Option<&JsonObject>) -> Result<String, ArgsError> {
    match arguments.and_then(|a| a.get("sandboxId")) {
        Some(Value::String(id)) if !id.trim().is_empty() => Ok(id.clone()),
        None | Some(Value::Null) | Some(Value::String(_)) => Err(ArgsError::Missing {
            field: "sandboxId",
            what: "the string create_sandbox returned",
        }),
        Some(_) => Err(ArgsError::BadSandboxId),
    }
}

fn string<'a>(
    arguments: Option<&'a JsonObject>,
    field: &'static str,
    what: &'static str,
) -> Result<&'a str, ArgsError> {
    match arguments.and_then(|a| a.get(field)) {
        Some(Value::String(value)) => Ok(value),
        _ => Err(ArgsError::Missing { field, what }),
    }
}

/// Reads `download_file`'s arguments.
pub fn parse_file(arguments: Option<&JsonObject>) -> Result<FileArgs, ArgsError> {
    Ok(FileArgs {
        sandbox_id: parse_sandbox_id(arguments)?,
        path: sandbox_path(string(arguments, "path", "the file's path")?)?,
    })
}

/// Reads `upload_file`'s arguments, decoding base64 content.
pub fn parse_upload(arguments: Option<&JsonObject>) -> Result<UploadArgs, ArgsError> {
    let sandbox_id = parse_sandbox_id(arguments)?;
    let path = sandbox_path(string(arguments, "path", "where to write the file")?)?;
    let content = string(arguments, "content", "the file's text or base64")?;
    let bytes = match arguments.and_then(|a| a.get("encoding")) {
        None | Some(Value::Null) => content.as_bytes().to_vec(),
        Some(Value::String(e)) if is_utf8_name(e) => content.as_bytes().to_vec(),
        Some(Value::String(e)) if e.eq_ignore_ascii_case("base64") => decode_base64(content)?,
        Some(_) => return Err(ArgsError::BadEncoding),
    };
    Ok(UploadArgs {
        sandbox_id,
        path,
        bytes,
    })
}

fn is_utf8_name(encoding: &str) -> bool {
    ["utf-8", "utf8", "text"]
        .iter()
        .any(|name| encoding.eq_ignore_ascii_case(name))
}

/// Base64 as models write it: standard or URL-safe, padded or not, wrapped in lines, or
/// as a `data:` URL.
fn decode_base64(content: &str) -> Result<Vec<u8>, ArgsError> {
    let content = match content.trim_start().strip_prefix("data:") {
        Some(url) => url.split_once(',').map_or(url, |(_, data)| data),
        None => content,
    };
    let compact: String = content
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let config =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let standard = GeneralPurpose::new(&alphabet::STANDARD, config);
    let url_safe = GeneralPurpose::new(&alphabet::URL_SAFE, config);
    standard
        .decode(&compact)
        .or_else(|error| url_safe.decode(&compact).map_err(|_| error))
        .map_err(|e| ArgsError::BadBase64(e.to_string()))
}

/// A path inside the home folder, as the runner takes it: relative, `/`-separated,
/// without empty, `.` or `..` parts. `/home/sandbox/x` and `~/x` are taken as `x`.
pub fn sandbox_path(raw: &str) -> Result<String, ArgsError> {
    let bad = || ArgsError::BadPath(raw.chars().take(200).collect());
    let trimmed = raw.trim();
    let home = format!("{HOME}/");
    let relative = trimmed
        .strip_prefix(home.as_str())
        .or_else(|| trimmed.strip_prefix("~/"))
        .unwrap_or(trimmed);
    if relative.starts_with('/') || relative.contains('\0') || relative.len() > 4096 {
        return Err(bad());
    }
    let parts: Vec<&str> = relative
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    if parts.is_empty() || parts.contains(&"..") {
        return Err(bad());
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn paths_stay_inside_the_home_folder() {
        for (raw, path) in [
            ("data.csv", "data.csv"),
            ("./data//in.csv", "data/in.csv"),
            ("/home/sandbox/outputs/plot.png", "outputs/plot.png"),
            ("~/notes.txt", "notes.txt"),
            (" a b/c%2F?#.txt ", "a b/c%2F?#.txt"),
        ] {
            assert_eq!(sandbox_path(raw), Ok(path.to_owned()), "{raw:?}");
        }
        for raw in [
            "",
            ".",
            "/",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "/home/sandbox/../x",
            "/home/sandboxes/x",
            "a\0b",
        ] {
            assert!(
                matches!(sandbox_path(raw), Err(ArgsError::BadPath(_))),
                "{raw:?}"
            );
        }
        assert!(sandbox_path(&"a/".repeat(3000)).is_err());
    }

    #[test]
    fn uploads_take_text_or_base64() {
        let text = parse_upload(Some(&args(json!({
            "sandboxId": "sbx_1", "path": "a.txt", "content": "héllo"
        }))))
        .unwrap();
        assert_eq!(text.bytes, "héllo".as_bytes());
        assert_eq!(text.path, "a.txt");
        for content in [
            "iVBORw0KGgo=",
            "iVBORw0KGgo",
            "iVBO\nRw0K\nGgo=",
            "data:image/png;base64,iVBORw0KGgo=",
        ] {
            let upload = parse_upload(Some(&args(json!({
                "sandboxId": "sbx_1", "path": "p.png", "content": content, "encoding": "base64"
            }))))
            .unwrap();
            assert_eq!(upload.bytes, b"\x89PNG\r\n\x1a\n", "{content:?}");
        }
        let url_safe = parse_upload(Some(&args(json!({
            "sandboxId": "sbx_1", "path": "b", "content": "_-8", "encoding": "BASE64"
        }))))
        .unwrap();
        assert_eq!(url_safe.bytes, [0xff, 0xef]);
        let bad = parse_upload(Some(&args(json!({
            "sandboxId": "sbx_1", "path": "b", "content": "not base64!", "encoding": "base64"
        }))));
        assert!(matches!(bad, Err(ArgsError::BadBase64(_))), "{bad:?}");
        let bad = parse_upload(Some(&args(json!({
            "sandboxId": "sbx_1", "path": "b", "content": "x", "encoding": "latin-1"
        }))));
        assert_eq!(bad, Err(ArgsError::BadEncoding));
    }

    #[test]
    fn the_sandbox_id_is_required_where_it_is() {
        for missing in [
            json!({}),
            json!({"sandboxId": ""}),
            json!({"sandboxId": null}),
        ] {
            let error = parse_sandbox_id(Some(&args(missing))).unwrap_err();
            assert!(error.to_string().contains("create_sandbox"), "{error}");
        }
        assert_eq!(
            parse_sandbox_id(Some(&args(json!({"sandboxId": ["x"]})))),
            Err(ArgsError::BadSandboxId)
        );
        assert!(parse_sandbox_id(None).is_err());
        assert!(matches!(
            parse_file(Some(&args(json!({"sandboxId": "sbx_1"})))),
            Err(ArgsError::Missing { field: "path", .. })
        ));
    }

    #[test]
    fn durations_are_whole_milliseconds() {
        assert_eq!(parse_create(None), Ok(CreateArgs::default()));
        let given = parse_create(Some(&args(json!({"idleTimeoutMs": 60000, "ttlMs": 1.2e6}))));
        assert_eq!(
            given,
            Ok(CreateArgs {
                idle_timeout_ms: Some(60_000),
                ttl_ms: Some(1_200_000)
            })
        );
        for bad in [json!(0), json!(-1), json!(1.5), json!("60000")] {
            let result = parse_create(Some(&args(json!({"ttlMs": bad}))));
            assert_eq!(result, Err(ArgsError::BadDuration("ttlMs")));
        }
    }

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
            "no network",
            "256 MB",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
        for tool in SandboxTool::ALL {
            let definition = tool.definition(&limits);
            let schema = Value::Object((*definition.output_schema.unwrap()).clone());
            let required = schema["required"].as_array().unwrap();
            assert!(required.contains(&json!("error")), "{tool:?}");
            for field in tool.failed_fields().keys() {
                assert!(schema["properties"][field].is_object(), "{tool:?} {field}");
            }
            assert_eq!(definition.annotations.unwrap().open_world_hint, Some(false));
        }
        let create_schema = Value::Object((*create.output_schema.unwrap()).clone());
        for field in ["sandboxId", "expiresAt", "idleTimeoutMs"] {
            assert!(create_schema["properties"][field].is_object(), "{field}");
        }
    }
}
