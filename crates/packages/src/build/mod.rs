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
//!
//! `progress.rs` holds the steps as the caller shows them, `error.rs` why a build
//! failed.

mod error;
mod progress;

pub use error::BuildError;
pub use progress::{human, Progress};

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::confine::{Confinement, Scratch, Unconfined};
use crate::key::set_key;
use crate::npm::{NodePin, Npm};
use crate::pip::{self, Pip};
use crate::process::ToolError;
use crate::store::{
    io_error, Manifest, PackageSet, PythonPackage, Store, StoreError, MANIFEST_FILE,
};
use crate::tree::{is_taken, make_read_only, rfc3339, tree_size};
use crate::{DEFAULT_NODE, DEFAULT_PYTHON};

/// The module every base set carries beside its packages.
pub const SANDBOX_PLOTS: &str = include_str!("../python/sandbox_plots.py");

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

/// Builds `spec` into `store` and points `current` at it; if the resolved set exists
/// already, only points `current` at it. `progress` hears of each step.
pub async fn build(
    store: &Store,
    spec: &BuildSpec,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<BuildReport, BuildError> {
    let started = std::time::Instant::now();
    let deadline = Instant::now() + spec.timeout;
    if spec.python.is_empty() && spec.node.is_empty() {
        return Err(BuildError::Empty);
    }
    let work = store.work_tree("build")?;
    let dirs = SetDirs::make(work.path())?;
    // pip's own files (its temporary folders, the report) go in a scratch of the store's
    // `tmp/`, removed however the build ends.
    let scratch = Unconfined::new(store.tmp_dir())
        .scratch(0)
        .map_err(|e| BuildError::Io {
            path: e.path,
            source: e.source,
        })?;
    let mut builder = Builder::start(spec, &*scratch, dirs, deadline, progress).await?;

    // 1-2. Resolve.
    let python = builder.resolve_python().await?;
    let node = builder.resolve_node().await?;

    // 3. The key; a set that exists is only pointed at.
    let key = set_key(&builder.python_version, &python, &node, SANDBOX_PLOTS);
    let existing = store.set(&key)?;
    (builder.progress)(Progress::Resolved {
        key: key.clone(),
        python: python.len(),
        node: node.len(),
        cached: existing.is_some(),
    });
    if let Some(set) = existing {
        return finish(store, set, true, started, builder.progress);
    }

    // 4-5. Install.
    builder.install_python(&python).await?;
    builder.install_node(&node).await?;

    // 6. Measure, describe, freeze.
    builder.describe(key.clone(), python, &node).await?;

    // 7. Into place. The rest of the work tree (requirements, pip's report) goes with
    // `work`.
    let set = into_place(store, &builder.dirs.set, &key)?;
    drop(work);
    finish(store, set, false, started, builder.progress)
}

/// The folders of a set being built, in its work tree.
struct SetDirs {
    /// The set: `set/`, renamed into `sets/<key>` at the end.
    set: PathBuf,
    /// Its `python/`.
    python: PathBuf,
    /// Its `node/`.
    node: PathBuf,
}

impl SetDirs {
    /// `set/python` and `set/node` made in the work tree `work`.
    fn make(work: &Path) -> Result<SetDirs, BuildError> {
        let set = work.join("set");
        let dirs = SetDirs {
            python: set.join("python"),
            node: set.join("node"),
            set,
        };
        for dir in [&dirs.python, &dirs.node] {
            fs::create_dir_all(dir).map_err(io_error(dir))?;
        }
        Ok(dirs)
    }
}

/// One build's tools, folders and deadline, which its steps share.
struct Builder<'a> {
    spec: &'a BuildSpec,
    /// Where pip's processes run and write.
    scratch: &'a dyn Scratch,
    /// The interpreter's version (`3.11.2`).
    python_version: String,
    dirs: SetDirs,
    deadline: Instant,
    progress: &'a mut (dyn FnMut(Progress) + Send),
}

