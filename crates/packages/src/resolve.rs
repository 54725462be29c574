//! Inline dependencies (PEP 723): a script's `dependencies`, resolved and installed on
//! the host under the operator's [`Policy`], into a read-only set beside the base set,
//! cached by request.
//!
//! A request is served from the cache (`deps/requests/<digest>`) with no process and no
//! network. Otherwise, in order:
//! 1. the requested names are checked against the policy (before any process or network);
//! 2. pip resolves them with the base set's pins as constraints, so a package both
//!    need is the base set's version;
//! 3. every package of the closure is checked against the policy;
//! 4. the packages the base set already has (same name and version) are dropped;
//! 5. the rest is installed, hash-checked, into a work tree; its size is checked;
//! 6. the tree is made read-only and renamed into `deps/<key>`; the request is recorded.
//!
//! The whole of it is bounded by the policy's timeout; one request runs pip once however
//! many ask for it at the same time, and at most [`Resolver::with_concurrency`]
//! different requests (2 by default) run at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{OnceCell, Semaphore};
use tokio::time::{timeout_at, Instant};

use crate::build::{blocking, human, write_manifest};
use crate::key::{deps_key, request_digest};
use crate::metadata::{python_satisfies, MetadataError, ScriptMetadata};
use crate::names::{parse_requirement, Requirement};
use crate::pip::{self, Pip};
use crate::policy::{Policy, Refusal};
use crate::process::ToolError;
use crate::store::{io_error, is_key, Manifest, PackageSet, PythonPackage, Store, StoreError};
use crate::tree::{is_taken, make_read_only, rfc3339, tree_size, write_atomic};

/// An inline set, ready to be put on `PYTHONPATH` before the base set's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineSet {
    /// Its key (content-addressed: requests that resolve alike share it).
    pub key: String,
    /// `<root>/deps/<key>`.
    pub dir: PathBuf,
    /// `<root>/deps/<key>/python`: what the base set lacks; may be empty.
    pub python_dir: PathBuf,
    /// Served from the cache, without running anything.
    pub cached: bool,
}

/// Why a script's dependencies cannot be provided. [`DepsError::code`] and
/// [`DepsError::status`] are what an API answers with.
#[derive(Debug, thiserror::Error)]
pub enum DepsError {
    /// The metadata block is malformed (bad TOML, non-string dependencies, URLs or
    /// options as dependencies, two blocks).
    #[error("bad script metadata: {0}")]
    BadMetadata(#[from] MetadataError),
    /// The policy refuses a package of the closure.
    #[error("dependency {package} is refused: {reason}")]
    Denied {
        /// The package.
        package: String,
        /// Why, in words.
        reason: String,
    },
    /// No such package, no version matching, or no wheel for this Python.
    #[error("dependency {package} was not found: {message}")]
    NotFound {
        /// The package pip named.
        package: String,
        /// What is missing (says that only wheels are installed).
        message: String,
    },
    /// The dependencies contradict each other or the base set's versions.
    #[error(
        "the dependencies cannot be installed together with the preinstalled packages: {detail}"
    )]
    Conflict {
        /// pip's account of the conflict.
        detail: String,
    },
    /// The installed set would exceed the policy's size.
    #[error("the dependencies {requested} take {} installed, above the limit of {}", human(*.bytes), human(*.max_bytes))]
    TooLarge {
        /// The requested dependencies.
        requested: String,
        /// Their installed size.
        bytes: u64,
        /// The policy's limit.
        max_bytes: u64,
    },
    /// Resolving and installing took longer than the policy allows.
    #[error("installing the dependencies {requested} took longer than the limit of {}s", timeout.as_secs_f64())]
    Timeout {
        /// The requested dependencies.
        requested: String,
        /// The policy's timeout.
        timeout: Duration,
    },
    /// The package index could not be reached from the host.
    #[error("the package index could not be reached{}: {detail}", package.as_deref().map(|p| format!(" while looking for {p}")).unwrap_or_default())]
    IndexUnreachable {
        /// The package pip was looking for, if it said.
        package: Option<String>,
        /// The connection error.
        detail: String,
    },
    /// The script's `requires-python` excludes the sandboxes' Python.
    #[error("the script requires Python {requires}, the sandboxes run Python {version}")]
    PythonUnsupported {
        /// The script's specifier.
        requires: String,
        /// The sandboxes' Python.
        version: String,
    },
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// pip (or the interpreter) could not be started.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// pip failed for another reason, or wrote a report this crate cannot read.
    #[error("{step} failed: {detail}")]
    Failed {
        /// The step.
        step: &'static str,
        /// The end of pip's output.
        detail: String,
    },
}

