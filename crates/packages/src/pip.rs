//! pip on the host: resolve requirements to pinned wheels (`--dry-run --report`), then
//! install exactly those wheels, hash-checked, into a `--target` tree.
//!
//! pip reads the host's configuration (`PIP_INDEX_URL`, `PIP_FIND_LINKS`, pip.conf) as
//! always; this module only adds what keeps it quiet and away from the host's Python:
//! every install has `--target` or `--dry-run --report`, and the variables that would
//! send it elsewhere (`PIP_USER`, `PIP_PREFIX`, ...) are removed. pip exempts exactly
//! those two forms from PEP 668's "externally-managed-environment" refusal (pip
//! 23.0.1, `commands/install.py`), so `--break-system-packages` is never needed.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::Path;

use serde::Deserialize;
use tokio::process::Command;
use tokio::time::Instant;

use crate::key::sha256_hex;
use crate::names::{name_of, normalize_name};
use crate::process::{last_lines, run, ToolError};
use crate::store::PythonPackage;

/// Variables that would make pip install somewhere else than `--target`, or refuse to.
const REMOVED_ENV: &[&str] = &[
    "PIP_USER",
    "PIP_TARGET",
    "PIP_PREFIX",
    "PIP_ROOT",
    "PIP_EDITABLE",
    "PIP_REQUIRE_VIRTUALENV",
    "PIP_BREAK_SYSTEM_PACKAGES",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUSERBASE",
];

/// A wheel pip chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub package: PythonPackage,
    /// Asked for directly rather than pulled in by another package.
    pub requested: bool,
}

/// pip, run by one interpreter with the host's environment and `env` on top.
pub(crate) struct Pip<'a> {
    pub interpreter: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    /// The interpreter's version, for messages.
    pub python_version: &'a str,
}

/// The interpreter's version (`3.11.2`).
pub(crate) async fn python_version(
    interpreter: &Path,
    env: &BTreeMap<String, String>,
    deadline: Instant,
) -> Result<String, ToolError> {
    let mut cmd = Command::new(interpreter);
    cmd.args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"]);
    for var in REMOVED_ENV {
        cmd.env_remove(var);
    }
    cmd.envs(env);
    let out = run(cmd, deadline).await?;
    let version = out.stdout.trim();
    if !out.status.success() || version.is_empty() {
        return Err(ToolError::Failed {
            step: "asking the interpreter for its version",
            detail: last_lines(&out.text(), 5),
        });
    }
    Ok(version.to_owned())
}

/// Compiles `file` to bytecode beside it (`__pycache__/`), as pip does for the
/// packages: the set is read-only, so the sandboxes could not.
pub(crate) async fn compile(
    interpreter: &Path,
    env: &BTreeMap<String, String>,
    file: &Path,
    deadline: Instant,
) -> Result<(), ToolError> {
    let mut cmd = Command::new(interpreter);
    cmd.args(["-m", "py_compile"]).arg(file);
    for var in REMOVED_ENV {
        cmd.env_remove(var);
    }
    cmd.envs(env);
    let out = run(cmd, deadline).await?;
    if !out.status.success() {
        return Err(ToolError::Failed {
            step: "compiling sandbox_plots.py",
            detail: last_lines(&out.text(), 5),
        });
    }
    Ok(())
}

