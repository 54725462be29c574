//! The files a run wrote under `/home/sandbox/outputs/`, as a tool result carries them:
//! images as image content, text files as text resources, other files as blob resources,
//! and a note for each file the runner did not send (too large) saying how to get it.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rmcp::model::{ContentBlock, ResourceContents};
use sandbox_protocol::api::OutputFile;
use sandbox_protocol::media;
use serde::Serialize;

use crate::wording::{self, plural};

/// The folder a program writes the files it hands back to.
pub const OUTPUTS_DIR: &str = "/home/sandbox/outputs";

/// Where the run was, which decides how a file left out can still be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunIn {
    /// A fresh sandbox, gone after the call.
    OneShot,
    /// A sandbox from `create_sandbox`, whose files stay.
    Sandbox,
}

/// One file of `structuredContent.outputs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputSummary {
    /// Relative to the outputs folder.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// Its media type.
    pub mime_type: String,
}

/// The `structuredContent.outputs` list.
pub fn summaries(outputs: &[OutputFile]) -> Vec<OutputSummary> {
    outputs
        .iter()
        .map(|file| OutputSummary {
            path: file.path.clone(),
            size: file.size,
            mime_type: file.mime_type.clone(),
        })
        .collect()
}

/// How one file is carried.
enum Carried {
    Image(String),
    Text(String),
    Blob(String),
    /// Not sent by the runner (over its per-file cap or the answer's total).
    LeftOut,
}

fn carry(file: &OutputFile) -> Carried {
    let Some(data) = &file.data else {
        return Carried::LeftOut;
    };
    if media::is_image(&file.mime_type) {
        return Carried::Image(data.clone());
    }
    if media::is_text(&file.mime_type) {
        if let Some(text) = STANDARD
            .decode(data)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
        {
            return Carried::Text(text);
        }
    }
    Carried::Blob(data.clone())
}

/// The URI of an outputs file in a resource: `sandbox:///home/sandbox/outputs/<path>`.
pub fn uri(home_relative: &str) -> String {
    let base = "sandbox:///home/sandbox/";
    match reqwest::Url::parse(base) {
        Ok(mut url) => {
            if let Ok(mut segments) = url.path_segments_mut() {
                segments.pop_if_empty().extend(home_relative.split('/'));
            }
            url.to_string()
        }
        Err(_) => format!("{base}{home_relative}"),
    }
}

/// The content blocks for a run's outputs: a text block that lists them (and says how to
/// get those left out), then one block per file carried. Nothing when there are none.
pub fn blocks(outputs: &[OutputFile], truncated: bool, place: RunIn) -> Vec<ContentBlock> {
    if outputs.is_empty() && !truncated {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "The program wrote {} under {OUTPUTS_DIR}/:",
        plural(outputs.len(), "file")
    )];
    let mut files = Vec::new();
    for file in outputs {
        let path = format!("outputs/{}", file.path);
        let what = format!("{path} ({}, {})", size(file.size), file.mime_type);
        let carried = carry(file);
        let line = match (&carried, place) {
            (Carried::Image(_), _) => format!("- {what}: shown below as an image"),
            (Carried::Text(_) | Carried::Blob(_), _) => format!("- {what}: attached below"),
            (Carried::LeftOut, RunIn::Sandbox) => format!(
                "- {what}: too large to return here; fetch it with download_file \
                 (path {path:?}) while the sandbox lives"
            ),
            (Carried::LeftOut, RunIn::OneShot) => format!(
                "- {what}: too large to return here, and a one-shot sandbox is gone after \
                 its call; write a smaller file, or run in a sandbox (create_sandbox) and \
                 fetch it with download_file"
            ),
        };
        lines.push(line);
        let uri = uri(&path);
        match carried {
            Carried::Image(data) => files.push(ContentBlock::image(data, file.mime_type.clone())),
            Carried::Text(text) => files.push(ContentBlock::resource(
                ResourceContents::text(text, uri).with_mime_type(file.mime_type.clone()),
            )),
            Carried::Blob(data) => files.push(ContentBlock::resource(
                ResourceContents::blob(data, uri).with_mime_type(file.mime_type.clone()),
            )),
            Carried::LeftOut => {}
        }
    }
    if truncated {
        lines.push(match place {
            RunIn::Sandbox => "More files were written under outputs/ than a result carries: \
                               list_files shows them all, download_file fetches one."
                .to_owned(),
            RunIn::OneShot => "More files were written under outputs/ than a result carries; \
                               write fewer (for example, one archive)."
                .to_owned(),
        });
    }
    let mut blocks = vec![ContentBlock::text(lines.join("\n"))];
    blocks.extend(files);
    blocks
}

