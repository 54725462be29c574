//! `MCP_UPSTREAMS` (`--upstreams`): the operator's MCP servers whose tools programs may
//! call, read from a TOML file once at start and validated into [`UpstreamsConfig`]:
//!
//! ```toml
//! [[server]]
//! name = "tracker"                     # the module's attribute in code: tools.tracker
//! url = "http://tracker.internal/mcp"  # Streamable HTTP, or:
//! # command = ["node", "server.js"]    # stdio, started and kept by sandbox-mcp
//! headers = { Authorization = "Bearer ..." }
//! allow = ["search_*", "get_issue"]    # globs over its tool names
//! max_calls_per_run = 64               # optional
//! timeout_ms = 30000                   # optional, per call
//! ```
//!
//! Anything else (an unknown key, a name that is not an identifier, a name given twice,
//! neither or both of `url` and `command`, an empty `allow`) is refused with the file's
//! path and the entry. A header's value is a secret: it is kept in [`Headers`], whose
//! `Debug` shows the names alone, and no error text ever quotes it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use sandbox_protocol::tools::{is_identifier, MAX_CALLS_PER_RUN};
use serde::Deserialize;

use super::glob::Glob;

/// The largest file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most servers a file may name.
pub const MAX_SERVERS: usize = 64;
/// The most globs in one server's `allow`.
pub const MAX_GLOBS: usize = 256;
/// The longest glob, in bytes.
pub const MAX_GLOB_BYTES: usize = 256;
/// The most headers of one server.
pub const MAX_HEADERS: usize = 32;
/// The longest header value, in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 8 * 1024;
/// The most words of a `command`.
pub const MAX_COMMAND_WORDS: usize = 256;
/// The longest word of a `command`, in bytes.
pub const MAX_COMMAND_WORD_BYTES: usize = 4096;
/// The longest `url`, in bytes.
pub const MAX_URL_BYTES: usize = 4096;
/// `max_calls_per_run` when an entry gives none.
pub const DEFAULT_MAX_CALLS_PER_RUN: usize = 64;
/// `timeout_ms` when an entry gives none.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The largest `timeout_ms`: an hour (a run's own timeout bounds every call anyway).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// The upstream servers, validated.
#[derive(Debug, Clone)]
pub struct UpstreamsConfig {
    /// The file they were read from.
    pub path: PathBuf,
    /// The servers, in the file's order.
    pub servers: Vec<UpstreamConfig>,
}

/// One upstream server.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// Its name: an identifier, the module's attribute in code (`tools.<name>`).
    pub name: String,
    /// How it is reached.
    pub transport: Transport,
    /// The globs of the tools programs may call; nothing else is offered or called.
    pub allow: Vec<Glob>,
    /// The most calls of its tools one run may make.
    pub max_calls_per_run: usize,
    /// The longest one call may take.
    pub timeout: Duration,
}

/// How an upstream is reached.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Streamable HTTP at `url`, with `headers` on every request.
    Http {
        /// Its MCP endpoint.
        url: reqwest::Url,
        /// Sent with every request (credentials, usually).
        headers: Headers,
    },
    /// A child process speaking MCP on its stdin and stdout, started in `dir` (the
    /// file's folder) with PATH and HOME alone in its environment.
    Stdio {
        /// The program and its arguments.
        command: Vec<String>,
        /// Its working folder.
        dir: PathBuf,
    },
}

/// Headers sent to an upstream: their values are secrets, never shown.
#[derive(Clone, Default)]
pub struct Headers(pub Vec<(HeaderName, HeaderValue)>);

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name.as_str()))
            .finish()
    }
}

/// Why `MCP_UPSTREAMS` cannot be used; sandbox-mcp does not start.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamsError {
    /// The file cannot be read.
    #[error("MCP_UPSTREAMS: cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than anyone writes by hand.
    #[error("MCP_UPSTREAMS: {} is over {MAX_FILE_BYTES} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not TOML of the expected shape (an unknown key, a missing one, a
    /// value of the wrong type).
    #[error("MCP_UPSTREAMS: {} is not valid at line {line}, column {column}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong (the parser's words, without the line's text).
        message: String,
        /// Where, from 1.
        line: usize,
        /// Where on the line, from 1.
        column: usize,
    },
    /// The file names no server.
    #[error("MCP_UPSTREAMS: {} names no server: add a [[server]] table with name, url or command, and allow", path.display())]
    NoServers {
        /// The file.
        path: PathBuf,
    },
    /// The file names too many servers.
    #[error("MCP_UPSTREAMS: {} names {count} servers: at most {MAX_SERVERS}", path.display())]
    TooManyServers {
        /// The file.
        path: PathBuf,
        /// How many it names.
        count: usize,
    },
    /// One server's entry cannot be used.
    #[error("MCP_UPSTREAMS: {}, server {entry}: {error}", path.display())]
    Entry {
        /// The file.
        path: PathBuf,
        /// Which entry: its place in the file and its name.
        entry: String,
        /// What is wrong with it.
        error: EntryError,
    },
}

