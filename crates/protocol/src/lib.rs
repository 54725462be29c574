//! Wire types shared by every part of sandbox-mcp.
//!
//! This crate holds data and its encoding only, no behaviour:
//! - [`api`]: the runner's HTTP API (`POST /run`, `GET /health`, error bodies),
//!   used by `sandbox-runner` to serve and by `sandbox-mcp` to call it (with the
//!   `openapi` feature, their schemas for the runner's OpenAPI document);
//! - [`agent`]: the frames exchanged between the runner and the in-sandbox agent,
//!   and their length-prefixed framing ([`frame`]);
//! - [`files`]: the files a run wrote and the entries of a listing, which both carry;
//! - [`media`]: the media type of a file a sandbox hands back;
//! - [`process`]: a session's processes, as the agent keeps them and as the API shows
//!   them;
//! - [`tools`]: tools a run's caller offers its program, and the calls on their way;
//! - [`tunnel`]: a VM sandbox's connections to the runner's egress proxy, carried over a
//!   stream of their own;
//! - [`Lang`]: a language's name; [`language`]: how a sandbox runs one, and how a
//!   runner lists those it offers.
//!
//! It is not for transport code (HTTP clients, sockets): those live in the crates
//! that use them.

pub mod agent;
pub mod api;
pub mod files;
pub mod frame;
pub mod language;
pub mod media;
pub mod process;
pub mod snapshot;
pub mod tools;
pub mod tunnel;

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// A language's name: what a run's `lang` says, and what a runner's language table is
/// keyed by (`bash`, `python`, `c`, `typescript`, or a name an operator adds). A name is
/// 1 to [`Lang::MAX_LEN`] characters of `a-z`, `0-9` and `_`, starting with a letter, so
/// that `run_<name>` is a valid tool name. Which names a runner offers is its table's
/// business, not this type's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Lang(Cow<'static, str>);

impl Lang {
    /// Bash.
    pub const BASH: Lang = Lang(Cow::Borrowed("bash"));
    /// Python 3.
    pub const PYTHON: Lang = Lang(Cow::Borrowed("python"));
    /// JavaScript on Node.js.
    pub const NODE: Lang = Lang(Cow::Borrowed("node"));
    /// The longest name.
    pub const MAX_LEN: usize = 32;

    /// The name `name`, if it is well formed.
    pub fn new(name: &str) -> Result<Lang, BadLangName> {
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if first_ok && rest_ok && name.len() <= Self::MAX_LEN {
            Ok(Lang(Cow::Owned(name.to_owned())))
        } else {
            Err(BadLangName(name.to_owned()))
        }
    }

    /// The name used on the wire and in metrics.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Lang {
    type Err = BadLangName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Lang::new(s)
    }
}

impl<'de> Deserialize<'de> for Lang {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Lang::new(&name).map_err(serde::de::Error::custom)
    }
}

/// A name's schema in the runner's OpenAPI document: a string of the form [`Lang::new`]
/// accepts.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Lang {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some("^[a-z][a-z0-9_]{0,31}$"))
            .description(Some(
                "A language's name: one the runner offers (GET /health lists them)",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Lang {}

/// A string that is not a well-formed language name (see [`Lang`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a language name: 1 to 32 characters of a-z, 0-9 and _, starting with a letter"
)]
pub struct BadLangName(pub String);

#[cfg(test)]
mod tests {
    use super::Lang;

    #[test]
    fn names_are_checked_and_round_trip() {
        for good in ["bash", "c", "cpp", "go2", "type_script"] {
            assert_eq!(Lang::new(good).unwrap().as_str(), good);
            let json = serde_json::to_string(&Lang::new(good).unwrap()).unwrap();
            assert_eq!(serde_json::from_str::<Lang>(&json).unwrap().as_str(), good);
        }
        for bad in ["", "C", "c++", "1c", "a-b", "run me", &"x".repeat(33)] {
            assert!(Lang::new(bad).is_err(), "{bad:?}");
            assert!(serde_json::from_str::<Lang>(&format!("{bad:?}")).is_err());
        }
        assert_eq!(Lang::new("python").unwrap(), Lang::PYTHON);
    }
}
