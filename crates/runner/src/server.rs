//! Starting and stopping a runner: backend, pool, HTTP server (answering from the start,
//! `"starting"` until the pool is ready), and the drain on SIGTERM/SIGINT.

use crate::backend::process::ProcessBackend;
use crate::backend::vm::VmBackend;
use crate::backend::{Backend, BackendError};
use crate::config::{BackendConfig, RunnerConfig, SandboxConfig};
use crate::http::{router, starting, switch, AppState, Base};
use crate::lifecycle::Lifecycle;
use crate::pool::{Pool, PooledSandbox, SandboxFactory};
use crate::session::{Sessions, REAP_EVERY};
use crate::store::{Store, StoreError};
use sandbox_egress::Egress;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long resolutions of inline dependencies have to end once told to stop (their
/// pip is killed at once; this is the time to remove their scratches).
const DEPS_STOP_TIME: Duration = Duration::from_secs(5);
/// After the grace period, how long the callers of killed runs have to receive their
/// answer; after the drain, how long the connections have to close.
const KILLED_ANSWER_TIME: Duration = Duration::from_secs(2);

/// Why a runner could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The backend cannot work on this host.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The backend started, but could not make the first sandbox (in a container, the
    /// second field says what the container lacks).
    #[error("the runner cannot make sandboxes on this host: {0}{1}")]
    FirstSandbox(BackendError, String),
    /// The kernel gave no random bytes for the instance id.
    #[error("making the instance id from /dev/urandom: {0}")]
    InstanceId(std::io::Error),
    /// The data folder cannot be used.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The runner's proxy, where the configuration opens hosts.
pub fn make_egress(config: &SandboxConfig) -> Option<Arc<Egress>> {
    let egress = &config.egress;
    egress
        .is_on()
        .then(|| Arc::new(Egress::new(egress.policy.clone(), egress.limits())))
}

/// Makes the backend a configuration names, for up to `sandboxes` at once, its sandboxes
/// reaching `egress` where it is given.
pub fn make_backend(
    config: &SandboxConfig,
    sandboxes: usize,
    egress: Option<Arc<Egress>>,
) -> Result<Backend, BackendError> {
    match &config.backend {
        BackendConfig::Process(process) => Ok(Backend::Process(Box::new(ProcessBackend::new(
            process.clone(),
            sandboxes,
            egress,
        )?))),
        BackendConfig::Vm(vm) => Ok(Backend::Vm(Box::new(VmBackend::new(vm.clone(), egress)?))),
    }
}

/// What a container lacks, for a process backend in one; nothing otherwise.
fn container_hint(config: &SandboxConfig) -> String {
    match &config.backend {
        BackendConfig::Process(process) => crate::container::hint(&process.cgroup_mount),
        BackendConfig::Vm(_) => String::new(),
    }
}

/// Serves the runner API on `listener` until `shutdown` completes, then drains (see
/// docs/operations.md) and destroys every sandbox.
///
/// The listener answers at once: until the pool has made its first sandbox, `/health`
/// says `"starting"` (503) and the API 503 `starting`. `on_ready` is called once the
/// pool has made its first sandbox and the runner's routes are served.
pub async fn serve(
    config: RunnerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_ready: impl FnOnce(),
) -> Result<(), ServeError> {
    let (store, found) = Store::open(config.store.clone())?;
    tracing::info!(
        data = %config.store.dir.display(),
        paused = found.paused.len(),
        snapshots = store.snapshots().len(),
        bytes = store.used(),
        "data folder"
    );
    let lifecycle = Arc::new(Lifecycle::new().map_err(ServeError::InstanceId)?);
    tracing::info!(instance = lifecycle.instance_id(), "instance id");
    let egress = make_egress(&config.sandbox);
    let backend = Arc::new(make_backend(
        &config.sandbox,
        config.sandboxes(),
        egress.clone(),
    )?);
    let name = backend.name();
    let base = Base::new(&config, lifecycle.clone(), egress);
    let ready = Arc::new(OnceLock::new());
    let app = switch(starting(&config, name, &base), ready.clone());
    tokio::spawn({
        let lifecycle = lifecycle.clone();
        async move {
            shutdown.await;
            lifecycle.begin_drain();
        }
    });
    let (close_tx, mut close_rx) = watch::channel(false);
    let serving = tokio::spawn(http_limits::serve(listener, app, config.http, async move {
        let _ = close_rx.wait_for(|close| *close).await;
    }));
    let warm = config.sandbox.languages.warm();
    let data_stack = base.data_stack.is_some();
    let pool = match Pool::start(backend, config.pool, warm, data_stack).await {
        Ok(pool) => pool,
        Err(e) => {
            let _ = close_tx.send(true);
            let _ = serving.await;
            return Err(ServeError::FirstSandbox(e, container_hint(&config.sandbox)));
        }
    };
    let grace = config.shutdown_grace;
    let store = Arc::new(store);
    let state = Arc::new(AppState::new(config, pool, name, base, store, found.paused));
    let reaper = tokio::spawn(reap(state.sessions.clone()));
    let _ = ready.set(router(state.clone()));
    on_ready();
    lifecycle.draining().await;
    drain(&state, grace).await;
    let _ = close_tx.send(true);
    reaper.abort();
    stop(&state, serving).await;
    Ok(())
}

/// Closes the listener (`serving` was told to), then ends the sessions and destroys
/// every sandbox.
async fn stop<S: SandboxFactory>(state: &AppState<S>, mut serving: JoinHandle<()>) {
    if tokio::time::timeout(KILLED_ANSWER_TIME, &mut serving)
        .await
        .is_err()
    {
        // A request came in after the drain ended (a session's run): end it, and any
        // resolution of inline dependencies first (see `drain`).
        state.base.deps.stop(DEPS_STOP_TIME).await;
        state.pool.abort_runs();
        serving.abort();
    }
    state.sessions.pause_all().await;
    // Resolutions still in flight end now: their scratches and cgroups go before the
    // backend removes this instance's folders.
    state.base.deps.stop(DEPS_STOP_TIME).await;
    state.pool.shutdown().await;
    tracing::info!("stopped");
}

/// The drain, once SIGTERM or SIGINT came: the listener stays open, so that clients and
/// orchestrators hear `/health` say `"draining"` (503) and a new run or session is
/// refused with 503 `draining` (nothing started: it may go to another runner). The
/// requests in flight (runs, and the sessions' requests) go on for at most `grace`,
/// then their runs are killed; it ends as soon as none is in flight.
async fn drain<S: SandboxFactory>(state: &AppState<S>, grace: Duration) {
    let lifecycle = &state.base.lifecycle;
    tracing::info!(in_flight = lifecycle.in_flight(), ?grace, "draining");
    if tokio::time::timeout(grace, lifecycle.idle()).await.is_err() {
        tracing::warn!(
            ?grace,
            "grace period over: killing the runs still in flight"
        );
        // Resolutions first: killing the runs kills every process of this runner's
        // cgroups, theirs too, which they would take for their own failure.
        state.base.deps.stop(DEPS_STOP_TIME).await;
        state.pool.abort_runs();
        // Killed runs answer at once: let their callers hear it.
        let _ = tokio::time::timeout(KILLED_ANSWER_TIME, lifecycle.idle()).await;
    }
}

/// Ends the sessions past their idle timeout or TTL, and freezes those whose processes
/// all ended, for the runner's life.
async fn reap<S: PooledSandbox>(sessions: Arc<Sessions<S>>)
where
    S::Error: std::fmt::Display + Send,
{
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        sessions.reap().await;
        sessions.settle().await;
    }
}

/// Completes on SIGTERM or SIGINT.
pub async fn termination() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending::<()>().await,
    }
    tracing::info!("shutting down");
}