/// What is wrong with one `[[server]]` entry. No variant carries a header's value.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// `name` cannot be a module's attribute.
    #[error("name is not an identifier: use 1 to 64 ASCII letters, digits and _, not starting with a digit, and no Python or JavaScript keyword nor `list` (it becomes tools.NAME in code)")]
    NotIdentifier,
    /// Another entry has the same name.
    #[error("the name is given twice: each server needs a name of its own")]
    Duplicate,
    /// Neither `url` nor `command`.
    #[error("give url (a Streamable HTTP endpoint) or command (a program speaking MCP on stdio)")]
    NoTransport,
    /// Both `url` and `command`.
    #[error("give url or command, not both")]
    BothTransports,
    /// `url` is not an `http://` URL.
    #[error("url: {0}")]
    BadUrl(&'static str),
    /// `command` is empty or too long.
    #[error("command: {0}")]
    BadCommand(&'static str),
    /// `headers` with `command`.
    #[error("headers go with url: a command's server is started here and gets none")]
    HeadersWithCommand,
    /// A header name or value HTTP refuses.
    #[error("header {name:?}: {why}")]
    BadHeader {
        /// The header's name (never its value).
        name: String,
        /// What is wrong.
        why: &'static str,
    },
    /// Too many headers.
    #[error("at most {MAX_HEADERS} headers")]
    TooManyHeaders,
    /// `allow` is absent or empty.
    #[error("allow lists no tool, so none of its tools could be called: list globs over its tool names, such as allow = [\"search_*\", \"get_issue\"]")]
    EmptyAllow,
    /// `allow` has too many globs, or one that is empty or too long.
    #[error("allow: {0}")]
    BadAllow(&'static str),
    /// `max_calls_per_run` out of range.
    #[error("max_calls_per_run = {0}: use 1 to {MAX_CALLS_PER_RUN}")]
    BadMaxCalls(u64),
    /// `timeout_ms` out of range.
    #[error("timeout_ms = {0}: use 1 to {MAX_TIMEOUT_MS}")]
    BadTimeout(u64),
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    server: Vec<Entry>,
}

/// One `[[server]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    url: Option<String>,
    command: Option<Vec<String>>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    allow: Vec<String>,
    max_calls_per_run: Option<u64>,
    timeout_ms: Option<u64>,
}

impl UpstreamsConfig {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Self, UpstreamsError> {
        let read = |source| UpstreamsError::Read {
            path: path.to_owned(),
            source,
        };
        let size = std::fs::metadata(path).map_err(read)?.len();
        if size > MAX_FILE_BYTES {
            return Err(UpstreamsError::TooLarge {
                path: path.to_owned(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Self::parse(path, &text, dir)
    }

    /// Validates `text`, the file at `path` whose commands start in `dir`.
    pub fn parse(path: &Path, text: &str, dir: &Path) -> Result<Self, UpstreamsError> {
        let file: File = toml::from_str(text).map_err(|e| {
            let (line, column) = position(text, e.span().map_or(0, |s| s.start));
            UpstreamsError::Parse {
                path: path.to_owned(),
                message: e.message().trim().to_owned(),
                line,
                column,
            }
        })?;
        if file.server.is_empty() {
            return Err(UpstreamsError::NoServers {
                path: path.to_owned(),
            });
        }
        if file.server.len() > MAX_SERVERS {
            return Err(UpstreamsError::TooManyServers {
                path: path.to_owned(),
                count: file.server.len(),
            });
        }
        let mut names = BTreeSet::new();
        let mut servers = Vec::with_capacity(file.server.len());
        for (index, entry) in file.server.into_iter().enumerate() {
            let label = label(index, &entry.name);
            let server = entry
                .validate(dir)
                .and_then(|server| match names.insert(server.name.clone()) {
                    true => Ok(server),
                    false => Err(EntryError::Duplicate),
                })
                .map_err(|error| UpstreamsError::Entry {
                    path: path.to_owned(),
                    entry: label,
                    error,
                })?;
            servers.push(server);
        }
        Ok(UpstreamsConfig {
            path: path.to_owned(),
            servers,
        })
    }

    /// The servers' names, in the file's order.
    pub fn names(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.name.clone()).collect()
    }
}

/// "#2 (\"tracker\")": an entry's place in the file and its name, cut short.
fn label(index: usize, name: &str) -> String {
    let name: String = name.chars().take(64).collect();
    format!("#{} ({name:?})", index + 1)
}

/// The line and column (from 1) of byte `at` of `text`.
fn position(text: &str, at: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..at.min(text.len())];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|b| **b != b'\n').count() + 1;
    (line, column)
}

impl Entry {
    fn validate(self, dir: &Path) -> Result<UpstreamConfig, EntryError> {
        if !is_identifier(&self.name) || self.name == "list" {
            return Err(EntryError::NotIdentifier);
        }
        let transport = match (self.url, self.command) {
            (None, None) => return Err(EntryError::NoTransport),
            (Some(_), Some(_)) => return Err(EntryError::BothTransports),
            (Some(url), None) => Transport::Http {
                url: http_url(&url)?,
                headers: headers(self.headers)?,
            },
            (None, Some(command)) => {
                if !self.headers.is_empty() {
                    return Err(EntryError::HeadersWithCommand);
                }
                Transport::Stdio {
                    command: checked_command(command)?,
                    dir: dir.to_owned(),
                }
            }
        };
        let max_calls_per_run = match self.max_calls_per_run {
            None => DEFAULT_MAX_CALLS_PER_RUN,
            Some(n) if (1..=MAX_CALLS_PER_RUN as u64).contains(&n) => n as usize,
            Some(n) => return Err(EntryError::BadMaxCalls(n)),
        };
        let timeout_ms = match self.timeout_ms {
            None => DEFAULT_TIMEOUT_MS,
            Some(ms) if (1..=MAX_TIMEOUT_MS).contains(&ms) => ms,
            Some(ms) => return Err(EntryError::BadTimeout(ms)),
        };
        Ok(UpstreamConfig {
            name: self.name,
            transport,
            allow: globs(self.allow)?,
            max_calls_per_run,
            timeout: Duration::from_millis(timeout_ms),
        })
    }
}

fn http_url(url: &str) -> Result<reqwest::Url, EntryError> {
    if url.len() > MAX_URL_BYTES {
        return Err(EntryError::BadUrl("longer than 4096 bytes"));
    }
    let parsed = reqwest::Url::parse(url).map_err(|_| EntryError::BadUrl("not a URL"))?;
    match parsed.scheme() {
        "http" => {}
        "https" => {
            return Err(EntryError::BadUrl(
                "https:// is not supported (this build has no TLS client): reach the server \
                 through a local TLS proxy at an http:// address, or run a stdio bridge with \
                 command",
            ))
        }
        _ => return Err(EntryError::BadUrl("use an http:// URL")),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(EntryError::BadUrl("it has no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(EntryError::BadUrl(
            "credentials in the URL would show wherever it does: put them in headers",
        ));
    }
    Ok(parsed)
}

fn headers(given: BTreeMap<String, String>) -> Result<Headers, EntryError> {
    if given.len() > MAX_HEADERS {
        return Err(EntryError::TooManyHeaders);
    }
    let bad = |name: &str, why| EntryError::BadHeader {
        name: name.chars().take(64).collect(),
        why,
    };
    let mut headers = Vec::with_capacity(given.len());
    for (name, value) in given {
        let header =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad(&name, "not a header name"))?;
        if value.len() > MAX_HEADER_VALUE_BYTES {
            return Err(bad(&name, "its value is over 8 KiB"));
        }
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| bad(&name, "its value holds characters a header cannot carry"))?;
        value.set_sensitive(true);
        headers.push((header, value));
    }
    Ok(Headers(headers))
}

