//! pip's `--report` (format version 1): the wheels a dry run chose.

use std::collections::HashMap;
use std::fs;

use serde::Deserialize;

use super::Resolved;
use crate::key::sha256_hex;
use crate::names::normalize_name;
use crate::store::PythonPackage;

#[derive(Deserialize)]
struct Report {
    install: Vec<ReportItem>,
}

#[derive(Deserialize)]
struct ReportItem {
    download_info: DownloadInfo,
    metadata: ReportMetadata,
    #[serde(default)]
    requested: bool,
}

#[derive(Deserialize)]
struct DownloadInfo {
    url: String,
    archive_info: Option<ArchiveInfo>,
}

#[derive(Deserialize)]
struct ArchiveInfo {
    hash: Option<String>,
    hashes: Option<HashMap<String, String>>,
}

#[derive(Deserialize)]
struct ReportMetadata {
    name: String,
    version: String,
}

/// The wheels of a `pip install --report` (format version 1), sorted by name.
pub(crate) fn parse_report(bytes: &[u8]) -> Result<Vec<Resolved>, String> {
    let report: Report = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(report.install.len());
    for item in report.install {
        let name = normalize_name(&item.metadata.name);
        let url = &item.download_info.url;
        if !url.ends_with(".whl") {
            return Err(format!(
                "{name} would not be installed from a wheel ({url})"
            ));
        }
        let archive = item.download_info.archive_info.as_ref();
        let sha256 = archive
            .and_then(|a| a.hashes.as_ref())
            .and_then(|h| h.get("sha256").cloned())
            .or_else(|| {
                archive
                    .and_then(|a| a.hash.as_deref())
                    .and_then(|h| h.strip_prefix("sha256="))
                    .map(str::to_owned)
            });
        let sha256 = match sha256 {
            Some(h) => h,
            // A wheel from a local --find-links folder comes without a hash.
            None => match url.strip_prefix("file://") {
                Some(path) => {
                    let path = percent_decode(path);
                    let bytes = fs::read(&path).map_err(|e| format!("{path}: {e}"))?;
                    sha256_hex(&bytes)
                }
                None => return Err(format!("no sha256 for {name} ({url})")),
            },
        };
        out.push(Resolved {
            package: PythonPackage {
                name,
                version: item.metadata.version,
                sha256,
            },
            requested: item.requested,
        });
    }
    out.sort_by(|a, b| a.package.cmp(&b.package));
    Ok(out)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_give_pinned_wheels() {
        let report = br#"{"version": "1", "install": [
          {"download_info": {"url": "https://x/tabulate-0.9.0-py3-none-any.whl",
             "archive_info": {"hash": "sha256=aa", "hashes": {"sha256": "aa"}}},
           "requested": true, "metadata": {"name": "tabulate", "version": "0.9.0"}},
          {"download_info": {"url": "https://x/PyYAML-6.0-cp311-linux.whl",
             "archive_info": {"hash": "sha256=bb"}},
           "metadata": {"name": "PyYAML", "version": "6.0"}}]}"#;
        let r = parse_report(report).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].package.name, "pyyaml");
        assert_eq!(r[0].package.sha256, "bb");
        assert!(!r[0].requested);
        assert_eq!(r[1].package.name, "tabulate");
        assert!(r[1].requested);

        let sdist = br#"{"install": [{"download_info": {"url": "https://x/a-1.tar.gz",
            "archive_info": {}}, "metadata": {"name": "a", "version": "1"}}]}"#;
        assert!(parse_report(sdist).is_err());
    }

    #[test]
    fn local_wheels_are_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("a b-1-py3-none-any.whl");
        fs::write(&wheel, b"abc").unwrap();
        let url = format!("file://{}", wheel.display()).replace(' ', "%20");
        let report = format!(
            r#"{{"install": [{{"download_info": {{"url": "{url}", "archive_info": {{}}}},
                "metadata": {{"name": "a-b", "version": "1"}}}}]}}"#
        );
        let r = parse_report(report.as_bytes()).unwrap();
        assert_eq!(r[0].package.sha256, sha256_hex(b"abc"));
    }
}
