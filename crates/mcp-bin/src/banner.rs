//! What `up` prints once it serves: the endpoint, the token, and settings for each kind
//! of client, ready to paste (each is checked by a test against the client itself where
//! the client can run here).

use crate::token_store::Origin;
use sandbox_protocol::api::Packages;
use sandbox_protocol::Lang;
use sandbox_runner::config::BackendKind;
use std::fmt;
use std::path::PathBuf;

/// What `up` tells its user once it serves.
#[derive(Debug, Clone)]
pub struct Banner {
    /// The MCP endpoint.
    pub url: String,
    /// The bearer token clients send.
    pub token: String,
    /// Where the token comes from.
    pub token_origin: Origin,
    /// The embedded runner's URL (loopback).
    pub runner: String,
    /// The embedded runner's backend.
    pub backend: BackendKind,
    /// The embedded runner's pool size.
    pub pool_size: usize,
    /// Whether the sandboxes have their memory and CPU limits (false only with
    /// `--unsafe-no-resource-limits`).
    pub resource_limits: bool,
    /// This program, for the stdio settings.
    pub exe: Option<PathBuf>,
    /// What the sandboxes can import.
    pub packages: Packages,
    /// The languages the runner offers.
    pub languages: Vec<Lang>,
    /// The hosts and address ranges the sandboxes may reach through the runner's proxy
    /// (empty: no network).
    pub network: Vec<String>,
    /// Whether a call that names no `egress` gets all of them.
    pub network_by_default: bool,
}

impl Banner {
    /// The `claude mcp add` line.
    pub fn claude_add(&self) -> String {
        format!(
            "claude mcp add --transport http sandbox {} --header \"Authorization: Bearer {}\"",
            self.url, self.token
        )
    }

    /// The `claude mcp add-json` line (Claude Code wants the server's own object).
    pub fn claude_add_json(&self) -> String {
        format!("claude mcp add-json sandbox '{}'", self.server_json())
    }

    /// The server's object in a client's `mcpServers` list, on one line, keys in the
    /// order people write them (type, url, headers).
    fn server_json(&self) -> String {
        let quoted = |s: &str| serde_json::Value::from(s).to_string();
        format!(
            "{{\"type\":\"http\",\"url\":{},\"headers\":{{\"Authorization\":{}}}}}",
            quoted(&self.url),
            quoted(&format!("Bearer {}", self.token))
        )
    }

    /// The block for Codex's `~/.codex/config.toml`.
    pub fn codex_toml(&self) -> String {
        format!(
            "[mcp_servers.sandbox]\nurl = \"{}\"\nhttp_headers = {{ Authorization = \"Bearer {}\" }}",
            self.url, self.token
        )
    }

    fn token_note(&self) -> String {
        match &self.token_origin {
            Origin::Given => " (from MCP_AUTH_TOKEN)".to_owned(),
            Origin::Saved(path) => {
                format!(" (kept in {}; --new-token replaces it)", path.display())
            }
            Origin::New(path) => format!(
                " (new, saved in {} for the next start; set MCP_AUTH_TOKEN to choose one)",
                path.display()
            ),
            Origin::Unsaved => {
                " (generated; no $HOME to keep it in: set MCP_AUTH_TOKEN to keep one)".to_owned()
            }
        }
    }
}

/// Writes `text` indented by `indent` spaces, line by line.
fn indented(f: &mut fmt::Formatter<'_>, indent: usize, text: &str) -> fmt::Result {
    for line in text.lines() {
        writeln!(f, "{:indent$}{line}", "")?;
    }
    Ok(())
}

