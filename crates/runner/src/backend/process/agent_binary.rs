//! Which binary a forked sandbox executes as its agent (`--sandbox-agent`).
//!
//! Every sandbox a template forks executes its agent afresh (its own address layout and
//! stack canary, see sandbox-agent's `template::first`). The runner's binary can serve as
//! that agent, but it is large (tens of MB, tens of thousands of relocations, dynamically
//! linked); a `sandbox-agent` binary of the same build, statically linked, costs a
//! sandbox about 0.8 ms less CPU to execute (BENCHMARKS.md). The two speak the agent's
//! private protocol, so the runner executes a separate one only when it says the
//! runner's own build ([`sandbox_agent::BUILD`], asked with
//! [`BUILD_ARG`](sandbox_agent::multicall::BUILD_ARG)), and only a file that no one but
//! root or the runner's user may change, in a folder likewise.
//!
//! Not for: jails, which execute the runner's binary (the fallback path), nor VMs,
//! whose images hold their own static agent.

use crate::helper::wait_within;
use sandbox_agent::multicall::BUILD_ARG;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::Duration;

/// The agent binary's name beside the runner's executable.
pub const SIBLING: &str = "sandbox-agent";
/// How long the build's probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes of the probe's answer read (a build is 24 hex digits).
const ANSWER_MAX: u64 = 256;

/// The operator's choice of the sandboxes' agent binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentBinary {
    /// `auto`: [`SIBLING`] beside the runner's executable if it is there and of this
    /// build, else the runner's own binary (logged).
    Auto,
    /// `self`: the runner's own binary.
    Own,
    /// A path: that binary, which must be of this build (else the runner refuses to
    /// start).
    Path(PathBuf),
}

impl FromStr for AgentBinary {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(AgentBinary::Auto),
            "self" => Ok(AgentBinary::Own),
            "" => Err("an empty path: give auto, self or a path".to_owned()),
            path => Ok(AgentBinary::Path(PathBuf::from(path))),
        }
    }
}

/// Why a `sandbox-agent` binary is not used.
#[derive(Debug, thiserror::Error)]
pub enum AgentBinaryError {
    /// Its metadata could not be read.
    #[error("{0}: {1}")]
    Stat(PathBuf, std::io::Error),
    /// It is not a regular file.
    #[error("{0} is not a regular file")]
    NotAFile(PathBuf),
    /// Someone but root or the runner's user may change it (the file, or the folder holding it).
    #[error("{0} may be changed by others than root or the runner's user (owner {1}, mode {2:o})")]
    Writable(PathBuf, u32, u32),
    /// It could not be executed, or ended without saying a build.
    #[error("{0} did not say its build ({1})")]
    Probe(PathBuf, String),
    /// It is of another build.
    #[error("{path} is build {theirs}, this runner is build {ours}: install the sandbox-agent built with this runner")]
    OtherBuild {
        /// The binary.
        path: PathBuf,
        /// What it said.
        theirs: String,
        /// This runner's build.
        ours: &'static str,
    },
}

/// The binary sandboxes execute as their agent for `choice`: a path (its links
/// resolved, as checked), or none for the runner's own. `auto` never fails (a sibling
/// that cannot be used is logged); a path the operator named fails unless it is of this
/// build.
pub fn resolve(choice: &AgentBinary) -> Result<Option<PathBuf>, AgentBinaryError> {
    match choice {
        AgentBinary::Own => Ok(None),
        AgentBinary::Path(path) => check(path).map(Some),
        AgentBinary::Auto => Ok(sibling().and_then(|path| match check(&path) {
            Ok(path) => Some(path),
            Err(e) => {
                tracing::warn!(error = %e, "sandboxes execute the runner's own binary as their agent");
                None
            }
        })),
    }
}

/// [`SIBLING`] beside the runner's executable, if there is one.
fn sibling() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.join(SIBLING);
    path.exists().then_some(path)
}

/// Whether `path` may serve as the sandboxes' agent: a regular file that only root or
/// the runner's user may change, in a folder only they may change, which says this
/// build. Returns the path with its links resolved (what was checked, and what the
/// templates open).
pub fn check(path: &Path) -> Result<PathBuf, AgentBinaryError> {
    let real = std::fs::canonicalize(path).map_err(|e| AgentBinaryError::Stat(path.into(), e))?;
    let meta = std::fs::metadata(&real).map_err(|e| AgentBinaryError::Stat(real.clone(), e))?;
    if !meta.is_file() {
        return Err(AgentBinaryError::NotAFile(real));
    }
    only_ours(&real, &meta)?;
    if let Some(folder) = real.parent() {
        let folder_meta =
            std::fs::metadata(folder).map_err(|e| AgentBinaryError::Stat(folder.into(), e))?;
        only_ours(folder, &folder_meta)?;
    }
    let theirs = probe(&real).map_err(|e| AgentBinaryError::Probe(real.clone(), e))?;
    if theirs != sandbox_agent::BUILD {
        return Err(AgentBinaryError::OtherBuild {
            path: real,
            theirs,
            ours: sandbox_agent::BUILD,
        });
    }
    Ok(real)
}

