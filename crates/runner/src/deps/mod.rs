//! A Python program's inline dependencies (a PEP 723 `# /// script` block): read from
//! its code, resolved and installed on the host within the operator's policy (cached by
//! what was asked), and mounted read-only into the sandbox for its run. The sandbox
//! itself never reaches a package index; the host's pip runs confined ([`ResolverJail`]).

mod jail;

use crate::backend::process::ProcessConfig;
use crate::backend::DepsMount;
use crate::config::{BackendConfig, PackagesConfig, SandboxConfig};
use axum::http::StatusCode;
pub use jail::{ResolverJail, RESOLVER_ID_OFFSET};
use sandbox_jail::cgroup::{instance_name, Hierarchy};
use sandbox_packages::{parse_script_metadata, ConfineError, DepsError, Resolver, Store};
use sandbox_protocol::agent::Job;
use sandbox_protocol::api::{PackageVersion, Packages};
use sandbox_protocol::Lang;
use std::sync::Arc;
use std::time::Duration;

/// Work in the store's `tmp/` untouched this long is a killed build's or resolution's:
/// longer than the build's default timeout and the longest resolution.
const STALE_WORK: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

/// The Python sandboxes run (the process backend shows the host's `/usr`).
const PYTHON: &str = "/usr/bin/python3";

/// Why a program's inline dependencies were refused: nothing was run.
#[derive(Debug, thiserror::Error)]
pub enum DepsRefusal {
    /// Resolving them failed or the policy refused them.
    #[error(transparent)]
    Resolve(#[from] DepsError),
    /// The operator turned inline dependencies off.
    #[error(
        "this program declares inline dependencies ({0}), and this runner takes none \
         (RUNNER_NO_INLINE_DEPS): use the installed packages (GET /health lists them)"
    )]
    Disabled(String),
    /// The backend cannot mount them.
    #[error(
        "this program declares inline dependencies ({0}), which this runner's sandboxes \
         cannot take (VM sandboxes, or a runner not started as root): use the installed \
         packages (GET /health lists them)"
    )]
    Unsupported(String),
    /// The store could not be opened, or the resolver confined, when the runner
    /// started.
    #[error(
        "this program declares inline dependencies ({0}), but this runner cannot provide them: {1}"
    )]
    Unavailable(String, String),
}

impl DepsRefusal {
    /// The HTTP status and the stable error code.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            DepsRefusal::Resolve(e) => (
                StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY),
                e.code(),
            ),
            DepsRefusal::Disabled(_) => (StatusCode::UNPROCESSABLE_ENTITY, "dependencies_disabled"),
            DepsRefusal::Unsupported(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "dependencies_unsupported")
            }
            DepsRefusal::Unavailable(..) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "dependencies_unavailable")
            }
        }
    }
}

/// What the package settings install (inline dependencies aside).
pub fn installed(packages: &PackagesConfig) -> Packages {
    let version = |name: &str, version: &str| PackageVersion {
        name: name.to_owned(),
        version: version.to_owned(),
    };
    let Some(set) = &packages.set else {
        return Packages {
            warm_imports: packages.warm_imports.clone(),
            ..Packages::default()
        };
    };
    let manifest = &set.manifest;
    Packages {
        key: Some(manifest.key.clone()),
        python: manifest
            .python
            .iter()
            .map(|p| version(&p.name, &p.version))
            .collect(),
        node: manifest
            .node
            .iter()
            .map(|p| version(&p.name, &p.version))
            .collect(),
        warm_imports: packages.warm_imports.clone(),
        inline_dependencies: false,
    }
}

/// How this runner treats inline dependencies.
pub enum InlineDeps {
    /// Resolved by this resolver.
    Resolve(Box<Resolver>),
    /// Refused, saying why (with the declared list in its message).
    Refuse(fn(String) -> DepsRefusal),
    /// Refused: the store could not be opened, or the resolver confined (why).
    Unavailable(String),
}