fn checked_command(command: Vec<String>) -> Result<Vec<String>, EntryError> {
    if command
        .first()
        .is_none_or(|program| program.trim().is_empty())
    {
        return Err(EntryError::BadCommand(
            "give the program and its arguments, such as [\"node\", \"server.js\"]",
        ));
    }
    if command.len() > MAX_COMMAND_WORDS {
        return Err(EntryError::BadCommand("at most 256 words"));
    }
    if command
        .iter()
        .any(|w| w.len() > MAX_COMMAND_WORD_BYTES || w.contains('\0'))
    {
        return Err(EntryError::BadCommand(
            "a word is over 4096 bytes or holds a NUL",
        ));
    }
    Ok(command)
}

fn globs(allow: Vec<String>) -> Result<Vec<Glob>, EntryError> {
    if allow.is_empty() {
        return Err(EntryError::EmptyAllow);
    }
    if allow.len() > MAX_GLOBS {
        return Err(EntryError::BadAllow("at most 256 globs"));
    }
    if allow
        .iter()
        .any(|g| g.is_empty() || g.len() > MAX_GLOB_BYTES)
    {
        return Err(EntryError::BadAllow("a glob is empty or over 256 bytes"));
    }
    Ok(allow.iter().map(|g| Glob::new(g)).collect())
}

#[cfg(test)]
mod tests;
