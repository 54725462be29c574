//! Media types of files a sandbox hands back (outputs, downloads): from the file's
//! first bytes where a format announces itself, else from its name, else text or
//! binary by whether the bytes are UTF-8.

/// The media type of a file named `path` whose bytes are (or begin with) `head`.
/// `complete` says whether `head` is the whole file (only then is "valid UTF-8" known).
/// A NUL byte makes a file binary, as for `file(1)`.
pub fn mime_type(path: &str, head: &[u8], complete: bool) -> &'static str {
    if let Some(sniffed) = sniff(head) {
        return sniffed;
    }
    if let Some(named) = by_extension(path) {
        return named;
    }
    if head.contains(&0) {
        return "application/octet-stream";
    }
    match std::str::from_utf8(head) {
        Ok(_) => "text/plain",
        // A cut in the middle of a character at the end of an incomplete head is fine.
        Err(e) if !complete && e.error_len().is_none() => "text/plain",
        Err(_) => "application/octet-stream",
    }
}

/// Whether a client should be shown this type as an image.
pub fn is_image(mime: &str) -> bool {
    matches!(
        mime,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    )
}

/// Whether this type is text.
pub fn is_text(mime: &str) -> bool {
    mime.starts_with("text/")
        || matches!(
            mime,
            "application/json" | "image/svg+xml" | "application/xml" | "application/x-yaml"
        )
}

fn sniff(head: &[u8]) -> Option<&'static str> {
    const SIGNATURES: [(&[u8], &str); 6] = [
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
        (b"%PDF-", "application/pdf"),
        (b"PK\x03\x04", "application/zip"),
    ];
    if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        return Some("image/webp");
    }
    SIGNATURES
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|(_, mime)| *mime)
}

fn by_extension(path: &str) -> Option<&'static str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let (_, ext) = name.rsplit_once('.')?;
    Some(match ext.to_ascii_lowercase().as_str() {
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "html" | "htm" => "text/html",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "xml" => "application/xml",
        "yaml" | "yml" => "application/x-yaml",
        "parquet" => "application/vnd.apache.parquet",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_known_by_their_bytes_whatever_their_name() {
        assert_eq!(
            mime_type("plot.bin", b"\x89PNG\r\n\x1a\nrest", true),
            "image/png"
        );
        assert_eq!(mime_type("a", b"\xff\xd8\xff\xe0", true), "image/jpeg");
        assert_eq!(mime_type("a", b"GIF89a...", true), "image/gif");
        assert_eq!(mime_type("a", b"RIFF\0\0\0\0WEBPVP8 ", true), "image/webp");
        assert!(is_image("image/webp") && !is_image("image/svg+xml"));
    }

    #[test]
    fn other_files_by_name_then_by_being_utf8() {
        assert_eq!(mime_type("data/t.CSV", b"a,b\n", true), "text/csv");
        assert_eq!(mime_type("notes", "héllo".as_bytes(), true), "text/plain");
        assert_eq!(
            mime_type("blob", b"\xff\xfe\x00", true),
            "application/octet-stream"
        );
        // A head cut inside a character is still text; the whole file is not.
        assert_eq!(mime_type("x", &"é".as_bytes()[..1], false), "text/plain");
        assert_eq!(
            mime_type("x", &"é".as_bytes()[..1], true),
            "application/octet-stream"
        );
        assert!(is_text("application/json") && !is_text("application/pdf"));
    }
}
