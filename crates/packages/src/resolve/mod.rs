//! Inline dependencies (PEP 723): a script's `dependencies`, resolved and installed on
//! the host under the operator's [`Policy`], into a read-only set beside the base set,
//! cached by request.
//!
//! A request is served from the cache (`deps/requests/<digest>`), or refused from the
//! memory of refusals (see `refusals.rs`), with no process and no network. Otherwise,
//! in order:
//! 1. the number of names and the names themselves are checked against the limits and
//!    the policy (before any process or network);
//! 2. pip resolves them with the base set's pins as constraints, so a package both
//!    need is the base set's version; a package whose metadata names a dependency by
//!    URL ends it before anything is fetched (pip's guard);
//! 3. every package of the closure is checked against the policy, and their number;
//! 4. the packages the base set already has (same name and version) are dropped;
//! 5. the rest is installed, hash-checked, into the resolution's scratch, whose size is
//!    the policy's limit and a small margin, then copied into a work tree of the store
//!    within the limit;
//! 6. the tree is made read-only and renamed into `deps/<key>`; the request is recorded.
//!
//! Steps 2-5 run in a [`Scratch`] of the resolver's [`Confinement`] (the runner's: a
//! user, a cgroup and a bounded tmpfs of their own, an environment with nothing but
//! pip's settings), dropped however the resolution ends. The whole of it is bounded by
//! the policy's timeout; one request runs pip once however many ask for it at the same
//! time, and at most [`Resolver::with_concurrency`] different requests (2 by default)
//! run at once. [`Resolver::stop`] ends those in flight.

mod error;
mod refusals;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{watch, OnceCell, Semaphore, SemaphorePermit};
use tokio::time::{timeout_at, Instant};

use crate::build::{blocking, write_manifest};
use crate::confine::{Confinement, Scratch};
use crate::copy::{copy_tree, CopyError};
use crate::key::{deps_key, request_digest};
use crate::metadata::{python_satisfies, MetadataError, ScriptMetadata};
use crate::names::{parse_requirement, Requirement};
use crate::pip::{self, Pip};
use crate::policy::{Policy, Refusal};
use crate::process::ToolError;
use crate::store::{io_error, is_key, Manifest, PackageSet, PythonPackage, Store, StoreError};
use crate::tree::{is_taken, make_read_only, rfc3339, tree_size, write_atomic};
pub use error::DepsError;
use refusals::Refusals;

/// The most dependencies a script's block may name.
pub const MAX_DEPENDENCIES: usize = 64;
/// The most packages the dependencies of one script may resolve to.
pub const MAX_CLOSURE: usize = 256;
/// Room in a scratch beyond the policy's size: pip's own files (its report, the
/// wheels it downloaded, before and while they are unpacked).
pub const SCRATCH_MARGIN: u64 = 32 << 20;
/// The scratch in which the interpreter is asked its version.
const SMALL_SCRATCH: u64 = 1 << 20;

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

/// Resolves scripts' dependencies against one base set under one policy.
///
/// Share one `Resolver` (behind an `Arc`) between requests: the per-request locks, the
/// concurrency limit and the memory of refusals live in it.
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
    confinement: Arc<dyn Confinement>,
    python_version: OnceCell<String>,
    in_flight: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    concurrency: u32,
    slots: Semaphore,
    refusals: Refusals,
    stopping: watch::Sender<bool>,
}

