//! npm on the host: resolve packages to a lock (`--package-lock-only`), then install
//! exactly that lock (`npm ci`), with install scripts off.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::Deserialize;
use tokio::process::Command;
use tokio::time::Instant;

use crate::process::{last_lines, run, ToolError};
use crate::store::NodePackage;

/// One entry of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodePin {
    /// Where it goes, `node_modules/a/node_modules/b`.
    pub path: String,
    pub name: String,
    pub version: String,
    pub integrity: String,
}

impl NodePin {
    pub fn package(&self) -> NodePackage {
        NodePackage {
            name: self.name.clone(),
            version: self.version.clone(),
            integrity: self.integrity.clone(),
        }
    }
}

/// npm, with the host's environment and `env` on top.
pub(crate) struct Npm<'a> {
    pub program: &'a Path,
    pub env: &'a BTreeMap<String, String>,
}

impl Npm<'_> {
    fn command(&self, prefix: &Path, subcommand: &str) -> Command {
        let mut cmd = Command::new(self.program);
        cmd.arg(subcommand)
            .arg("--prefix")
            .arg(prefix)
            .args(["--no-audit", "--no-fund", "--ignore-scripts"])
            .current_dir(prefix)
            .env("npm_config_update_notifier", "false")
            .envs(self.env);
        cmd
    }

    /// Resolves `specs` into `<prefix>/package.json` and `package-lock.json`, and reads
    /// the lock. Nothing is installed.
    pub async fn lock(
        &self,
        prefix: &Path,
        specs: &[String],
        deadline: Instant,
    ) -> Result<Vec<NodePin>, ToolError> {
        if let Some(bad) = specs
            .iter()
            .find(|s| s.starts_with('-') || s.trim().is_empty())
        {
            return Err(ToolError::Failed {
                step: "reading the npm package list",
                detail: format!("{bad:?} is not a package"),
            });
        }
        let mut cmd = self.command(prefix, "install");
        cmd.arg("--package-lock-only").arg("--").args(specs);
        let out = run(cmd, deadline).await?;
        if !out.status.success() {
            return Err(classify(&out.text()));
        }
        let lock = prefix.join("package-lock.json");
        let bytes = fs::read(&lock).map_err(ToolError::io(&lock))?;
        parse_lock(&bytes).map_err(|reason| ToolError::Output { path: lock, reason })
    }

    /// Installs the lock in `prefix` into `<prefix>/node_modules`.
    pub async fn install(&self, prefix: &Path, deadline: Instant) -> Result<(), ToolError> {
        let out = run(self.command(prefix, "ci"), deadline).await?;
        if !out.status.success() {
            return Err(classify(&out.text()));
        }
        Ok(())
    }
}

fn classify(text: &str) -> ToolError {
    const UNREACHABLE: &[&str] = &[
        "ENOTFOUND",
        "ECONNREFUSED",
        "ECONNRESET",
        "ETIMEDOUT",
        "EAI_AGAIN",
        "ENETUNREACH",
    ];
    if let Some(line) = text
        .lines()
        .find(|l| UNREACHABLE.iter().any(|m| l.contains(m)))
    {
        return ToolError::Unreachable {
            package: None,
            detail: line.trim().to_owned(),
        };
    }
    if ["E404", "ETARGET", "No matching version found"]
        .iter()
        .any(|m| text.contains(m))
    {
        // "npm error 404 Not Found - GET https://registry.npmjs.org/x - Not found",
        // "npm error notarget No matching version found for x@99."
        let package = text
            .lines()
            .find_map(|l| {
                l.split_once("No matching version found for ")
                    .map(|(_, r)| r.trim_end_matches('.').to_owned())
                    .or_else(|| {
                        let (_, r) = l.split_once("404 Not Found - GET ")?;
                        let url = r.split_whitespace().next()?;
                        let name = url.rsplit_once(".org/").map_or(url, |(_, n)| n);
                        Some(name.replace("%2f", "/").replace("%2F", "/"))
                    })
            })
            .unwrap_or_else(|| "a package".to_owned());
        return ToolError::NotFound {
            message: format!("npm: {package} is not in the registry"),
            package,
        };
    }
    if text.contains("ERESOLVE") {
        return ToolError::Conflict {
            detail: last_lines(text, 6),
        };
    }
    ToolError::Failed {
        step: "npm",
        detail: last_lines(text, 8),
    }
}

#[derive(Deserialize)]
struct Lock {
    #[serde(default)]
    packages: BTreeMap<String, LockEntry>,
}

#[derive(Deserialize)]
struct LockEntry {
    version: Option<String>,
    integrity: Option<String>,
    #[serde(default)]
    link: bool,
}

/// The packages of a lock (lockfileVersion 2 or 3), in path order.
pub(crate) fn parse_lock(bytes: &[u8]) -> Result<Vec<NodePin>, String> {
    let lock: Lock = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let mut pins = Vec::new();
    for (path, entry) in lock.packages {
        let Some((_, name)) = path.rsplit_once("node_modules/") else {
            continue; // the root project
        };
        if entry.link {
            continue;
        }
        let version = entry
            .version
            .ok_or_else(|| format!("{path} has no version"))?;
        pins.push(NodePin {
            name: name.to_owned(),
            version,
            integrity: entry.integrity.unwrap_or_default(),
            path,
        });
    }
    Ok(pins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_list_every_package() {
        let lock = br#"{"name": "node", "lockfileVersion": 3, "packages": {
            "": {"dependencies": {"is-number": "^7.0.0"}},
            "node_modules/@types/node": {"version": "20.1.0", "integrity": "sha512-a"},
            "node_modules/is-number": {"version": "7.0.0", "integrity": "sha512-b"},
            "node_modules/a/node_modules/b": {"version": "1.0.0", "inBundle": true}}}"#;
        let pins = parse_lock(lock).unwrap();
        let names: Vec<_> = pins
            .iter()
            .map(|p| (p.name.as_str(), p.version.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("@types/node", "20.1.0"),
                ("b", "1.0.0"),
                ("is-number", "7.0.0")
            ]
        );
        assert_eq!(pins[1].integrity, "");
    }

    #[test]
    fn npm_failures_are_told_apart() {
        let e = classify("npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/nope-xyz - Not found\n");
        assert!(
            matches!(e, ToolError::NotFound { ref package, .. } if package == "nope-xyz"),
            "{e:?}"
        );
        let e = classify("npm error code ENOTFOUND\nnpm error request to https://registry.npmjs.org/x failed, reason: getaddrinfo ENOTFOUND\n");
        assert!(matches!(e, ToolError::Unreachable { .. }));
        let e = classify("npm error notarget No matching version found for is-number@99.\n");
        assert!(matches!(e, ToolError::NotFound { ref package, .. } if package == "is-number@99"));
    }
}
