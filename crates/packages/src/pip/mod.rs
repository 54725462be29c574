//! pip on the host: resolve requirements to pinned wheels (`--dry-run --report`), then
//! install exactly those wheels, hash-checked, into a `--target` tree.
//!
//! Every pip runs in a [`Scratch`] (its working folder, its temporary files, its
//! processes' confinement) through the guard (`python/pip_guard.py`), which ends it
//! before it follows any requirement named by URL in a package's metadata: with
//! `--only-binary=:all:` besides, pip fetches nothing but the index's wheels and
//! builds nothing, so no package's code runs. pip reads its configuration
//! (`PIP_INDEX_URL`, `PIP_FIND_LINKS`, pip.conf) as always; the scratch decides which
//! variables it sees. Every install has `--target` or `--dry-run --report`, the two
//! forms pip exempts from PEP 668's "externally-managed-environment" refusal (pip
//! 23.0.1, `commands/install.py`), so `--break-system-packages` is never needed.

mod classify;
mod report;

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use tokio::process::Command;
use tokio::time::Instant;

use crate::confine::Scratch;
use crate::names::name_of;
use crate::process::{last_lines, run, Output, ToolError};
use crate::store::PythonPackage;
use classify::{classify, Failure};
use report::parse_report;

/// The guard every pip runs through.
const GUARD: &str = include_str!("../python/pip_guard.py");
/// The guard's exit status when a requirement named by URL was refused.
const URL_REFUSED: i32 = 86;
/// The guard's exit status when it cannot hook this pip.
const UNGUARDED: i32 = 87;
/// The prefix of the guard's refusal line, followed by JSON.
const URL_REFUSED_PREFIX: &str = "sandbox-packages: url refused: ";
/// pip's report is a few KiB per package: more is not a report.
const REPORT_MAX: u64 = 16 << 20;

/// A wheel pip chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub package: PythonPackage,
    /// Asked for directly rather than pulled in by another package.
    pub requested: bool,
}

/// pip, run by one interpreter in one scratch, with `env` on top of the scratch's
/// environment.
pub(crate) struct Pip<'a> {
    pub interpreter: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    /// The interpreter's version, for messages.
    pub python_version: &'a str,
    /// Where its processes run and write.
    pub scratch: &'a dyn Scratch,
}