impl Resolver {
    /// A resolver for scripts that run with `base` (the store's current set, usually)
    /// and `interpreter` (`/usr/bin/python3`), whose pip and interpreter run in
    /// `confinement`'s scratches.
    pub fn new(
        store: Store,
        base: Option<PackageSet>,
        policy: Policy,
        interpreter: impl Into<PathBuf>,
        confinement: Arc<dyn Confinement>,
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
            confinement,
            python_version,
            in_flight: Mutex::new(HashMap::new()),
            concurrency: 2,
            slots: Semaphore::new(2),
            refusals: Refusals::default(),
            stopping: watch::Sender::new(false),
        }
    }

    /// Variables set for pip on top of the scratch's environment (another index, say).
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Resolver {
        self.env = env;
        self
    }

    /// How many different requests may run pip at once (at least one).
    pub fn with_concurrency(mut self, n: u32) -> Resolver {
        self.concurrency = n.max(1);
        self.slots = Semaphore::new(self.concurrency as usize);
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

    /// Ends the resolutions in flight (they answer [`DepsError::Stopping`], their
    /// scratches removed) and refuses new ones; waits up to `within` for them to be
    /// gone. Returns whether they all were.
    pub async fn stop(&self, within: Duration) -> bool {
        self.stopping.send_replace(true);
        tokio::time::timeout(within, self.slots.acquire_many(self.concurrency))
            .await
            .is_ok_and(|permits| permits.is_ok())
    }

    /// Provides the dependencies `metadata` declares: from the cache, or resolved and
    /// installed now (see the module's steps).
    pub async fn resolve(&self, metadata: &ScriptMetadata) -> Result<InlineSet, DepsError> {
        let (lines, requested) = self.requested(metadata)?;
        let mut stopping = self.stopping.subscribe();
        if *stopping.borrow() {
            return Err(DepsError::Stopping { requested });
        }
        tokio::select! {
            result = self.provide(metadata, &lines, &requested) => result,
            _ = stopping.wait_for(|stop| *stop) => Err(DepsError::Stopping { requested }),
        }
    }

    /// Step 1: the normalised requirement lines, sorted, and the policy's word on each
    /// name; and the request in words.
    fn requested(&self, metadata: &ScriptMetadata) -> Result<(Vec<String>, String), DepsError> {
        let declared = metadata.dependencies.len();
        if declared > MAX_DEPENDENCIES {
            return Err(DepsError::TooMany {
                what: format!("the script declares {declared} dependencies"),
                max: MAX_DEPENDENCIES,
            });
        }
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
        for r in &requirements {
            let in_base = self.base_names.contains(&r.name);
            self.policy
                .check(&r.name, in_base)
                .map_err(|refusal| DepsError::Denied {
                    package: r.name.clone(),
                    reason: refusal.reason().to_owned(),
                })?;
        }
        let lines: Vec<String> = requirements.iter().map(|r| r.line.clone()).collect();
        let requested = lines.join(", ");
        Ok((lines, requested))
    }

    /// The cache, the memory of refusals, or steps 2-6, for a request that passed step 1.
    async fn provide(
        &self,
        metadata: &ScriptMetadata,
        lines: &[String],
        requested: &str,
    ) -> Result<InlineSet, DepsError> {
        let deadline = Instant::now() + self.policy.timeout;
        let python_version = self.python_version(deadline, requested).await?;
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
            lines,
        );
        if let Some(found) = self.known(&digest) {
            return found;
        }

        let lock = self.lock_for(&digest);
        let _same_request = timeout_at(deadline, lock.lock())
            .await
            .map_err(|_| self.timed_out(requested))?;
        if let Some(found) = self.known(&digest) {
            return found;
        }
        let _slot = self.slot(deadline, requested).await?;
        let started = std::time::Instant::now();
        let result = self
            .miss(lines, python_version, &digest, deadline, requested)
            .await;
        match &result {
            Ok(set) => {
                tracing::info!(key = %set.key, requested = %requested, elapsed_ms = started.elapsed().as_millis() as u64, "inline dependencies installed")
            }
            Err(e) => {
                tracing::info!(requested = %requested, code = e.code(), error = %e, "inline dependencies refused");
                self.refusals.remember(&digest, e);
            }
        }
        result
    }

    /// What is known of a request without running anything: its set, or its refusal.
    fn known(&self, digest: &str) -> Option<Result<InlineSet, DepsError>> {
        if let Some(set) = self.cached(digest) {
            return Some(Ok(set));
        }
        self.refusals.get(digest).map(Err)
    }

    async fn slot(
        &self,
        deadline: Instant,
        requested: &str,
    ) -> Result<SemaphorePermit<'_>, DepsError> {
        timeout_at(deadline, self.slots.acquire())
            .await
            .map_err(|_| self.timed_out(requested))?
            .map_err(|_| DepsError::Stopping {
                requested: requested.to_owned(),
            })
    }

    fn timed_out(&self, requested: &str) -> DepsError {
        DepsError::Timeout {
            requested: requested.to_owned(),
            timeout: self.policy.timeout,
        }
    }

    async fn python_version(&self, deadline: Instant, requested: &str) -> Result<&str, DepsError> {
        self.python_version
            .get_or_try_init(|| async {
                let _slot = self.slot(deadline, requested).await?;
                let scratch = self.confinement.scratch(SMALL_SCRATCH)?;
                pip::python_version(&self.interpreter, &self.env, &*scratch, deadline)
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

    /// Steps 2-6.
    async fn miss(
        &self,
        lines: &[String],
        python_version: &str,
        digest: &str,
        deadline: Instant,
        requested: &str,
    ) -> Result<InlineSet, DepsError> {
        let scratch = self
            .confinement
            .scratch(self.policy.max_bytes + SCRATCH_MARGIN)?;
        let pip = Pip {
            interpreter: &self.interpreter,
            env: &self.env,
            python_version,
            scratch: &*scratch,
        };
        let needed = self.closure(&pip, lines, deadline, requested).await?;
        let key = deps_key(python_version, &needed);
        let target = self.store.deps_dir(&key);
        if !target.join("python").is_dir() {
            let work = self
                .install(&pip, &*scratch, &needed, deadline, requested)
                .await?;
            drop(scratch);
            if Instant::now() >= deadline {
                return Err(self.timed_out(requested));
            }
            self.freeze(work, &key, python_version, needed, &target, requested)
                .await?;
        }
        let request = self.store.request_file(digest);
        write_atomic(&request, key.as_bytes()).map_err(io_error(&request))?;
        Ok(InlineSet {
            python_dir: target.join("python"),
            dir: target,
            key,
            cached: false,
        })
    }

    /// Steps 2-4: what pip resolves, checked, without what the base set has.
    async fn closure(
        &self,
        pip: &Pip<'_>,
        lines: &[String],
        deadline: Instant,
        requested: &str,
    ) -> Result<Vec<PythonPackage>, DepsError> {
        let resolved = if lines.is_empty() {
            Vec::new()
        } else {
            pip.resolve(lines, &self.constraints, deadline)
                .await
                .map_err(|e| self.tool_error(e, requested))?
        };
        if resolved.len() > MAX_CLOSURE {
            return Err(DepsError::TooMany {
                what: format!(
                    "the dependencies {requested} resolve to {} packages",
                    resolved.len()
                ),
                max: MAX_CLOSURE,
            });
        }
        let mut needed = Vec::new();
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
        Ok(needed)
    }

    /// Step 5: installs `needed` in the scratch, then copies the tree into a work tree
    /// of the store (its `set/python`), never more than the policy's size.
    async fn install(
        &self,
        pip: &Pip<'_>,
        scratch: &dyn Scratch,
        needed: &[PythonPackage],
        deadline: Instant,
        requested: &str,
    ) -> Result<crate::tree::WorkTree, DepsError> {
        let installed = scratch.dir().join("target");
        if !needed.is_empty() {
            pip.install(needed, &installed, deadline)
                .await
                .map_err(|e| self.tool_error(e, requested))?;
        }
        let work = self.store.work_tree("deps")?;
        let set_dir = work.path().join("set");
        fs::create_dir(&set_dir).map_err(io_error(&set_dir))?;
        let max_bytes = self.policy.max_bytes;
        let python_dir = set_dir.join("python");
        // The copy goes on in its own thread if this future is dropped: it owns the
        // work tree, which it removes when it ends.
        let copied = tokio::task::spawn_blocking(move || {
            copy_tree(&installed, &python_dir, max_bytes).map(|_| work)
        })
        .await
        .map_err(|e| DepsError::Failed {
            step: "copying the installed packages",
            detail: e.to_string(),
        })?;
        match copied {
            Ok(work) => Ok(work),
            Err(CopyError::TooLarge { max_bytes }) => Err(DepsError::TooLarge {
                requested: requested.to_owned(),
                bytes: None,
                max_bytes,
            }),
            Err(e) => Err(DepsError::Failed {
                step: "copying the installed packages",
                detail: e.to_string(),
            }),
        }
    }

    /// Step 6: measures, describes and freezes the work tree's set and moves it to
    /// `target`.
    async fn freeze(
        &self,
        work: crate::tree::WorkTree,
        key: &str,
        python_version: &str,
        needed: Vec<PythonPackage>,
        target: &std::path::Path,
        requested: &str,
    ) -> Result<(), DepsError> {
        let set_dir = work.path().join("set");
        let python_dir = set_dir.join("python");
        let bytes = blocking(&python_dir, tree_size).await?;
        if bytes > self.policy.max_bytes {
            return Err(DepsError::TooLarge {
                requested: requested.to_owned(),
                bytes: Some(bytes),
                max_bytes: self.policy.max_bytes,
            });
        }
        let manifest = Manifest {
            key: key.to_owned(),
            python_version: python_version.to_owned(),
            python: needed,
            node: Vec::new(),
            python_bytes: bytes,
            node_bytes: 0,
            built_at: rfc3339(std::time::SystemTime::now()),
        };
        write_manifest(&set_dir, &manifest)?;
        blocking(&set_dir, |d| make_read_only(d, false)).await?;
        match fs::rename(&set_dir, target) {
            Ok(()) => make_read_only(target, true).map_err(io_error(target))?,
            // The same set, made for another request meanwhile.
            Err(e) if is_taken(&e) => {}
            Err(source) => {
                return Err(StoreError::Io {
                    path: target.to_owned(),
                    source,
                }
                .into())
            }
        }
        Ok(())
    }

    fn tool_error(&self, e: ToolError, requested: &str) -> DepsError {
        DepsError::from_tool(e, requested, self.policy.timeout, self.policy.max_bytes)
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
