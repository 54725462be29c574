//! Where pip and the interpreter run while a script's dependencies are resolved.
//!
//! A [`Confinement`] gives each resolution a [`Scratch`]: a folder bounded in size that
//! holds everything the resolution's processes write (pip's temporary files, its
//! downloads, the installed tree), and a way to start those processes inside it. The
//! runner's confinement (crates/runner/src/deps/jail.rs) is a tmpfs of the given size, a
//! user of its own, a cgroup with memory, CPU and process limits, and an environment
//! built from nothing but pip's own settings; dropping the scratch kills whatever still
//! runs in it and removes the folder, whatever ended the resolution.
//!
//! [`Unconfined`] is this process's user, environment and disk: the operator's
//! `packages build`, and tests that run without root.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use tokio::process::Command;

use crate::tree::WorkTree;

/// Variables that would make pip install somewhere else than `--target`, or refuse to,
/// or make the interpreter load code from elsewhere.
pub(crate) const REMOVED_ENV: &[&str] = &[
    "PIP_USER",
    "PIP_TARGET",
    "PIP_PREFIX",
    "PIP_ROOT",
    "PIP_EDITABLE",
    "PIP_REQUIRE_VIRTUALENV",
    "PIP_BREAK_SYSTEM_PACKAGES",
    "PIP_SRC",
    "PIP_CACHE_DIR",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONSTARTUP",
];

/// Variables besides `PIP_*` that say how pip reaches its index: proxies and
/// certificate authorities.
const NETWORK_ENV: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
];

/// The variables of `vars` (normally this process's) that hold pip's settings: every
/// `PIP_*` but those that would send it elsewhere ([`REMOVED_ENV`]), and the proxies'
/// and certificate authorities' locations. Nothing else passes: not the runner's token,
/// not any other secret of the process.
pub fn pip_environment(
    vars: impl IntoIterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    vars.into_iter()
        .filter(|(name, _)| {
            (name.starts_with("PIP_") || NETWORK_ENV.contains(&name.as_str()))
                && !REMOVED_ENV.contains(&name.as_str())
        })
        .collect()
}

/// Why a scratch could not be made.
#[derive(Debug, thiserror::Error)]
#[error("preparing a place for the resolver: {step} {}: {source}", path.display())]
pub struct ConfineError {
    /// What was being done.
    pub step: &'static str,
    /// The file or folder concerned.
    pub path: PathBuf,
    /// What failed underneath.
    pub source: io::Error,
}

/// Gives each resolution a [`Scratch`].
pub trait Confinement: Send + Sync + fmt::Debug {
    /// A scratch whose folder holds at most about `space` bytes, for one resolution.
    fn scratch(&self, space: u64) -> Result<Box<dyn Scratch>, ConfineError>;
}

/// One resolution's place: its folder, and how its processes start. Dropping it ends
/// every process it started and removes the folder.
pub trait Scratch: Send + Sync {
    /// The folder the processes write in (and nowhere else).
    fn dir(&self) -> &Path;

    /// `program`, ready to run confined: its environment, user, limits and working
    /// folder are set; the caller adds arguments and variables.
    fn command(&self, program: &Path) -> Command;

    /// Whether the out-of-memory killer has killed a process of the scratch (a
    /// confinement without a memory limit never has).
    fn out_of_memory(&self) -> bool {
        false
    }
}

/// This process's user, environment and disk: a folder under `parent` that is
/// removed when the scratch is dropped, and commands that inherit the environment
/// (without [`REMOVED_ENV`]), their temporary files in that folder.
#[derive(Debug, Clone)]
pub struct Unconfined {
    parent: PathBuf,
}

impl Unconfined {
    /// Scratches below `parent` (which must exist).
    pub fn new(parent: impl Into<PathBuf>) -> Unconfined {
        Unconfined {
            parent: parent.into(),
        }
    }
}

impl Confinement for Unconfined {
    fn scratch(&self, _space: u64) -> Result<Box<dyn Scratch>, ConfineError> {
        let work = WorkTree::new(&self.parent, "scratch").map_err(|source| ConfineError {
            step: "making",
            path: self.parent.clone(),
            source,
        })?;
        Ok(Box::new(UnconfinedScratch { work }))
    }
}

struct UnconfinedScratch {
    work: WorkTree,
}

impl Scratch for UnconfinedScratch {
    fn dir(&self) -> &Path {
        self.work.path()
    }

    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        for var in REMOVED_ENV {
            cmd.env_remove(var);
        }
        cmd.env("TMPDIR", self.dir()).current_dir(self.dir());
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pip_settings_pass() {
        let vars = [
            ("PIP_INDEX_URL", "https://mirror/simple"),
            ("PIP_TARGET", "/etc"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("SSL_CERT_FILE", "/etc/ssl/certs/ca.pem"),
            ("SANDBOX_RUNNER_TOKEN", "secret"),
            ("RUNNER_DEPS_MAX_MB", "10"),
            ("HOME", "/root"),
            ("PYTHONPATH", "/evil"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let env = pip_environment(vars);
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(names, ["HTTPS_PROXY", "PIP_INDEX_URL", "SSL_CERT_FILE"]);
    }

    #[tokio::test]
    async fn an_unconfined_scratch_goes_with_its_files() {
        let parent = tempfile::tempdir().unwrap();
        let scratch = Unconfined::new(parent.path()).scratch(1 << 20).unwrap();
        let dir = scratch.dir().to_owned();
        let out = scratch
            .command(Path::new("/bin/sh"))
            .args(["-c", "mkdir -p $TMPDIR/pip-unpack-x && echo $TMPDIR"])
            .output()
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            dir.to_string_lossy()
        );
        assert!(dir.join("pip-unpack-x").is_dir());
        drop(scratch);
        assert!(!dir.exists());
    }
}