impl DepsError {
    /// A stable code for the error (`dependency_denied`, ...; `internal` for failures
    /// of the host).
    pub fn code(&self) -> &'static str {
        match self {
            DepsError::BadMetadata(_) => "bad_script_metadata",
            DepsError::Denied { .. } => "dependency_denied",
            DepsError::NotFound { .. } => "dependency_not_found",
            DepsError::Conflict { .. } => "dependency_conflict",
            DepsError::TooLarge { .. } => "dependency_too_large",
            DepsError::Timeout { .. } => "dependency_timeout",
            DepsError::IndexUnreachable { .. } => "index_unreachable",
            DepsError::PythonUnsupported { .. } => "python_version_unsupported",
            DepsError::Store(_) | DepsError::Spawn { .. } | DepsError::Failed { .. } => "internal",
        }
    }

    /// The HTTP status that fits: 400 for malformed metadata, 422 for dependencies that
    /// cannot be provided, 500 for failures of the host.
    pub fn status(&self) -> u16 {
        match self.code() {
            "bad_script_metadata" => 400,
            "internal" => 500,
            _ => 422,
        }
    }
}

/// Resolves scripts' dependencies against one base set under one policy.
///
/// Share one `Resolver` (behind an `Arc`) between requests: the per-request locks and
/// the concurrency limit live in it.
#[derive(Debug)]
pub struct Resolver {
    store: Store,
    base: Option<PackageSet>,
    /// `(name, version)` of every package of the base set.
    base_pins: HashSet<(String, String)>,
    base_names: HashSet<String>,
    /// `name==version` of the base set, given to pip as constraints.
    constraints: Vec<String>,
    policy: Policy,
    policy_fingerprint: String,
    interpreter: PathBuf,
    env: BTreeMap<String, String>,
    python_version: OnceCell<String>,
    in_flight: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    slots: Semaphore,
}

impl Resolver {
    /// A resolver for scripts that run with `base` (the store's current set, usually)
    /// and `interpreter` (`/usr/bin/python3`).
    pub fn new(
        store: Store,
        base: Option<PackageSet>,
        policy: Policy,
        interpreter: impl Into<PathBuf>,
    ) -> Resolver {
        let python = base.as_ref().map_or(&[][..], |b| &b.manifest.python[..]);
        let python_version =
            OnceCell::new_with(base.as_ref().map(|b| b.manifest.python_version.clone()));
        Resolver {
            base_pins: python
                .iter()
                .map(|p| (p.name.clone(), p.version.clone()))
                .collect(),
            base_names: python.iter().map(|p| p.name.clone()).collect(),
            constraints: python
                .iter()
                .map(|p| format!("{}=={}", p.name, p.version))
                .collect(),
            policy_fingerprint: policy.fingerprint(),
            store,
            base,
            policy,
            interpreter: interpreter.into(),
            env: BTreeMap::new(),
            python_version,
            in_flight: Mutex::new(HashMap::new()),
            slots: Semaphore::new(2),
        }
    }

    /// Variables set for pip on top of the host's environment (another index, say).
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Resolver {
        self.env = env;
        self
    }

    /// How many different requests may run pip at once (at least one).
    pub fn with_concurrency(mut self, n: usize) -> Resolver {
        self.slots = Semaphore::new(n.max(1));
        self
    }

