//! Wire types shared by every part of sandbox-mcp.
//!
//! This crate holds data and its encoding only, no behaviour:
//! - [`api`]: the runner's HTTP API (`POST /run`, `GET /health`, error bodies),
//!   used by `sandbox-runner` to serve and by `sandbox-mcp` to call it;
//! - [`agent`]: the frames exchanged between the runner and the in-sandbox agent,
//!   and their length-prefixed framing ([`frame`]);
//! - [`media`]: the media type of a file a sandbox hands back;
//! - [`Lang`]: the languages a sandbox runs.
//!
//! It is not for transport code (HTTP clients, sockets): those live in the crates
//! that use them.

pub mod agent;
pub mod api;
pub mod frame;
pub mod media;

use serde::{Deserialize, Serialize};
use std::fmt;

/// A language a sandbox can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    /// `bash FILE`
    Bash,
    /// `python3 FILE`
    Python,
    /// `node FILE`
    Node,
}

impl Lang {
    /// Every language, in a fixed order (for metrics and listings).
    pub const ALL: [Lang; 3] = [Lang::Bash, Lang::Python, Lang::Node];

    /// The name used on the wire and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Bash => "bash",
            Lang::Python => "python",
            Lang::Node => "node",
        }
    }
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Lang {
    type Err = UnknownLang;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Lang::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| UnknownLang(s.to_owned()))
    }
}

/// A language name that is not one of [`Lang::ALL`].
#[derive(Debug, thiserror::Error)]
#[error("unknown language {0:?}: expected one of bash, python, node")]
pub struct UnknownLang(pub String);