impl Pip<'_> {
    fn command(&self, cwd: &Path) -> Command {
        let mut cmd = Command::new(self.interpreter);
        cmd.args(["-m", "pip"]).current_dir(cwd);
        for var in REMOVED_ENV {
            cmd.env_remove(var);
        }
        cmd.env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .env("PIP_NO_INPUT", "1")
            .envs(self.env);
        cmd
    }

    /// Resolves `requirements` (with `constraints`, `name==version` lines) to wheels
    /// without installing anything. Files are written in `work`.
    pub async fn resolve(
        &self,
        work: &Path,
        requirements: &[String],
        constraints: &[String],
        deadline: Instant,
    ) -> Result<Vec<Resolved>, ToolError> {
        let reqs = work.join("requirements.txt");
        fs::write(&reqs, lines(requirements)).map_err(ToolError::io(&reqs))?;
        let report = work.join("report.json");
        let mut cmd = self.command(work);
        cmd.args([
            "install",
            "--dry-run",
            "--ignore-installed",
            "--only-binary=:all:",
            "--progress-bar=off",
            "--report",
        ])
        .arg(&report)
        .arg("-r")
        .arg(&reqs);
        if !constraints.is_empty() {
            let cons = work.join("constraints.txt");
            fs::write(&cons, lines(constraints)).map_err(ToolError::io(&cons))?;
            cmd.arg("-c").arg(&cons);
        }
        let out = run(cmd, deadline).await?;
        if !out.status.success() {
            return Err(self.failure("resolving", &out.text(), work, deadline).await);
        }
        let bytes = fs::read(&report).map_err(ToolError::io(&report))?;
        parse_report(&bytes).map_err(|reason| ToolError::Output {
            path: report,
            reason,
        })
    }

    /// Installs exactly `packages` into `target`, each wheel checked against its hash.
    pub async fn install(
        &self,
        work: &Path,
        packages: &[PythonPackage],
        target: &Path,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let lock = work.join("lock.txt");
        let pinned: Vec<String> = packages
            .iter()
            .map(|p| format!("{}=={} --hash=sha256:{}", p.name, p.version, p.sha256))
            .collect();
        fs::write(&lock, lines(&pinned)).map_err(ToolError::io(&lock))?;
        let mut cmd = self.command(work);
        cmd.args([
            "install",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
            "--progress-bar=off",
            "--target",
        ])
        .arg(target)
        .arg("-r")
        .arg(&lock);
        let out = run(cmd, deadline).await?;
        if !out.status.success() {
            return Err(self
                .failure("installing", &out.text(), work, deadline)
                .await);
        }
        Ok(())
    }

    /// Turns pip's output into a [`ToolError`]; for a package without any usable
    /// wheel, asks the index whether it exists at all, to say which it is.
    async fn failure(
        &self,
        step: &'static str,
        text: &str,
        work: &Path,
        deadline: Instant,
    ) -> ToolError {
        match classify(text) {
            Failure::Unreachable {
                requirement,
                detail,
            } => ToolError::Unreachable {
                package: requirement.as_deref().map(name_of),
                detail,
            },
            Failure::Conflict { detail } => ToolError::Conflict { detail },
            Failure::NotFound {
                requirement,
                versions: Some(versions),
            } => ToolError::NotFound {
                package: name_of(&requirement),
                message: format!(
                    "no version matching {requirement} has a wheel for Python {} on this \
                     platform (versions with one: {})",
                    self.python_version,
                    last_versions(&versions, 10)
                ),
            },
            Failure::NotFound {
                requirement,
                versions: None,
            } => {
                let name = name_of(&requirement);
                let message = match self.index_has(&name, work, deadline).await {
                    Some(true) => format!(
                        "{name} has no wheel for Python {} on this platform: only \
                         prebuilt wheels are installed, packages are never built from source",
                        self.python_version
                    ),
                    Some(false) => format!("no package named {name} on the package index"),
                    None => format!(
                        "no wheel of {name} for Python {} on this platform: either there \
                         is no such package, or it publishes no wheel for this Python and \
                         platform (only prebuilt wheels are installed)",
                        self.python_version
                    ),
                };
                ToolError::NotFound {
                    package: name,
                    message,
                }
            }
            Failure::Other => ToolError::Failed {
                step,
                detail: last_lines(text, 8),
            },
        }
    }

    /// Whether the index lists any version of `name`, wheels or not (`pip index
    /// versions`, which downloads no file and builds nothing); `None` if unknown.
    async fn index_has(&self, name: &str, work: &Path, deadline: Instant) -> Option<bool> {
        let mut cmd = self.command(work);
        cmd.args(["index", "versions", name]);
        let out = run(cmd, deadline).await.ok()?;
        if out.status.success() {
            return Some(true);
        }
        match classify(&out.text()) {
            Failure::NotFound { .. } => Some(false),
            _ => None,
        }
    }
}

/// The last `n` of pip's comma-separated version list (the newest, as pip sorts them).
fn last_versions(list: &str, n: usize) -> String {
    let all: Vec<&str> = list.split(", ").collect();
    let kept = all[all.len().saturating_sub(n)..].join(", ");
    if all.len() > n {
        format!("..., {kept}")
    } else {
        kept
    }
}

fn lines(items: &[String]) -> String {
    items.iter().map(|l| format!("{l}\n")).collect()
}

/// What pip's output says went wrong.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// "No matching distribution found for X"; `versions` is pip's "from versions"
    /// list, `None` when it is "none".
    NotFound {
        requirement: String,
        versions: Option<String>,
    },
    /// A connection to the index failed.
    Unreachable {
        requirement: Option<String>,
        detail: String,
    },
    /// The requirements cannot all hold at once.
    Conflict { detail: String },
    /// Something else.
    Other,
}

