//! The arguments of the sandbox tools' calls ([`crate::sandbox_tools`]): the sandbox id,
//! paths inside the home folder, and file content as text or base64.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use rmcp::model::JsonObject;
use serde_json::Value;

use crate::sandbox_tools::HOME;
use crate::snapshot_tools::MAX_FORKS;
use crate::tools::{self, ArgsError};

/// The arguments of `create_sandbox`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CreateArgs {
    /// `idleTimeoutMs`, if given.
    pub idle_timeout_ms: Option<u64>,
    /// `ttlMs`, if given.
    pub ttl_ms: Option<u64>,
    /// `snapshotId`, if given: the snapshot to start from.
    pub snapshot_id: Option<String>,
}

/// The arguments of `fork_sandbox`.
#[derive(Debug, PartialEq, Eq)]
pub struct ForkArgs {
    /// The sandbox to copy.
    pub sandbox_id: String,
    /// How many copies (1 to [`MAX_FORKS`]).
    pub count: u64,
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
    // An empty id is a model's way of giving none.
    let snapshot_id = match arguments.and_then(|a| a.get("snapshotId")) {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if id.trim().is_empty() => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => return Err(ArgsError::BadSnapshotId),
    };
    Ok(CreateArgs {
        idle_timeout_ms: duration("idleTimeoutMs")?,
        ttl_ms: duration("ttlMs")?,
        snapshot_id,
    })
}

/// Reads `fork_sandbox`'s arguments.
pub fn parse_fork(arguments: Option<&JsonObject>) -> Result<ForkArgs, ArgsError> {
    let sandbox_id = parse_sandbox_id(arguments)?;
    let count = match arguments.and_then(|a| a.get("count")) {
        None | Some(Value::Null) => 1,
        Some(value) => tools::whole_number(value)
            .filter(|n| (1..=MAX_FORKS).contains(n))
            .ok_or(ArgsError::BadCount { max: MAX_FORKS })?,
    };
    Ok(ForkArgs { sandbox_id, count })
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

/// The string argument `field` (holding `what`), which the call must give.
pub(crate) fn string<'a>(
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
    use serde_json::json;

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
    fn a_file_path_is_read_as_the_runner_takes_it() {
        let file = parse_file(Some(&args(json!({
            "sandboxId": "sbx_1", "path": "/home/sandbox/./out//a.txt"
        }))));
        assert_eq!(
            file,
            Ok(FileArgs {
                sandbox_id: "sbx_1".into(),
                path: "out/a.txt".into()
            })
        );
        let outside = parse_file(Some(&args(json!({"sandboxId": "sbx_1", "path": "../x"}))));
        assert!(matches!(outside, Err(ArgsError::BadPath(_))), "{outside:?}");
        let not_text = parse_file(Some(&args(json!({"sandboxId": "sbx_1", "path": 7}))));
        assert!(matches!(
            not_text,
            Err(ArgsError::Missing { field: "path", .. })
        ));
        // A refused path is quoted back cut short.
        match sandbox_path(&"/".repeat(5000)) {
            Err(ArgsError::BadPath(shown)) => assert_eq!(shown.len(), 200),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_upload_needs_content_and_takes_text_by_any_of_its_names() {
        for encoding in [json!(null), json!("utf8"), json!("UTF-8"), json!("text")] {
            let upload = parse_upload(Some(&args(json!({
                "sandboxId": "sbx_1", "path": "a", "content": "x", "encoding": encoding
            }))));
            assert_eq!(upload.map(|u| u.bytes), Ok(b"x".to_vec()), "{encoding}");
        }
        let missing = parse_upload(Some(&args(json!({"sandboxId": "sbx_1", "path": "a"}))));
        assert!(matches!(
            missing,
            Err(ArgsError::Missing {
                field: "content",
                ..
            })
        ));
        let numbered = parse_upload(Some(&args(json!({
            "sandboxId": "sbx_1", "path": "a", "content": "x", "encoding": 64
        }))));
        assert_eq!(numbered, Err(ArgsError::BadEncoding));
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
    fn a_fork_makes_one_to_sixteen_copies() {
        let fork = |extra: Value| {
            let mut call = args(json!({"sandboxId": "sbx_1"}));
            if let Value::Object(extra) = extra {
                call.extend(extra);
            }
            parse_fork(Some(&call)).map(|f| f.count)
        };
        assert_eq!(fork(json!({})), Ok(1));
        assert_eq!(fork(json!({"count": null})), Ok(1));
        assert_eq!(fork(json!({"count": 3})), Ok(3));
        assert_eq!(fork(json!({"count": 16.0})), Ok(16));
        for bad in [json!(0), json!(17), json!(-1), json!(2.5), json!("3")] {
            let error = fork(json!({ "count": bad }));
            assert_eq!(error, Err(ArgsError::BadCount { max: 16 }), "{bad}");
        }
        assert!(matches!(
            parse_fork(Some(&args(json!({"count": 2})))),
            Err(ArgsError::Missing {
                field: "sandboxId",
                ..
            })
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
                ttl_ms: Some(1_200_000),
                snapshot_id: None,
            })
        );
        let from = parse_create(Some(&args(json!({"snapshotId": "snap_x"}))));
        assert_eq!(from.unwrap().snapshot_id.as_deref(), Some("snap_x"));
        for none in [json!(null), json!(""), json!(" ")] {
            let from = parse_create(Some(&args(json!({"snapshotId": none}))));
            assert_eq!(from.unwrap().snapshot_id, None);
        }
        let bad = parse_create(Some(&args(json!({"snapshotId": 7}))));
        assert_eq!(bad, Err(ArgsError::BadSnapshotId));
        for bad in [json!(0), json!(-1), json!(1.5), json!("60000")] {
            let result = parse_create(Some(&args(json!({"ttlMs": bad}))));
            assert_eq!(result, Err(ArgsError::BadDuration("ttlMs")));
        }
    }
}