/// The interpreter's version (`3.11.2`).
pub(crate) async fn python_version(
    interpreter: &Path,
    env: &BTreeMap<String, String>,
    scratch: &dyn Scratch,
    deadline: Instant,
) -> Result<String, ToolError> {
    let mut cmd = scratch.command(interpreter);
    cmd.args([
        "-I",
        "-c",
        "import sys; print('%d.%d.%d' % sys.version_info[:3])",
    ]);
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
    scratch: &dyn Scratch,
    file: &Path,
    deadline: Instant,
) -> Result<(), ToolError> {
    let mut cmd = scratch.command(interpreter);
    cmd.args(["-I", "-m", "py_compile"]).arg(file);
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
    /// pip through the guard, in the scratch.
    fn command(&self) -> Command {
        let mut cmd = self.scratch.command(self.interpreter);
        cmd.args(["-I", "-c", GUARD])
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .env("PIP_NO_INPUT", "1")
            .envs(self.env);
        cmd
    }

    /// A file of the scratch, written before pip reads it: a new file (never through
    /// a link or over a file a process of the scratch made).
    fn input(&self, name: &str, items: &[String]) -> Result<PathBuf, ToolError> {
        let path = self.scratch.dir().join(name);
        let text: String = items.iter().map(|l| format!("{l}\n")).collect();
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(ToolError::io(&path))?;
        Ok(path)
    }

    /// Resolves `requirements` (with `constraints`, `name==version` lines) to wheels
    /// without installing anything.
    pub async fn resolve(
        &self,
        requirements: &[String],
        constraints: &[String],
        deadline: Instant,
    ) -> Result<Vec<Resolved>, ToolError> {
        let reqs = self.input("requirements.txt", requirements)?;
        let report = self.scratch.dir().join("report.json");
        let mut cmd = self.command();
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
            let cons = self.input("constraints.txt", constraints)?;
            cmd.arg("-c").arg(&cons);
        }
        let out = run(cmd, deadline).await?;
        if !out.status.success() {
            return Err(self.failure("resolving", &out, deadline).await);
        }
        let bytes = read_report(&report)?;
        parse_report(&bytes).map_err(|reason| ToolError::Output {
            path: report,
            reason,
        })
    }

    /// Installs exactly `packages` into `target`, each wheel checked against its hash.
    pub async fn install(
        &self,
        packages: &[PythonPackage],
        target: &Path,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let pinned: Vec<String> = packages
            .iter()
            .map(|p| format!("{}=={} --hash=sha256:{}", p.name, p.version, p.sha256))
            .collect();
        let lock = self.input("lock.txt", &pinned)?;
        let mut cmd = self.command();
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
            return Err(self.failure("installing", &out, deadline).await);
        }
        Ok(())
    }

    /// Turns a failed pip into a [`ToolError`]: the guard's refusals first, then what
    /// pip's output says; for a package without any usable wheel, asks the index
    /// whether it exists at all, to say which it is.
    async fn failure(&self, step: &'static str, out: &Output, deadline: Instant) -> ToolError {
        let text = out.text();
        if self.scratch.out_of_memory() {
            return ToolError::OutOfMemory;
        }
        match out.status.code() {
            Some(URL_REFUSED) => return url_refusal(&out.stderr),
            Some(UNGUARDED) => {
                return ToolError::Failed {
                    step: "starting pip",
                    detail: last_lines(&text, 3),
                }
            }
            _ => {}
        }
        match classify(&text) {
            Failure::NoSpace => ToolError::NoSpace,
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
                let message = match self.index_has(&name, deadline).await {
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
                detail: last_lines(&text, 8),
            },
        }
    }

    /// Whether the index lists any version of `name`, wheels or not (`pip index
    /// versions`, which downloads no file and builds nothing); `None` if unknown.
    async fn index_has(&self, name: &str, deadline: Instant) -> Option<bool> {
        let mut cmd = self.command();
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

/// The guard's refusal, from its last line on stderr.
fn url_refusal(stderr: &str) -> ToolError {
    #[derive(serde::Deserialize)]
    struct Refused {
        package: String,
        #[serde(default)]
        distribution: String,
        dependency: String,
        url: String,
    }
    let refused = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(URL_REFUSED_PREFIX))
        .and_then(|json| serde_json::from_str::<Refused>(json).ok());
    match refused {
        Some(r) => ToolError::UrlDependency {
            package: crate::names::normalize_name(&r.package),
            distribution: r.distribution,
            dependency: r.dependency,
            url: r.url,
        },
        None => ToolError::UrlDependency {
            package: "(unknown)".into(),
            distribution: String::new(),
            dependency: String::new(),
            url: String::new(),
        },
    }
}

/// Reads pip's report: a regular file, not through a link, of a bounded size.
fn read_report(path: &Path) -> Result<Vec<u8>, ToolError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(ToolError::io(path))?;
    let meta = file.metadata().map_err(ToolError::io(path))?;
    if !meta.is_file() || meta.len() > REPORT_MAX {
        return Err(ToolError::Output {
            path: path.to_owned(),
            reason: format!("not a regular file of at most {REPORT_MAX} bytes"),
        });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(REPORT_MAX)
        .read_to_end(&mut bytes)
        .map_err(ToolError::io(path))?;
    Ok(bytes)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_version_lists_keep_the_newest() {
        assert_eq!(last_versions("1, 2, 3", 2), "..., 2, 3");
        assert_eq!(last_versions("1, 2", 2), "1, 2");
    }
}