    /// The base set scripts run with.
    pub fn base(&self) -> Option<&PackageSet> {
        self.base.as_ref()
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Provides the dependencies `metadata` declares: from the cache, or resolved and
    /// installed now (see the module's steps).
    pub async fn resolve(&self, metadata: &ScriptMetadata) -> Result<InlineSet, DepsError> {
        let mut requirements = metadata
            .dependencies
            .iter()
            .map(|d| {
                parse_requirement(d).map_err(|reason| MetadataError::BadDependency {
                    dependency: d.clone(),
                    reason,
                })
            })
            .collect::<Result<Vec<Requirement>, _>>()?;
        requirements.sort_by(|a, b| a.line.cmp(&b.line));
        requirements.dedup();
        let lines: Vec<String> = requirements.iter().map(|r| r.line.clone()).collect();
        let requested = lines.join(", ");
        for r in &requirements {
            let in_base = self.base_names.contains(&r.name);
            self.policy
                .check(&r.name, in_base)
                .map_err(|refusal| DepsError::Denied {
                    package: r.name.clone(),
                    reason: refusal.reason().to_owned(),
                })?;
        }

        let deadline = Instant::now() + self.policy.timeout;
        let python_version = self.python_version(deadline, &requested).await?;
        if let Some(requires) = &metadata.requires_python {
            if !python_satisfies(requires, python_version)? {
                return Err(DepsError::PythonUnsupported {
                    requires: requires.clone(),
                    version: python_version.to_owned(),
                });
            }
        }
        let digest = request_digest(
            self.base.as_ref().map(PackageSet::key),
            python_version,
            &self.policy_fingerprint,
            &lines,
        );
        if let Some(set) = self.cached(&digest) {
            return Ok(set);
        }

        let timed_out = || DepsError::Timeout {
            requested: requested.clone(),
            timeout: self.policy.timeout,
        };
        let lock = self.lock_for(&digest);
        let _same_request = timeout_at(deadline, lock.lock())
            .await
            .map_err(|_| timed_out())?;
        if let Some(set) = self.cached(&digest) {
            return Ok(set);
        }
        let _slot = timeout_at(deadline, self.slots.acquire())
            .await
            .map_err(|_| timed_out())?
            .map_err(|_| DepsError::Failed {
                step: "waiting for a slot",
                detail: "the resolver is closed".into(),
            })?;
        let started = std::time::Instant::now();
        let set = self
            .miss(&lines, python_version, &digest, deadline, &requested)
            .await?;
        tracing::info!(key = %set.key, requested = %requested, elapsed_ms = started.elapsed().as_millis() as u64, "inline dependencies installed");
        Ok(set)
    }

    async fn python_version(&self, deadline: Instant, requested: &str) -> Result<&str, DepsError> {
        self.python_version
            .get_or_try_init(|| async {
                pip::python_version(&self.interpreter, &self.env, deadline)
                    .await
                    .map_err(|e| self.tool_error(e, requested))
            })
            .await
            .map(String::as_str)
    }

    /// The set a request was resolved to before, if it is still there.
    fn cached(&self, digest: &str) -> Option<InlineSet> {
        let key = fs::read_to_string(self.store.request_file(digest)).ok()?;
        let key = key.trim();
        if !is_key(key) {
            return None;
        }
        let dir = self.store.deps_dir(key);
        let python_dir = dir.join("python");
        python_dir.is_dir().then(|| InlineSet {
            key: key.to_owned(),
            dir,
            python_dir,
            cached: true,
        })
    }

    fn lock_for(&self, digest: &str) -> Arc<tokio::sync::Mutex<()>> {
        // A panic while holding this lock leaves the map consistent: keep using it.
        let mut map = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, w| w.strong_count() > 0);
        if let Some(lock) = map.get(digest).and_then(Weak::upgrade) {
            return lock;
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        map.insert(digest.to_owned(), Arc::downgrade(&lock));
        lock
    }

    async fn miss(
        &self,
        lines: &[String],
        python_version: &str,
        digest: &str,
        deadline: Instant,
        requested: &str,
    ) -> Result<InlineSet, DepsError> {
        let work = self.store.work_tree("deps")?;
        let set_dir = work.path().join("set");
        let python_dir = set_dir.join("python");
        fs::create_dir_all(&python_dir).map_err(io_error(&python_dir))?;
        let pip = Pip {
            interpreter: &self.interpreter,
            env: &self.env,
            python_version,
        };

        // 2-4. Resolve, check the closure, drop what the base set has.
        let resolved = if lines.is_empty() {
            Vec::new()
        } else {
            pip.resolve(work.path(), lines, &self.constraints, deadline)
                .await
                .map_err(|e| self.tool_error(e, requested))?
        };
        let mut needed: Vec<PythonPackage> = Vec::new();
        for r in resolved {
            let name = &r.package.name;
            self.policy
                .check(name, self.base_names.contains(name))
                .map_err(|refusal| DepsError::Denied {
                    package: name.clone(),
                    reason: closure_reason(refusal, r.requested),
                })?;
            if !self
                .base_pins
                .contains(&(name.clone(), r.package.version.clone()))
            {
                needed.push(r.package);
            }
        }
        let key = deps_key(python_version, &needed);
        let target = self.store.deps_dir(&key);
        if !target.join("python").is_dir() {
            // 5. Install and measure.
            if !needed.is_empty() {
                pip.install(work.path(), &needed, &python_dir, deadline)
                    .await
                    .map_err(|e| self.tool_error(e, requested))?;
            }
            let bytes = blocking(&python_dir, tree_size).await?;
            if bytes > self.policy.max_bytes {
                return Err(DepsError::TooLarge {
                    requested: requested.to_owned(),
                    bytes,
                    max_bytes: self.policy.max_bytes,
                });
            }
            if Instant::now() >= deadline {
                return Err(self.tool_error(ToolError::Timeout, requested));
            }
            // 6. Freeze and move into place.
            let manifest = Manifest {
                key: key.clone(),
                python_version: python_version.to_owned(),
                python: needed,
                node: Vec::new(),
                python_bytes: bytes,
                node_bytes: 0,
                built_at: rfc3339(std::time::SystemTime::now()),
            };
            write_manifest(&set_dir, &manifest)?;
            blocking(&set_dir, |d| make_read_only(d, false)).await?;
            match fs::rename(&set_dir, &target) {
                Ok(()) => make_read_only(&target, true).map_err(io_error(&target))?,
                // The same set, made for another request meanwhile.
                Err(e) if is_taken(&e) => {}
                Err(source) => {
                    return Err(StoreError::Io {
                        path: target,
                        source,
                    }
                    .into())
                }
            }
        }
        let request = self.store.request_file(digest);
        write_atomic(&request, key.as_bytes()).map_err(io_error(&request))?;
        drop(work);
        Ok(InlineSet {
            python_dir: target.join("python"),
            dir: target,
            key,
            cached: false,
        })
    }

    fn tool_error(&self, e: ToolError, requested: &str) -> DepsError {
        match e {
            ToolError::Spawn { program, source } => DepsError::Spawn { program, source },
            ToolError::Io { path, source } => StoreError::Io { path, source }.into(),
            ToolError::Timeout => DepsError::Timeout {
                requested: requested.to_owned(),
                timeout: self.policy.timeout,
            },
            ToolError::NotFound { package, message } => DepsError::NotFound { package, message },
            ToolError::Unreachable { package, detail } => {
                DepsError::IndexUnreachable { package, detail }
            }
            ToolError::Conflict { detail } => DepsError::Conflict { detail },
            ToolError::Output { path, reason } => DepsError::Failed {
                step: "reading pip's report",
                detail: format!("{}: {reason}", path.display()),
            },
            ToolError::Failed { step, detail } => DepsError::Failed { step, detail },
        }
    }
}

fn closure_reason(refusal: Refusal, requested: bool) -> String {
    if requested {
        refusal.reason().to_owned()
    } else {
        format!(
            "{} (it is needed by the requested dependencies)",
            refusal.reason()
        )
    }
}