impl InlineDeps {
    /// From the sandbox settings: refused when turned off, on the vm backend, without
    /// root, or without a usable store or a confined resolver (logged).
    pub fn new(config: &SandboxConfig) -> InlineDeps {
        let packages = &config.packages;
        let Some(policy) = packages.deps.clone() else {
            return InlineDeps::Refuse(DepsRefusal::Disabled);
        };
        // The host cannot mount into a guest, and an ordinary user's runner cannot
        // mount at all.
        let BackendConfig::Process(process) = &config.backend else {
            return InlineDeps::Refuse(DepsRefusal::Unsupported);
        };
        if !nix::unistd::geteuid().is_root() {
            return InlineDeps::Refuse(DepsRefusal::Unsupported);
        }
        let store = match Store::open(&packages.store) {
            Ok(store) => store,
            Err(e) => {
                tracing::warn!(error = %e, "the package store cannot be used: inline dependencies are refused");
                return InlineDeps::Unavailable(format!("the package store cannot be used: {e}"));
            }
        };
        // Work trees of resolutions a killed runner left (one older than a build may
        // take is no one's).
        if let Err(e) = store.remove_stale_work(STALE_WORK) {
            tracing::warn!(error = %e, "leftovers in the package store");
        }
        match resolver_jail(process) {
            Ok(jail) => {
                let resolver =
                    Resolver::new(store, packages.set.clone(), policy, PYTHON, Arc::new(jail));
                InlineDeps::Resolve(Box::new(resolver))
            }
            Err(e) => {
                tracing::warn!(error = %e, "the resolver cannot be confined: inline dependencies are refused");
                InlineDeps::Unavailable(format!("the resolver cannot be confined: {e}"))
            }
        }
    }

    /// Ends the resolutions in flight (they answer 503 `draining`) and refuses new
    /// ones, waiting up to `within` for their scratches to be removed.
    pub async fn stop(&self, within: Duration) {
        if let InlineDeps::Resolve(resolver) = self {
            if !resolver.stop(within).await {
                tracing::warn!(?within, "resolutions of inline dependencies still ending");
            }
        }
    }

    /// What sandboxes can import, for `/health`: the set's packages, the warm imports,
    /// and whether inline dependencies are taken.
    pub fn describe(&self, packages: &PackagesConfig) -> Packages {
        Packages {
            inline_dependencies: matches!(self, InlineDeps::Resolve(_)),
            ..installed(packages)
        }
    }

    /// The inline dependencies `job` declares, resolved and ready to mount (none when
    /// it declares none, or is not Python).
    pub async fn resolve(&self, job: &Job) -> Result<Option<DepsMount>, DepsRefusal> {
        if job.lang != Lang::PYTHON {
            return Ok(None);
        }
        let metadata = match parse_script_metadata(&job.code) {
            Ok(Some(m)) if !m.dependencies.is_empty() => m,
            Ok(_) => return Ok(None),
            Err(e) => return Err(DepsError::from(e).into()),
        };
        let declared = || metadata.dependencies.join(", ");
        let resolver = match self {
            InlineDeps::Resolve(resolver) => resolver,
            InlineDeps::Refuse(refusal) => return Err(refusal(declared())),
            InlineDeps::Unavailable(why) => {
                return Err(DepsRefusal::Unavailable(declared(), why.clone()))
            }
        };
        let set = resolver.resolve(&metadata).await?;
        tracing::info!(key = %set.key, cached = set.cached, "inline dependencies ready");
        Ok(Some(DepsMount {
            key: set.key,
            source: set.dir,
        }))
    }
}

/// The resolver's confinement for a runner of this process backend: its scratches
/// below the state folder, its cgroups beside the sandboxes' (none when the operator
/// turned resource limits off), as host user `RUNNER_ID_BASE + 3`.
fn resolver_jail(process: &ProcessConfig) -> Result<ResolverJail, ConfineError> {
    let instance = instance_name();
    let hierarchy = if process.unsafe_no_resource_limits {
        None
    } else {
        let hierarchy =
            Hierarchy::open(&process.cgroup_mount, &instance).map_err(|e| ConfineError {
                step: "opening the cgroups under",
                path: process.cgroup_mount.clone(),
                source: std::io::Error::other(e),
            })?;
        Some(Arc::new(hierarchy))
    };
    ResolverJail::new(
        &process.state_dir,
        &instance,
        process.id_base + RESOLVER_ID_OFFSET,
        hierarchy,
    )
}
