//! Building a base set: resolve, key, install into a work tree, make it read-only,
//! rename it into `sets/<key>`, point `current` at it.
//!
//! The steps, in order:
//! 1. resolve the Python requirements to pinned wheels (`pip install --dry-run --report`);
//! 2. resolve the npm packages to a lock (`npm install --package-lock-only`);
//! 3. compute the key; if `sets/<key>` exists, point `current` at it and stop (cached);
//! 4. install the wheels, hash-checked (`pip install --no-deps --require-hashes --target`),
//!    and write `sandbox_plots.py` beside them, compiled;
//! 5. install the lock (`npm ci`);
//! 6. measure, write `manifest.json`, make everything read-only;
//! 7. rename into `sets/<key>`, point `current` at it.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::confine::{Confinement, Unconfined};
use crate::key::set_key;
use crate::npm::{NodePin, Npm};
use crate::pip::{self, Pip};
use crate::process::ToolError;
use crate::store::{io_error, Manifest, PackageSet, Store, StoreError, MANIFEST_FILE};
use crate::tree::{is_taken, make_read_only, rfc3339, tree_size};
use crate::{DEFAULT_NODE, DEFAULT_PYTHON};

/// The module every base set carries beside its packages.
pub const SANDBOX_PLOTS: &str = include_str!("python/sandbox_plots.py");

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildSpec {
    /// Python requirement lines (`numpy`, `pandas>=2`).
    pub python: Vec<String>,
    /// npm package specs (`lodash`, `zod@3`).
    pub node: Vec<String>,
    /// The Python the sandboxes run; wheels are chosen for it.
    pub interpreter: PathBuf,
    /// The npm program.
    pub npm: PathBuf,
    /// How long the whole build may take; pip and npm are killed when it runs out.
    pub timeout: Duration,
    /// Variables set for pip and npm on top of the host's environment.
    pub env: BTreeMap<String, String>,
}

impl Default for BuildSpec {
    /// [`DEFAULT_PYTHON`] and [`DEFAULT_NODE`] with `/usr/bin/python3` and
    /// `/usr/bin/npm`, thirty minutes.
    fn default() -> Self {
        BuildSpec {
            python: DEFAULT_PYTHON.iter().map(|s| s.to_string()).collect(),
            node: DEFAULT_NODE.iter().map(|s| s.to_string()).collect(),
            interpreter: PathBuf::from("/usr/bin/python3"),
            npm: PathBuf::from("/usr/bin/npm"),
            timeout: Duration::from_secs(30 * 60),
            env: BTreeMap::new(),
        }
    }
}

/// What a build did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildReport {
    /// The set's key.
    pub key: String,
    /// The set, `<root>/sets/<key>`, which `current` now points to.
    pub set: PackageSet,
    /// The set existed already: nothing was installed.
    pub cached: bool,
    /// Disk space of `python/`, in bytes.
    pub python_bytes: u64,
    /// Disk space of `node/`, in bytes.
    pub node_bytes: u64,
    /// Python packages in the set (requested and pulled in).
    pub python_packages: usize,
    /// npm packages in the set.
    pub node_packages: usize,
    /// How long the build took.
    pub elapsed: Duration,
}

/// A step of a build, for the caller to show (its `Display` is one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Resolving the Python requirements.
    ResolvingPython {
        /// Requirement lines.
        requirements: usize,
    },
    /// Resolving the npm packages.
    ResolvingNode {
        /// Package specs.
        packages: usize,
    },
    /// Resolved: the set's key, and whether it exists already.
    Resolved {
        /// The key.
        key: String,
        /// Python wheels in the set.
        python: usize,
        /// npm packages in the set.
        node: usize,
        /// The set exists: nothing to install.
        cached: bool,
    },
    /// Installing the wheels.
    InstallingPython {
        /// Wheels.
        wheels: usize,
    },
    /// Installing the npm lock.
    InstallingNode {
        /// Packages.
        packages: usize,
    },
    /// Installed and measured.
    Installed {
        /// Bytes of `python/`.
        python_bytes: u64,
        /// Bytes of `node/`.
        node_bytes: u64,
    },
    /// `current` points at the set.
    Current {
        /// The key.
        key: String,
    },
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Progress::ResolvingPython { requirements } => {
                write!(f, "resolving python packages ({requirements} requested)...")
            }
            Progress::ResolvingNode { packages } => {
                write!(f, "resolving node packages ({packages} requested)...")
            }
            Progress::Resolved {
                key,
                python,
                node,
                cached,
            } => write!(
                f,
                "resolved {python} python and {node} node packages: set {}{}",
                short(key),
                if *cached { " (cached)" } else { "" }
            ),
            Progress::InstallingPython { wheels } => {
                write!(f, "installing {}...", plural(*wheels, "wheel", "wheels"))
            }
            Progress::InstallingNode { packages } => write!(
                f,
                "installing {}...",
                plural(*packages, "node package", "node packages")
            ),
            Progress::Installed {
                python_bytes,
                node_bytes,
            } => write!(
                f,
                "installed: python {}, node {}",
                human(*python_bytes),
                human(*node_bytes)
            ),
            Progress::Current { key } => write!(f, "current -> sets/{key}"),
        }
    }
}

