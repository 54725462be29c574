//! Keys: the hex SHA-256 of a canonical description of what a set holds, and the digest
//! of an inline-dependency request.
//!
//! A set's key depends only on what was resolved (versions and file hashes), never on
//! when or where it was built, so building the same resolution again finds the set.

use sha2::{Digest, Sha256};

use crate::npm::NodePin;
use crate::store::PythonPackage;

/// Changes whenever the layout of a set or the meaning of a key changes.
const LAYOUT: &str = "sandbox-packages layout 1";

/// The hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn python_lines(out: &mut String, python: &[PythonPackage]) {
    let mut lines: Vec<String> = python
        .iter()
        .map(|p| format!("{}=={} {}\n", p.name, p.version, p.sha256))
        .collect();
    lines.sort();
    lines.dedup();
    out.extend(lines);
}

/// The key of a base set.
pub(crate) fn set_key(
    python_version: &str,
    python: &[PythonPackage],
    node: &[NodePin],
    plots: &str,
) -> String {
    let mut d = format!("{LAYOUT}\nbase\npython {python_version}\n");
    python_lines(&mut d, python);
    let mut lines: Vec<String> = node
        .iter()
        .map(|n| format!("npm {} {} {}\n", n.path, n.version, n.integrity))
        .collect();
    lines.sort();
    d.extend(lines);
    d.push_str(&format!(
        "sandbox_plots.py {}\n",
        sha256_hex(plots.as_bytes())
    ));
    sha256_hex(d.as_bytes())
}

/// The key of an inline set: what it holds, whatever request led to it.
pub(crate) fn deps_key(python_version: &str, python: &[PythonPackage]) -> String {
    let mut d = format!("{LAYOUT}\ndeps\npython {python_version}\n");
    python_lines(&mut d, python);
    sha256_hex(d.as_bytes())
}

/// The digest of a request: the base set, the Python, the policy and the sorted,
/// normalised requirement lines.
pub(crate) fn request_digest(
    base_key: Option<&str>,
    python_version: &str,
    policy: &str,
    requirements: &[String],
) -> String {
    let mut h = Sha256::new();
    for part in [
        LAYOUT,
        "request",
        base_key.unwrap_or("no base"),
        python_version,
        policy,
    ] {
        h.update(part.as_bytes());
        h.update(b"\n");
    }
    for r in requirements {
        h.update(r.as_bytes());
        h.update(b"\n");
    }
    hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(name: &str, version: &str) -> PythonPackage {
        PythonPackage {
            name: name.into(),
            version: version.into(),
            sha256: "00".repeat(32),
        }
    }

    #[test]
    fn keys_ignore_order_and_see_every_part() {
        let a = [pkg("six", "1.17.0"), pkg("tabulate", "0.9.0")];
        let b = [pkg("tabulate", "0.9.0"), pkg("six", "1.17.0")];
        let k = set_key("3.11.2", &a, &[], "x");
        assert_eq!(k, set_key("3.11.2", &b, &[], "x"));
        assert_eq!(k.len(), 64);
        assert_ne!(k, set_key("3.11.3", &a, &[], "x"));
        assert_ne!(k, set_key("3.11.2", &a, &[], "y"));
        assert_ne!(k, set_key("3.11.2", &a[..1], &[], "x"));
        assert_ne!(deps_key("3.11.2", &a), deps_key("3.11.2", &a[..1]));
        assert_eq!(deps_key("3.11.2", &a), deps_key("3.11.2", &b));
    }

    #[test]
    fn request_digests_see_the_base_and_the_policy() {
        let r = vec!["six".to_owned()];
        let d = request_digest(Some("k"), "3.11.2", "p", &r);
        assert_ne!(d, request_digest(None, "3.11.2", "p", &r));
        assert_ne!(d, request_digest(Some("k"), "3.11.2", "q", &r));
        assert_ne!(d, request_digest(Some("k"), "3.11.2", "p", &[]));
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
