//! Starting and stopping a runner: backend, pool, HTTP server, graceful shutdown.

use crate::backend::process::ProcessBackend;
use crate::backend::vm::VmBackend;
use crate::backend::{Backend, BackendError};
use crate::config::{BackendConfig, RunnerConfig, SandboxConfig};
use crate::http::{router, AppState};
use crate::pool::{Pool, PooledSandbox};
use crate::session::{Sessions, REAP_EVERY};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// After the grace period, how long the callers of killed runs have to receive their answer.
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
}

/// Makes the backend a configuration names, for up to `sandboxes` at once.
pub fn make_backend(config: &SandboxConfig, sandboxes: usize) -> Result<Backend, BackendError> {
    match &config.backend {
        BackendConfig::Process(process) => Ok(Backend::Process(Box::new(ProcessBackend::new(
            process.clone(),
            sandboxes,
        )?))),
        BackendConfig::Vm(vm) => Ok(Backend::Vm(Box::new(VmBackend::new(vm.clone())?))),
    }
}

/// What a container lacks, for a process backend in one; nothing otherwise.
fn container_hint(config: &SandboxConfig) -> String {
    match &config.backend {
        BackendConfig::Process(process) => crate::container::hint(&process.cgroup_mount),
        BackendConfig::Vm(_) => String::new(),
    }
}

/// Serves the runner API on `listener` until `shutdown` completes, then stops taking
/// requests, lets runs in flight finish for at most the configured grace period (then
/// kills them), and destroys every sandbox. `on_ready` is called once the pool has made
/// its first sandbox, just before requests are served.
pub async fn serve(
    config: RunnerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_ready: impl FnOnce(),
) -> Result<(), ServeError> {
    let backend = Arc::new(make_backend(&config.sandbox, config.sandboxes())?);
    let name = backend.name();
    let warm = config.sandbox.languages.warm();
    let pool = Pool::start(backend, config.pool, warm)
        .await
        .map_err(|e| ServeError::FirstSandbox(e, container_hint(&config.sandbox)))?;
    let grace = config.shutdown_grace;
    let limits = config.http;
    let state = Arc::new(AppState::new(config, pool, name));
    let reaper = tokio::spawn(reap(state.sessions.clone()));
    let app = router(state.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let mut graceful = stop_rx.clone();
    let serving = http_limits::serve(listener, app, limits, async move {
        let _ = graceful.wait_for(|stop| *stop).await;
    });
    on_ready();
    let mut serving = std::pin::pin!(serving);
    let mut forced = stop_rx;
    tokio::select! {
        () = &mut serving => {}
        _ = async {
            let _ = forced.wait_for(|stop| *stop).await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(?grace, "grace period over: killing the runs still in flight");
            state.pool.abort_runs();
            // Killed runs answer at once: let their callers hear it, then close the rest.
            let _ = tokio::time::timeout(KILLED_ANSWER_TIME, serving).await;
        }
    }
    reaper.abort();
    state.sessions.close_all().await;
    state.pool.shutdown().await;
    Ok(())
}

/// Ends the sessions past their idle timeout or TTL, for the runner's life.
async fn reap<S: PooledSandbox>(sessions: Arc<Sessions<S>>) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        sessions.reap().await;
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