fn short(key: &str) -> &str {
    key.get(..12).unwrap_or(key)
}

/// Bytes for people: `12.3 MiB`, `40 KiB`, `1 bytes`.
pub fn human(bytes: u64) -> String {
    if bytes < 1 << 10 {
        format!("{bytes} bytes")
    } else if bytes < 1 << 20 {
        format!("{} KiB", bytes.div_ceil(1024))
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Why a build failed, by step.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The store could not be read or changed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file of the work tree could not be written or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// pip, npm or the interpreter could not be started.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The build ran past its timeout; pip or npm was killed.
    #[error("the build took longer than {}s while {step}", timeout.as_secs())]
    Timeout {
        /// What it was doing.
        step: &'static str,
        /// The spec's timeout.
        timeout: Duration,
    },
    /// A requested package, version or wheel does not exist.
    #[error("{message}")]
    NotFound {
        /// The package pip or npm named.
        package: String,
        /// What is missing, in words.
        message: String,
    },
    /// The index or registry could not be reached.
    #[error("the package index could not be reached while {step}: {detail}")]
    Unreachable {
        /// What it was doing.
        step: &'static str,
        /// The connection error.
        detail: String,
    },
    /// The requirements contradict each other.
    #[error("the requirements conflict: {detail}")]
    Conflict {
        /// pip's or npm's account of it.
        detail: String,
    },
    /// pip's report or npm's lock was not what was expected.
    #[error("{}: {reason}", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// pip or npm failed otherwise.
    #[error("{step} failed: {detail}")]
    Failed {
        /// The step.
        step: &'static str,
        /// The end of its output.
        detail: String,
    },
    /// The spec asks for nothing.
    #[error("nothing to build: no python and no node packages")]
    Empty,
    /// A package's metadata names a dependency by URL: nothing was fetched from it.
    #[error(
        "{package} names its dependency {dependency} by URL ({url}): packages are \
         installed from the package index only, so {package} cannot be in a set"
    )]
    UrlDependency {
        /// The package whose metadata names it.
        package: String,
        /// The dependency.
        dependency: String,
        /// The URL.
        url: String,
    },
}

impl BuildError {
    fn from_tool(step: &'static str, timeout: Duration) -> impl FnOnce(ToolError) -> BuildError {
        move |e| match e {
            ToolError::Spawn { program, source } => BuildError::Spawn { program, source },
            ToolError::Io { path, source } => BuildError::Io { path, source },
            ToolError::Timeout => BuildError::Timeout { step, timeout },
            ToolError::NotFound { package, message } => BuildError::NotFound { package, message },
            ToolError::Unreachable { detail, .. } => BuildError::Unreachable { step, detail },
            ToolError::Conflict { detail } => BuildError::Conflict { detail },
            ToolError::Output { path, reason } => BuildError::Output { path, reason },
            ToolError::Failed { step, detail } => BuildError::Failed { step, detail },
            ToolError::UrlDependency {
                package,
                dependency,
                url,
                ..
            } => BuildError::UrlDependency {
                package,
                dependency,
                url,
            },
            ToolError::NoSpace => BuildError::Failed {
                step,
                detail: "no space left on the store's device".into(),
            },
            ToolError::OutOfMemory => BuildError::Failed {
                step,
                detail: "pip ran out of memory".into(),
            },
        }
    }
}