/// The banner's line on packages: how many, the best known first; or how to get them
/// (the sandboxes having no network, or only `open`'s hosts: `open` says so).
fn packages_line(packages: &Packages, open: bool) -> String {
    if packages.python.is_empty() && packages.node.is_empty() {
        let network = if open {
            "the sandboxes reach only the hosts below"
        } else {
            "the sandboxes have no network"
        };
        return format!(
            "standard libraries only; `sandbox-runner packages build` installs numpy,\n                 \
             pandas, matplotlib, ... ({network})"
        );
    }
    let known: Vec<&str> = ["numpy", "pandas", "matplotlib"]
        .into_iter()
        .filter(|name| packages.python.iter().any(|p| p.name == *name))
        .collect();
    let mut line = format!(
        "{} Python ({}, ...) and {} npm; plots come back as images",
        packages.python.len(),
        known.join(", "),
        packages.node.len()
    );
    if packages.inline_dependencies {
        line.push_str("; PEP 723 for more");
    }
    line
}

/// The banner's line on the network, where the runner opens hosts: which, and how a call
/// gets them.
fn network_line(network: &[String], by_default: bool) -> String {
    let how = if by_default {
        "every call gets them unless its egress lists fewer"
    } else {
        "a call lists the ones it needs in egress"
    };
    format!(
        "only {}, through the runner's proxy\n                 (pip, npm, curl work; {how})",
        network.join(", ")
    )
}