/// Fails unless only root or the runner's user may change `path` (`meta`'s).
fn only_ours(path: &Path, meta: &std::fs::Metadata) -> Result<(), AgentBinaryError> {
    let owner = meta.uid();
    let ours = nix::unistd::geteuid().as_raw();
    if meta.mode() & 0o022 != 0 || (owner != 0 && owner != ours) {
        return Err(AgentBinaryError::Writable(
            path.into(),
            owner,
            meta.mode() & 0o7777,
        ));
    }
    Ok(())
}

/// What `path` says its build is, run with [`BUILD_ARG`], an empty environment and at
/// most [`PROBE_TIMEOUT`].
fn probe(path: &Path) -> Result<String, String> {
    let mut child = Command::new(path)
        .arg(BUILD_ARG)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let status = wait_within(&mut child, PROBE_TIMEOUT).map_err(|e| format!("it {e}"))?;
    let mut answer = String::new();
    if let Some(stdout) = child.stdout.take() {
        // Its answer is a line, in the pipe already: the process has ended.
        let _ = stdout.take(ANSWER_MAX).read_to_string(&mut answer);
    }
    if !status.success() {
        return Err(format!("it ended with {status}"));
    }
    match answer.trim() {
        "" => Err("it said nothing".to_owned()),
        build => Ok(build.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn choices_parse() {
        assert_eq!("auto".parse(), Ok(AgentBinary::Auto));
        assert_eq!("self".parse(), Ok(AgentBinary::Own));
        assert_eq!(
            "/usr/local/bin/sandbox-agent".parse(),
            Ok(AgentBinary::Path("/usr/local/bin/sandbox-agent".into()))
        );
        assert!("".parse::<AgentBinary>().is_err());
    }

    #[test]
    fn a_binary_of_another_build_or_none_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let other = script(
            dir.path(),
            "sandbox-agent",
            "echo 000000000000000000000000",
            0o755,
        );
        let e = check(&other).unwrap_err();
        assert!(matches!(e, AgentBinaryError::OtherBuild { .. }), "{e}");
        assert!(e.to_string().contains("000000000000000000000000"), "{e}");

        let silent = script(dir.path(), "silent", "exit 3", 0o755);
        let e = check(&silent).unwrap_err();
        assert!(matches!(e, AgentBinaryError::Probe(..)), "{e}");

        let missing = dir.path().join("missing");
        assert!(matches!(
            check(&missing).unwrap_err(),
            AgentBinaryError::Stat(..)
        ));
        assert!(matches!(
            check(dir.path()).unwrap_err(),
            AgentBinaryError::NotAFile(..)
        ));
        assert!(resolve(&AgentBinary::Path(missing)).is_err());
        // In a folder others may change (though the file is only its owner's).
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        let inside = script(&open, "sandbox-agent", "echo x", 0o755);
        set_mode(&open, 0o777);
        let e = check(&inside).unwrap_err();
        assert!(
            matches!(e, AgentBinaryError::Writable(ref p, ..) if p == &open),
            "{e}"
        );
        assert_eq!(resolve(&AgentBinary::Own).unwrap(), None);
    }

    #[test]
    fn a_binary_others_may_change_is_refused_before_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let touch = format!("touch {}", marker.display());
        let writable = script(dir.path(), "sandbox-agent", &touch, 0o757);
        let e = check(&writable).unwrap_err();
        assert!(matches!(e, AgentBinaryError::Writable(..)), "{e}");
        assert!(!marker.exists(), "the probe ran a binary others may change");
    }

    #[test]
    fn a_binary_that_never_answers_is_given_up() {
        let dir = tempfile::tempdir().unwrap();
        let slow = script(dir.path(), "slow", "exec sleep 60", 0o755);
        let started = Instant::now();
        let e = check(&slow).unwrap_err();
        assert!(matches!(e, AgentBinaryError::Probe(..)), "{e}");
        assert!(started.elapsed() < PROBE_TIMEOUT + Duration::from_secs(5));
    }

    /// A shell script `name` in `dir` running `body`, with `mode`.
    fn script(dir: &Path, name: &str, body: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        set_mode(&path, mode);
        path
    }

    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}