fn size(bytes: u64) -> String {
    if bytes < 1024 {
        plural(bytes as usize, "byte")
    } else {
        wording::bytes(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, mime: &str, data: Option<&[u8]>) -> OutputFile {
        OutputFile {
            path: path.into(),
            size: data.map_or(20 << 20, |d| d.len() as u64),
            mime_type: mime.into(),
            data: data.map(|d| STANDARD.encode(d)),
        }
    }

    fn text_of(blocks: &[ContentBlock]) -> String {
        blocks
            .iter()
            .filter_map(|b| b.as_text().map(|t| t.text.clone()))
            .collect()
    }

    #[test]
    fn nothing_written_adds_nothing() {
        assert!(blocks(&[], false, RunIn::OneShot).is_empty());
    }

    #[test]
    fn each_kind_of_file_is_carried_as_a_client_shows_it() {
        let png = b"\x89PNG\r\n\x1a\nrest";
        let outputs = [
            file("plot.png", "image/png", Some(png)),
            file("data/t.csv", "text/csv", Some(b"a,b\n1,2\n")),
            file("r.pdf", "application/pdf", Some(b"%PDF-1.4")),
            file("bad.json", "application/json", Some(b"\xff\xfe")),
        ];
        let blocks = blocks(&outputs, false, RunIn::OneShot);
        assert_eq!(blocks.len(), 5);
        let listing = text_of(&blocks[..1]);
        assert!(listing.contains("4 files"), "{listing}");
        assert!(
            listing.contains("outputs/plot.png (12 bytes, image/png): shown below as an image"),
            "{listing}"
        );
        let image = blocks[1].as_image().expect("an image");
        assert_eq!(image.mime_type, "image/png");
        assert_eq!(STANDARD.decode(&image.data).unwrap(), png);
        match &blocks[2].as_resource().expect("a resource").resource {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            } => {
                assert_eq!(text, "a,b\n1,2\n");
                assert_eq!(mime_type.as_deref(), Some("text/csv"));
                assert_eq!(uri, "sandbox:///home/sandbox/outputs/data/t.csv");
            }
            other => panic!("{other:?}"),
        }
        for (block, mime) in [
            (&blocks[3], "application/pdf"),
            (&blocks[4], "application/json"),
        ] {
            match &block.as_resource().expect("a resource").resource {
                ResourceContents::BlobResourceContents { mime_type, .. } => {
                    assert_eq!(mime_type.as_deref(), Some(mime));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_file_left_out_says_how_to_get_it() {
        let outputs = [file("big.bin", "application/octet-stream", None)];
        let in_sandbox = text_of(&blocks(&outputs, false, RunIn::Sandbox));
        assert!(in_sandbox.contains("too large"), "{in_sandbox}");
        assert!(in_sandbox.contains("download_file"), "{in_sandbox}");
        assert!(in_sandbox.contains("\"outputs/big.bin\""), "{in_sandbox}");
        assert!(in_sandbox.contains("20 MiB"), "{in_sandbox}");
        let one_shot = blocks(&outputs, true, RunIn::OneShot);
        assert_eq!(one_shot.len(), 1, "no content for a file left out");
        let text = text_of(&one_shot);
        assert!(
            text.contains("too large") && text.contains("create_sandbox"),
            "{text}"
        );
        assert!(text.contains("More files"), "{text}");
    }

    #[test]
    fn summaries_list_every_file() {
        let outputs = [
            file("a.png", "image/png", Some(b"x")),
            file("b.bin", "application/octet-stream", None),
        ];
        let listed = serde_json::to_value(summaries(&outputs)).unwrap();
        assert_eq!(
            listed,
            serde_json::json!([
                {"path": "a.png", "size": 1, "mimeType": "image/png"},
                {"path": "b.bin", "size": 20 << 20, "mimeType": "application/octet-stream"},
            ])
        );
    }

    #[test]
    fn uris_escape_what_needs_it() {
        assert_eq!(
            uri("outputs/a b/c?.txt"),
            "sandbox:///home/sandbox/outputs/a%20b/c%3F.txt"
        );
    }
}
