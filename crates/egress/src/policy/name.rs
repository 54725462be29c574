//! Host names: checked and normalized (lower case, no trailing dot, ASCII), and a
//! request's target host.

use std::fmt;
use std::net::IpAddr;

use super::error::PolicyError;

/// The longest name DNS carries, without its trailing dot.
const MAX_NAME: usize = 253;
/// The longest label of a name.
const MAX_LABEL: usize = 63;

/// A request's target host: a name to resolve or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    /// A DNS name, normalized (lower case, no trailing dot).
    Name(String),
    /// An address as written in the request.
    Address(IpAddr),
}

impl Host {
    /// Reads a request's host (no port; IPv6 without brackets).
    pub(crate) fn parse(text: &str) -> Result<Host, PolicyError> {
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Host::Address(ip));
        }
        normalize_name(text).map(Host::Name)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Address(ip) => write!(f, "{ip}"),
        }
    }
}

/// Lower case, no trailing dot, ASCII labels of letters, digits, `-` and `_`.
pub(super) fn normalize_name(name: &str) -> Result<String, PolicyError> {
    let bad = |reason| PolicyError::BadName {
        entry: name.to_string(),
        reason,
    };
    if !name.is_ascii() {
        return Err(bad(
            "not ASCII: write an international name in its xn-- form",
        ));
    }
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return Err(bad("empty name"));
    }
    if name.len() > MAX_NAME {
        return Err(bad("longer than 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > MAX_LABEL {
            return Err(bad("each label (between dots) must be 1 to 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad("a name holds letters, digits, `-`, `_` and dots only"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(bad("a label cannot start or end with `-`"));
        }
    }
    Ok(name)
}