/// Builds `spec` into `store` and points `current` at it; if the resolved set exists
/// already, only points `current` at it. `progress` hears of each step.
pub async fn build(
    store: &Store,
    spec: &BuildSpec,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<BuildReport, BuildError> {
    let started = std::time::Instant::now();
    let deadline = Instant::now() + spec.timeout;
    let timeout = spec.timeout;
    if spec.python.is_empty() && spec.node.is_empty() {
        return Err(BuildError::Empty);
    }
    let work = store.work_tree("build")?;
    let set_dir = work.path().join("set");
    let python_dir = set_dir.join("python");
    let node_dir = set_dir.join("node");
    for dir in [&python_dir, &node_dir] {
        fs::create_dir_all(dir).map_err(io_error(dir))?;
    }

    // 1-2. Resolve. pip's own files (its temporary folders, the report) go in a
    // scratch of the store's `tmp/`, removed however the build ends.
    let scratch = Unconfined::new(store.tmp_dir())
        .scratch(0)
        .map_err(|e| BuildError::Io {
            path: e.path,
            source: e.source,
        })?;
    let python_version = pip::python_version(&spec.interpreter, &spec.env, &*scratch, deadline)
        .await
        .map_err(BuildError::from_tool("asking the interpreter", timeout))?;
    let pip = Pip {
        interpreter: &spec.interpreter,
        env: &spec.env,
        python_version: &python_version,
        scratch: &*scratch,
    };
    let python = if spec.python.is_empty() {
        Vec::new()
    } else {
        progress(Progress::ResolvingPython {
            requirements: spec.python.len(),
        });
        pip.resolve(&spec.python, &[], deadline)
            .await
            .map_err(BuildError::from_tool("resolving python packages", timeout))?
            .into_iter()
            .map(|r| r.package)
            .collect()
    };
    let npm = Npm {
        program: &spec.npm,
        env: &spec.env,
    };
    let node: Vec<NodePin> = if spec.node.is_empty() {
        Vec::new()
    } else {
        progress(Progress::ResolvingNode {
            packages: spec.node.len(),
        });
        npm.lock(&node_dir, &spec.node, deadline)
            .await
            .map_err(BuildError::from_tool("resolving node packages", timeout))?
    };

    // 3. The key; a set that exists is only pointed at.
    let key = set_key(&python_version, &python, &node, SANDBOX_PLOTS);
    if let Some(set) = store.set(&key)? {
        progress(Progress::Resolved {
            key: key.clone(),
            python: python.len(),
            node: node.len(),
            cached: true,
        });
        return finish(store, set, true, started, progress);
    }
    progress(Progress::Resolved {
        key: key.clone(),
        python: python.len(),
        node: node.len(),
        cached: false,
    });

    // 4-5. Install.
    if !python.is_empty() {
        progress(Progress::InstallingPython {
            wheels: python.len(),
        });
        pip.install(&python, &python_dir, deadline)
            .await
            .map_err(BuildError::from_tool("installing wheels", timeout))?;
    }
    let plots = python_dir.join("sandbox_plots.py");
    fs::write(&plots, SANDBOX_PLOTS).map_err(io_error(&plots))?;
    pip::compile(&spec.interpreter, &spec.env, &*scratch, &plots, deadline)
        .await
        .map_err(BuildError::from_tool("compiling sandbox_plots.py", timeout))?;
    if node.is_empty() {
        let modules = node_dir.join("node_modules");
        fs::create_dir_all(&modules).map_err(io_error(&modules))?;
    } else {
        progress(Progress::InstallingNode {
            packages: node.len(),
        });
        npm.install(&node_dir, deadline)
            .await
            .map_err(BuildError::from_tool("installing node packages", timeout))?;
    }

    // 6. Measure, describe, freeze.
    let python_bytes = blocking(&python_dir, tree_size).await?;
    let node_bytes = blocking(&node_dir, tree_size).await?;
    progress(Progress::Installed {
        python_bytes,
        node_bytes,
    });
    let mut node_packages: Vec<_> = node.iter().map(NodePin::package).collect();
    node_packages.sort();
    node_packages.dedup();
    let manifest = Manifest {
        key: key.clone(),
        python_version,
        python,
        node: node_packages,
        python_bytes,
        node_bytes,
        built_at: rfc3339(SystemTime::now()),
    };
    write_manifest(&set_dir, &manifest)?;
    blocking(&set_dir, |d| make_read_only(d, false)).await?;

    // 7. Into place.
    let target = store.set_dir(&key);
    match fs::rename(&set_dir, &target) {
        Ok(()) => make_read_only(&target, true).map_err(io_error(&target))?,
        // Another build of the same set finished first: it is the same set.
        Err(e) if is_taken(&e) => {}
        Err(source) => {
            return Err(BuildError::Io {
                path: target,
                source,
            })
        }
    }
    // The rest of the work tree (requirements, pip's report) goes with `work`.
    drop(work);
    let set = PackageSet::open(&target)?;
    finish(store, set, false, started, progress)
}

fn finish(
    store: &Store,
    set: PackageSet,
    cached: bool,
    started: std::time::Instant,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<BuildReport, BuildError> {
    store.point_current(set.key())?;
    progress(Progress::Current {
        key: set.key().to_owned(),
    });
    Ok(BuildReport {
        key: set.key().to_owned(),
        cached,
        python_bytes: set.manifest.python_bytes,
        node_bytes: set.manifest.node_bytes,
        python_packages: set.manifest.python.len(),
        node_packages: set.manifest.node.len(),
        elapsed: started.elapsed(),
        set,
    })
}

pub(crate) fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), StoreError> {
    let path = dir.join(MANIFEST_FILE);
    let mut json = serde_json::to_vec_pretty(manifest).map_err(|source| StoreError::Manifest {
        path: path.clone(),
        source,
    })?;
    json.push(b'\n');
    fs::write(&path, json).map_err(io_error(&path))
}

/// Runs a walk of the tree at `path` (sizes, permissions) off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce(&Path) -> std::io::Result<T> + Send + 'static,
) -> Result<T, StoreError> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || f(&owned))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        .map_err(io_error(path))
}