/// "bash, Python, Node.js and C": the languages by the names people use.
fn languages_line(languages: &[Lang]) -> String {
    let names: Vec<String> = languages
        .iter()
        .map(sandbox_mcp::tools::display_name)
        .collect();
    match names.split_last() {
        None => "no language".to_owned(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// What the banner says when the sandboxes run without memory and CPU limits.
const NO_LIMITS_WARNING: &str =
    "  WARNING: UNSAFE: --unsafe-no-resource-limits is set: sandboxes have NO memory\n  \
     and NO CPU limit (their processes are still capped). A program can take all of this\n  \
     machine's memory and CPU. Run as root, or in a delegated cgroup v2, to have limits.";

impl fmt::Display for Banner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match self.backend {
            BackendKind::Process => "process",
            BackendKind::Vm => "vm",
        };
        writeln!(
            f,
            "sandbox-mcp is up: {} in fresh sandboxes",
            languages_line(&self.languages)
        )?;
        writeln!(f)?;
        writeln!(f, "  MCP endpoint:  {}", self.url)?;
        writeln!(f, "  Bearer token:  {}{}", self.token, self.token_note())?;
        writeln!(
            f,
            "  Runner:        embedded at {}, {backend} backend, {} at once",
            self.runner,
            sandbox_mcp::wording::plural(self.pool_size, "sandbox")
        )?;
        writeln!(
            f,
            "  Sandboxes:     one-shot by default; create_sandbox gives a sandboxId whose files\n                 \
             and variables stay across run_* calls that pass it"
        )?;
        let open = !self.network.is_empty();
        writeln!(
            f,
            "  Packages:      {}",
            packages_line(&self.packages, open)
        )?;
        if open {
            writeln!(
                f,
                "  Network:       {}",
                network_line(&self.network, self.network_by_default)
            )?;
        }
        if !self.resource_limits {
            writeln!(f)?;
            writeln!(f, "{NO_LIMITS_WARNING}")?;
        }
        writeln!(f)?;
        writeln!(f, "Claude Code (either line):")?;
        indented(f, 2, &self.claude_add())?;
        indented(f, 2, &self.claude_add_json())?;
        writeln!(f)?;
        writeln!(f, "Codex (~/.codex/config.toml):")?;
        indented(f, 2, &self.codex_toml())?;
        writeln!(f)?;
        writeln!(
            f,
            "Clients configured with JSON (Claude Desktop, Cursor, VS Code, ...):"
        )?;
        indented(
            f,
            2,
            &format!(
                "{{ \"mcpServers\": {{ \"sandbox\": {} }} }}",
                self.server_json()
            ),
        )?;
        if let Some(exe) = &self.exe {
            writeln!(f)?;
            writeln!(
                f,
                "Or let the client start its own server over stdio (as root, like this one):"
            )?;
            let command = serde_json::Value::from(exe.display().to_string());
            indented(
                f,
                2,
                &format!(
                    "{{ \"mcpServers\": {{ \"sandbox\": {{ \"command\": {command}, \"args\": [\"stdio\", \"--embedded\"] }} }} }}"
                ),
            )?;
        }
        writeln!(f)?;
        write!(f, "Stop with Ctrl-C.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn banner() -> Banner {
        Banner {
            url: "http://127.0.0.1:3000/mcp".into(),
            token: "t0k3n".into(),
            token_origin: Origin::Given,
            runner: "http://127.0.0.1:4000".into(),
            backend: BackendKind::Process,
            pool_size: 1,
            resource_limits: true,
            exe: Some(PathBuf::from("/opt/sandbox-mcp")),
            packages: Packages::default(),
            languages: vec![Lang::BASH, Lang::PYTHON, Lang::new("cpp").unwrap()],
            network: Vec::new(),
            network_by_default: false,
        }
    }

    #[test]
    fn the_banner_names_the_languages() {
        let text = banner().to_string();
        assert!(
            text.starts_with("sandbox-mcp is up: bash, Python and C++ in fresh sandboxes"),
            "{text}"
        );
    }

    #[test]
    fn the_banner_says_what_is_installed_or_how_to_install_it() {
        let bare = banner().to_string();
        assert!(bare.contains("`sandbox-runner packages build`"), "{bare}");
        let mut with = banner();
        let v = |name: &str| sandbox_protocol::api::PackageVersion {
            name: name.into(),
            version: "1".into(),
        };
        with.packages.python = vec![v("numpy"), v("pandas"), v("six")];
        with.packages.node = vec![v("lodash")];
        with.packages.inline_dependencies = true;
        let text = with.to_string();
        assert!(
            text.contains(
                "3 Python (numpy, pandas, ...) and 1 npm; plots come back as images; PEP 723"
            ),
            "{text}"
        );
    }

    #[test]
    fn where_the_runner_opens_hosts_the_banner_names_them_and_never_says_no_network() {
        let closed = banner().to_string();
        assert!(
            closed.contains("(the sandboxes have no network)"),
            "{closed}"
        );
        assert!(!closed.contains("Network:"), "{closed}");
        let mut open = banner();
        open.network = vec!["pypi.org".into(), "*.pythonhosted.org".into()];
        let text = open.to_string();
        assert!(!text.contains("no network"), "{text}");
        assert!(
            text.contains("  Network:       only pypi.org, *.pythonhosted.org, through"),
            "{text}"
        );
        assert!(text.contains("the ones it needs in egress"), "{text}");
        assert!(text.contains("reach only the hosts below"), "{text}");
        open.network_by_default = true;
        let text = open.to_string();
        assert!(text.contains("every call gets them"), "{text}");
    }

    #[test]
    fn the_add_json_line_holds_the_servers_own_object() {
        let line = banner().claude_add_json();
        let json = line
            .strip_prefix("claude mcp add-json sandbox '")
            .and_then(|l| l.strip_suffix('\''))
            .unwrap();
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(value["type"], "http");
        assert_eq!(value["url"], "http://127.0.0.1:3000/mcp");
        assert_eq!(value["headers"]["Authorization"], "Bearer t0k3n");
    }

    #[test]
    fn the_banner_counts_right_and_names_every_client() {
        let text = banner().to_string();
        assert!(
            text.contains("process backend, 1 sandbox at once"),
            "{text}"
        );
        for needle in [
            "claude mcp add --transport http",
            "claude mcp add-json",
            "[mcp_servers.sandbox]",
            "\"mcpServers\"",
            "\"--embedded\"",
            "create_sandbox gives a sandboxId",
        ] {
            assert!(text.contains(needle), "{needle} in {text}");
        }
        for line in text.lines().filter(|l| l.contains("mcpServers")) {
            let value: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
            assert!(value["mcpServers"]["sandbox"].is_object(), "{line}");
        }
    }
}
