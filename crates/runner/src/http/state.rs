//! What the handlers share: [`Base`], what a runner has before its pool has made a
//! sandbox, and [`AppState`], the started runner's.

use super::error::ApiError;
use crate::backend::Backend;
use crate::config::RunnerConfig;
use crate::data_stack::DataStack;
use crate::deps::InlineDeps;
use crate::lifecycle::Lifecycle;
use crate::live::tools::ToolRuns;
use crate::metrics::Metrics;
use crate::pool::{Pool, SandboxFactory};
use crate::session::{Acquire, Restore, Sessions};
use crate::store::{PausedRecord, Store};
use sandbox_egress::Egress;
use sandbox_protocol::Lang;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a runner has before its pool has made a sandbox: shared by the router it
/// serves while starting ([`super::starting`]) and the one it serves after.
pub struct Base {
    /// How programs' inline dependencies are resolved, or why they are refused.
    pub deps: InlineDeps,
    /// Its instance id, its drain and the requests in flight.
    pub lifecycle: Arc<Lifecycle>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The runner's proxy, where the operator opened hosts (its metrics).
    pub egress: Option<Arc<Egress>>,
    /// Which Python programs get a sandbox with the data stack (none: every Python
    /// sandbox is the same).
    pub data_stack: Option<DataStack>,
}

impl Base {
    /// What a runner with `config`, `lifecycle` and the proxy `egress` starts from.
    pub fn new(
        config: &RunnerConfig,
        lifecycle: Arc<Lifecycle>,
        egress: Option<Arc<Egress>>,
    ) -> Self {
        let packages = &config.sandbox.packages;
        match &packages.set {
            Some(set) => tracing::info!(
                set = %set.dir.display(),
                python = set.manifest.python.len(),
                node = set.manifest.node.len(),
                "package set"
            ),
            None => tracing::warn!(
                store = %packages.store.display(),
                "no package set: programs have the standard libraries only; \
                 `sandbox-runner packages build` builds one (numpy, pandas, matplotlib, ...)"
            ),
        }
        Base {
            deps: InlineDeps::new(&config.sandbox),
            lifecycle,
            metrics: Arc::new(Metrics::new()),
            egress,
            data_stack: DataStack::of(&config.sandbox),
        }
    }
}

/// What the handlers share; `B` makes the sandboxes (the real [`Backend`], or a fake in
/// the router's unit tests).
pub struct AppState<B: SandboxFactory = Backend> {
    /// Validated settings.
    pub config: RunnerConfig,
    /// The warm pool.
    pub pool: Arc<Pool<B>>,
    /// What the runner had before its pool: inline dependencies, lifecycle, metrics.
    pub base: Base,
    /// The backend's name, for /health.
    pub backend: &'static str,
    /// The sessions.
    pub sessions: Arc<Sessions<B::Sandbox>>,
    /// The runs whose programs may call tools, while their answers stream.
    pub tool_runs: Arc<ToolRuns>,
    next_request: AtomicU64,
}

impl<B: SandboxFactory> AppState<B> {
    /// The state of a runner, its sessions those `paused` in `store` (found there at
    /// its start).
    pub fn new(
        config: RunnerConfig,
        pool: Pool<B>,
        backend: &'static str,
        base: Base,
        store: Arc<Store>,
        paused: Vec<PausedRecord>,
    ) -> Self {
        let pool = Arc::new(pool);
        let acquire: Acquire<B::Sandbox> = {
            let pool = pool.clone();
            Arc::new(move || {
                let pool = pool.clone();
                Box::pin(async move { Ok(pool.acquire(&Lang::BASH, false).await?.keep()) })
            })
        };
        let restore: Restore<B::Sandbox> = {
            let pool = pool.clone();
            Arc::new(move |dir| {
                let pool = pool.clone();
                Box::pin(async move { pool.restore(&dir).await.map_err(|e| e.to_string()) })
            })
        };
        AppState {
            sessions: Arc::new(Sessions::new(
                config.sessions,
                store,
                acquire,
                restore,
                paused,
                &config.sandbox.egress.policy,
            )),
            config,
            pool,
            base,
            backend,
            tool_runs: Arc::default(),
            next_request: AtomicU64::new(1),
        }
    }
}

impl<B: SandboxFactory> AppState<B> {
    /// The id of the next run request, for its log lines.
    pub(super) fn next_request(&self) -> u64 {
        self.next_request.fetch_add(1, Ordering::Relaxed)
    }
}

/// Refuses a new run or session once the runner drains: nothing has been started.
pub fn refuse_when_draining(lifecycle: &Lifecycle) -> Result<(), ApiError> {
    if lifecycle.is_draining() {
        Err(ApiError::Draining)
    } else {
        Ok(())
    }
}