impl<'a> Builder<'a> {
    /// A build of `spec` into `dirs`, once the interpreter has told its version.
    async fn start(
        spec: &'a BuildSpec,
        scratch: &'a dyn Scratch,
        dirs: SetDirs,
        deadline: Instant,
        progress: &'a mut (dyn FnMut(Progress) + Send),
    ) -> Result<Builder<'a>, BuildError> {
        let python_version = pip::python_version(&spec.interpreter, &spec.env, scratch, deadline)
            .await
            .map_err(BuildError::from_tool(
                "asking the interpreter",
                spec.timeout,
            ))?;
        Ok(Builder {
            spec,
            scratch,
            python_version,
            dirs,
            deadline,
            progress,
        })
    }

    /// pip, for the spec's interpreter.
    fn pip(&self) -> Pip<'_> {
        Pip {
            interpreter: &self.spec.interpreter,
            env: &self.spec.env,
            python_version: &self.python_version,
            scratch: self.scratch,
        }
    }

    /// npm, the spec's.
    fn npm(&self) -> Npm<'_> {
        Npm {
            program: &self.spec.npm,
            env: &self.spec.env,
        }
    }

    /// A tool's failure while doing `step`.
    fn failed(&self, step: &'static str) -> impl FnOnce(ToolError) -> BuildError {
        BuildError::from_tool(step, self.spec.timeout)
    }

    /// Step 1: the Python requirements, resolved to pinned wheels.
    async fn resolve_python(&mut self) -> Result<Vec<PythonPackage>, BuildError> {
        if self.spec.python.is_empty() {
            return Ok(Vec::new());
        }
        (self.progress)(Progress::ResolvingPython {
            requirements: self.spec.python.len(),
        });
        let resolved = self
            .pip()
            .resolve(&self.spec.python, &[], self.deadline)
            .await
            .map_err(self.failed("resolving python packages"))?;
        Ok(resolved.into_iter().map(|r| r.package).collect())
    }

    /// Step 2: the npm packages, resolved to a lock in `node/`.
    async fn resolve_node(&mut self) -> Result<Vec<NodePin>, BuildError> {
        if self.spec.node.is_empty() {
            return Ok(Vec::new());
        }
        (self.progress)(Progress::ResolvingNode {
            packages: self.spec.node.len(),
        });
        self.npm()
            .lock(&self.dirs.node, &self.spec.node, self.deadline)
            .await
            .map_err(self.failed("resolving node packages"))
    }

    /// Step 4: the wheels, hash-checked, and `sandbox_plots.py` beside them, compiled.
    async fn install_python(&mut self, python: &[PythonPackage]) -> Result<(), BuildError> {
        if !python.is_empty() {
            (self.progress)(Progress::InstallingPython {
                wheels: python.len(),
            });
            self.pip()
                .install(python, &self.dirs.python, self.deadline)
                .await
                .map_err(self.failed("installing wheels"))?;
        }
        let plots = self.dirs.python.join("sandbox_plots.py");
        fs::write(&plots, SANDBOX_PLOTS).map_err(io_error(&plots))?;
        let spec = self.spec;
        pip::compile(
            &spec.interpreter,
            &spec.env,
            self.scratch,
            &plots,
            self.deadline,
        )
        .await
        .map_err(self.failed("compiling sandbox_plots.py"))
    }

    /// Step 5: the lock installed (`npm ci`), or an empty `node_modules`.
    async fn install_node(&mut self, node: &[NodePin]) -> Result<(), BuildError> {
        if node.is_empty() {
            let modules = self.dirs.node.join("node_modules");
            fs::create_dir_all(&modules).map_err(io_error(&modules))?;
            return Ok(());
        }
        (self.progress)(Progress::InstallingNode {
            packages: node.len(),
        });
        self.npm()
            .install(&self.dirs.node, self.deadline)
            .await
            .map_err(self.failed("installing node packages"))
    }

    /// Step 6: the set measured, its manifest written, everything made read-only.
    async fn describe(
        &mut self,
        key: String,
        python: Vec<PythonPackage>,
        node: &[NodePin],
    ) -> Result<(), BuildError> {
        let python_bytes = blocking(&self.dirs.python, tree_size).await?;
        let node_bytes = blocking(&self.dirs.node, tree_size).await?;
        (self.progress)(Progress::Installed {
            python_bytes,
            node_bytes,
        });
        let mut node_packages: Vec<_> = node.iter().map(NodePin::package).collect();
        node_packages.sort();
        node_packages.dedup();
        let manifest = Manifest {
            key,
            python_version: self.python_version.clone(),
            python,
            node: node_packages,
            python_bytes,
            node_bytes,
            built_at: rfc3339(SystemTime::now()),
        };
        write_manifest(&self.dirs.set, &manifest)?;
        blocking(&self.dirs.set, |d| make_read_only(d, false)).await?;
        Ok(())
    }
}

/// Step 7: the finished set `set_dir` renamed into `sets/<key>`, unless another build
/// of the same set finished first.
fn into_place(store: &Store, set_dir: &Path, key: &str) -> Result<PackageSet, BuildError> {
    let target = store.set_dir(key);
    match fs::rename(set_dir, &target) {
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
    Ok(PackageSet::open(&target)?)
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