/// Connection failures as pip (urllib3, requests) words them.
const UNREACHABLE: &[&str] = &[
    "Failed to establish a new connection",
    "Max retries exceeded",
    "Network is unreachable",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Connection refused",
    "ConnectTimeoutError",
    "Read timed out",
    "ProxyError",
    "There was a problem confirming the ssl certificate",
];

pub(crate) fn classify(text: &str) -> Failure {
    let requirement = text.lines().find_map(|l| {
        l.split_once("No matching distribution found for ")
            .map(|(_, r)| r.trim().to_owned())
    });
    if let Some(line) = text
        .lines()
        .find(|l| UNREACHABLE.iter().any(|m| l.contains(m)))
    {
        let detail = UNREACHABLE
            .iter()
            .find_map(|m| line.find(m).map(|i| &line[i..]))
            .unwrap_or(line);
        // urllib3 quotes the cause inside its exception's repr: keep the cause.
        let detail = detail.split('\'').next().unwrap_or(detail);
        return Failure::Unreachable {
            requirement,
            detail: detail
                .chars()
                .take(200)
                .collect::<String>()
                .trim()
                .to_owned(),
        };
    }
    if let Some(requirement) = requirement {
        let versions = text.lines().find_map(|l| {
            let (_, rest) = l.split_once("(from versions: ")?;
            let list = rest.trim_end().strip_suffix(')')?.trim();
            (list != "none").then(|| list.to_owned())
        });
        return Failure::NotFound {
            requirement,
            versions,
        };
    }
    if text.contains("ResolutionImpossible") || text.contains("conflicting dependencies") {
        let caused: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.contains("The conflict is caused by:"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .map(str::trim)
            .collect();
        let detail = if caused.is_empty() {
            last_lines(text, 3)
        } else {
            caused.join("; ")
        };
        return Failure::Conflict { detail };
    }
    Failure::Other
}

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
    fn not_found_names_the_requirement() {
        let text = "ERROR: Could not find a version that satisfies the requirement \
                    this-package-does-not-exist-xyz-123 (from versions: none)\n\
                    ERROR: No matching distribution found for this-package-does-not-exist-xyz-123\n";
        assert_eq!(
            classify(text),
            Failure::NotFound {
                requirement: "this-package-does-not-exist-xyz-123".into(),
                versions: None
            }
        );
        let text = "ERROR: Could not find a version that satisfies the requirement six>=99 \
                    (from versions: 1.16.0, 1.17.0)\nERROR: No matching distribution found for six>=99\n";
        assert_eq!(
            classify(text),
            Failure::NotFound {
                requirement: "six>=99".into(),
                versions: Some("1.16.0, 1.17.0".into())
            }
        );
    }

    #[test]
    fn connection_errors_win_over_not_found() {
        let text = "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, \
                    status=None)) after connection broken by 'NewConnectionError('<pip._vendor.\
                    urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new \
                    connection: [Errno 111] Connection refused')': /simple/six/\n\
                    ERROR: Could not find a version that satisfies the requirement six (from versions: none)\n\
                    ERROR: No matching distribution found for six\n";
        match classify(text) {
            Failure::Unreachable {
                requirement,
                detail,
            } => {
                assert_eq!(requirement.as_deref(), Some("six"));
                assert!(
                    detail.starts_with("Failed to establish a new connection"),
                    "{detail}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn long_version_lists_keep_the_newest() {
        assert_eq!(last_versions("1, 2, 3", 2), "..., 2, 3");
        assert_eq!(last_versions("1, 2", 2), "1, 2");
    }

    #[test]
    fn conflicts_say_what_conflicts() {
        let text = "ERROR: Cannot install numpy<2 because these package versions have conflicting dependencies.\n\n\
                    The conflict is caused by:\n    The user requested numpy<2\n    \
                    The user requested (constraint) numpy==2.1.0\n\nTo fix this you could try to:\n\
                    ERROR: ResolutionImpossible: for help visit https://pip.pypa.io\n";
        assert_eq!(
            classify(text),
            Failure::Conflict {
                detail: "The user requested numpy<2; The user requested (constraint) numpy==2.1.0"
                    .into()
            }
        );
        assert_eq!(classify("ERROR: something else\n"), Failure::Other);
    }

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
