//! Sessions: sandboxes that live across runs.
//!
//! A session takes a warm sandbox from the pool (the pool makes another in its place)
//! and keeps it: its runs go to the same agent, marked as a session's
//! ([`Job::session`](sandbox_protocol::agent::Job::session)), so that the files of the home folder and `/tmp` and the processes
//! a program leaves in the background stay for the next run. One run at a time: a
//! second one while a run is in flight is refused, never queued.
//!
//! Between its calls (runs and file operations) nothing of a session runs: its sandbox
//! is frozen ([`PooledSandbox::freeze`]) from the moment it is made, thawed for each
//! call and frozen again before the call answers. A sandbox that cannot be frozen ends
//! its session.
//!
//! A session ends at its idle timeout (no run for that long), at its TTL (however
//! busy), on `DELETE`, when its sandbox fails, and when the runner stops; its sandbox is
//! then destroyed like any other (a restarted runner removes what a killed one left,
//! as for every sandbox). Its id is 128 random bits: nothing else leads to it.
//!
//! [`Sessions`] is the table and what each operation does: making, holding and ending
//! sessions here; runs in `run.rs`, file operations in `files.rs`, processes in
//! `processes.rs`, pausing and waking in `pause.rs`, snapshots and forks in
//! `snapshots.rs`, a session's hosts at the egress proxy in `egress.rs`. The HTTP
//! endpoints over it are in [`crate::http`] (`sessions.rs`).

use crate::pool::{AcquireError, PooledSandbox};
use crate::store::{PausedRecord, Store};
use sandbox_egress::{Grant, Policy};
use sandbox_protocol::api::{CreateSession, SessionInfo};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
// Tokio's clock (the system's, but in tests that pause it), so that idle timeouts and
// TTLs are tested in paused time.
use tokio::time::Instant;

/// How often the reaper looks for sessions past their idle timeout or TTL.
pub const REAP_EVERY: Duration = Duration::from_millis(500);

/// How long a run or a file operation waits for the session's operation in flight to
/// end before it is refused as busy: long enough for a process operation (a few
/// milliseconds), far shorter than a run.
const HOLD_WAIT: Duration = Duration::from_millis(250);

/// How long a caller waits for a file operation's answer (see [`Sessions::file`]).
pub const FILE_ANSWER_WAIT: Duration = Duration::from_secs(30);

/// How sessions get a sandbox: one from the pool, kept for good.
pub type Acquire<S> =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<S, AcquireError>> + Send>> + Send + Sync>;

/// How sessions get a sandbox back that its backend saved whole (`PooledSandbox::save`)
/// in a folder: the backend's restore, or why it failed.
pub type Restore<S> = Arc<
    dyn Fn(std::path::PathBuf) -> Pin<Box<dyn Future<Output = Result<S, String>> + Send>>
        + Send
        + Sync,
>;

/// The sessions of one runner.
pub struct Sessions<S> {
    config: SessionConfig,
    table: Mutex<HashMap<String, Arc<Session<S>>>>,
    /// Sessions being made or woken (counted against the maximum).
    opening: Mutex<usize>,
    /// Where paused sessions and snapshots are kept.
    store: Arc<Store>,
    /// Where sandboxes come from.
    acquire: Acquire<S>,
    /// How a saved sandbox comes back.
    restore: Restore<S>,
}

impl<S: PooledSandbox> Sessions<S> {
    /// The sessions `paused` (found in the store by a runner starting on it), each
    /// woken by its first call, its grant at the proxy what `egress` (this runner's
    /// operator's policy) still allows of the one it saved; sandboxes from `acquire`,
    /// saved ones back by `restore`.
    pub fn new(
        config: SessionConfig,
        store: Arc<Store>,
        acquire: Acquire<S>,
        restore: Restore<S>,
        paused: Vec<PausedRecord>,
        egress: &Policy,
    ) -> Self {
        let table = paused
            .into_iter()
            .map(|record| {
                let session = found_session(&record, egress);
                (record.id, Arc::new(session))
            })
            .collect();
        Sessions {
            config,
            table: Mutex::new(table),
            opening: Mutex::new(0),
            store,
            acquire,
            restore,
        }
    }

    /// The data folder.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The settings.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// Sessions open now with a sandbox (paused ones have none).
    pub fn count(&self) -> usize {
        lock(&self.table)
            .values()
            .filter(|s| !s.is_paused())
            .count()
    }

    /// Makes a session with a sandbox from the pool (and, `fromSnapshot`, a snapshot's
    /// files), its programs granted `egress` at the runner's proxy (none: it opens no
    /// host). It is made in a task of its own, so that a caller that goes away leaves
    /// no sandbox half made.
    pub async fn open(
        self: &Arc<Self>,
        request: CreateSession,
        egress: Option<Grant>,
    ) -> Result<SessionInfo, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        let from = match &request.from_snapshot {
            Some(id) => Some(self.snapshot_folder(id)?),
            None => None,
        };
        let sessions = self.clone();
        tokio::spawn(async move { sessions.make(request, from, egress).await })
            .await
            .map_err(|e| {
                SessionError::Sandbox(format!("the task making the session failed: {e}"))
            })?
    }

    async fn make(
        &self,
        request: CreateSession,
        from: Option<std::path::PathBuf>,
        egress: Option<Grant>,
    ) -> Result<SessionInfo, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        let idle = self.duration(
            request.idle_timeout_ms,
            "idleTimeoutMs",
            self.config.idle,
            self.config.max_idle,
        )?;
        let ttl = self.duration(
            request.ttl_ms,
            "ttlMs",
            self.config.ttl,
            self.config.max_ttl,
        )?;
        let _opening = self.reserve()?;
        let id = crate::lifecycle::random_id().map_err(SessionError::Random)?;
        let (sandbox, _) = self.sandbox_from(from.as_deref()).await?;
        let handle = sandbox.egress().cloned();
        let session = Arc::new(Session::new(id.clone(), idle, ttl, Slot::Active(sandbox)));
        lock(&session.egress).start(handle, egress);
        let info = session.info(self.config.paused_ttl);
        lock(&self.table).insert(id, session);
        Ok(info)
    }

    /// A session's sandbox from a stored `folder` (a paused session's, a snapshot's):
    /// restored whole where its backend saved it so (false: nothing was lost), else one
    /// from the pool with the folder's files (true: what ran in it is lost); from the
    /// pool, empty, without a folder.
    async fn sandbox_from(
        &self,
        folder: Option<&std::path::Path>,
    ) -> Result<(S, bool), SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        if let Some(saved) = folder.and_then(Store::saved_in) {
            match (self.restore)(saved).await {
                Ok(sandbox) => return Ok((sandbox, false)),
                Err(error) => tracing::warn!(
                    %error,
                    "a saved sandbox could not be restored: its files go into a fresh one"
                ),
            }
        }
        let archive = folder.map(|folder| folder.join("files.tar"));
        Ok((self.sandbox_with(archive.as_deref()).await?, true))
    }

    /// A sandbox from the pool, with `archive`'s files if one is given, frozen.
    async fn sandbox_with(&self, archive: Option<&std::path::Path>) -> Result<S, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        let mut sandbox = (self.acquire)().await?;
        let unpacked = match archive {
            Some(archive) => match sandbox.unpack(archive).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(refusal)) => Err(SessionError::Archive(format!(
                    "the stored files could not be restored: {refusal}"
                ))),
                Err(e) => Err(SessionError::Sandbox(e.to_string())),
            },
            None => Ok(()),
        };
        let ready = match unpacked {
            Ok(()) => sandbox
                .freeze()
                .await
                .map_err(|e| SessionError::Sandbox(e.to_string())),
            Err(e) => Err(e),
        };
        match ready {
            Ok(()) => Ok(sandbox),
            Err(e) => {
                sandbox.destroy().await;
                Err(e)
            }
        }
    }

    /// What a session is now.
    pub fn info(&self, id: &str) -> Result<SessionInfo, SessionError> {
        Ok(self.get(id)?.info(self.config.paused_ttl))
    }

    /// Ends a session whose sandbox failed, and says why.
    async fn fail<T>(
        &self,
        id: &str,
        mut guard: Held<S>,
        error: String,
    ) -> Result<T, SessionError> {
        tracing::warn!(session = %id, %error, "a session's sandbox failed: the session ends");
        lock(&self.table).remove(id);
        if let Some(sandbox) = guard.take() {
            sandbox.destroy().await;
        }
        Err(SessionError::Sandbox(error))
    }

    /// Holds the session (waiting `wait` for a call in flight), then does `op` on it in a
    /// task of its own, so that a caller that goes away never leaves the channel in the
    /// middle of an exchange; waits [`FILE_ANSWER_WAIT`] for its answer (the task goes
    /// on after that, the session busy, until the answer comes or the session ends).
    async fn in_task<T, F, Fut>(
        self: &Arc<Self>,
        id: &str,
        wait: Duration,
        what: &str,
        op: F,
    ) -> Result<T, SessionError>
    where
        F: FnOnce(Arc<Self>, Arc<Session<S>>, Held<S>) -> Fut,
        Fut: std::future::Future<Output = Result<T, SessionError>> + Send + 'static,
        T: Send + 'static,
    {
        let (session, guard) = self.hold(id, wait).await?;
        let task = tokio::spawn(op(self.clone(), session, guard));
        match tokio::time::timeout(FILE_ANSWER_WAIT, task).await {
            Ok(joined) => {
                joined.map_err(|e| SessionError::Sandbox(format!("the {what} task failed: {e}")))?
            }
            Err(_) => Err(SessionError::FileTimeout(FILE_ANSWER_WAIT)),
        }
    }

    /// Ends a session: a run in flight stops, and the sandbox is destroyed before this
    /// returns.
    pub async fn close(&self, id: &str) -> Result<(), SessionError> {
        let session = lock(&self.table)
            .remove(id)
            .ok_or_else(|| SessionError::NotFound(id.to_owned()))?;
        self.end(&session).await;
        Ok(())
    }

    /// Ends the sessions past their TTL (and, `on_idle = end`, their idle timeout),
    /// pauses those past their idle timeout, ends the paused ones past the paused TTL,
    /// and removes the snapshots past theirs; how many sessions it ended or paused.
    pub async fn reap(self: &Arc<Self>) -> usize
    where
        S::Error: std::fmt::Display + Send,
    {
        let now = Instant::now();
        let pause = self.config.on_idle == OnIdle::Pause;
        let (ending, idle): (Vec<_>, Vec<_>) = {
            let table = lock(&self.table);
            let ending = table
                .values()
                .filter(|s| {
                    s.past_ttl(now)
                        || s.paused_out(self.config.paused_ttl)
                        || (!pause && s.idle_out(now))
                })
                .cloned()
                .collect();
            let idle = table
                .values()
                .filter(|s| pause && !s.past_ttl(now) && s.idle_out(now))
                .cloned()
                .collect();
            (ending, idle)
        };
        for session in &ending {
            tracing::info!(session = %session.id, "session expired");
            // Ended before it leaves the table: once it answers 404, nothing of it runs.
            self.end(session).await;
            lock(&self.table).remove(&session.id);
        }
        let mut paused = 0;
        for session in idle {
            // In a task of its own: a reaper stopped meanwhile (the runner's shutdown)
            // never leaves a pause halfway through its exchange with the sandbox.
            let sessions = self.clone();
            let pausing = tokio::spawn(async move { sessions.pause_idle(session).await });
            paused += usize::from(pausing.await.unwrap_or(false));
        }
        self.store
            .expire_snapshots(SystemTime::now(), self.config.snapshot_ttl);
        ending.len() + paused
    }

    /// Stops a session's run in flight, destroys its sandbox, and removes its stored
    /// files (a paused one's).
    async fn end(&self, session: &Session<S>) {
        let _ = session.ended.send(true);
        let sandbox = session.sandbox.lock().await.take();
        if let Some(sandbox) = sandbox {
            sandbox.destroy().await;
        }
        if lock(&session.paused).take().is_some() {
            self.store.remove_session(&session.id);
        }
    }

    /// The session and its sandbox, held for one operation (refused if another one
    /// still holds it after `wait`: a run, or a process operation longer than
    /// most), its idle clock restarted.
    async fn hold(
        &self,
        id: &str,
        wait: Duration,
    ) -> Result<(Arc<Session<S>>, Held<S>), SessionError> {
        let session = self.get(id)?;
        let guard = tokio::time::timeout(wait, session.sandbox.clone().lock_owned())
            .await
            .map_err(|_| SessionError::Busy(id.to_owned()))?;
        session.touch();
        Ok((session, guard))
    }

    fn get(&self, id: &str) -> Result<Arc<Session<S>>, SessionError> {
        lock(&self.table)
            .get(id)
            .cloned()
            .ok_or_else(|| SessionError::NotFound(id.to_owned()))
    }

    /// A requested duration, or the default; within 1 ms and the maximum.
    fn duration(
        &self,
        asked: Option<u64>,
        name: &str,
        default: Duration,
        max: Duration,
    ) -> Result<Duration, SessionError> {
        let Some(ms) = asked else { return Ok(default) };
        let max_ms = max.as_millis() as u64;
        if (1..=max_ms).contains(&ms) {
            Ok(Duration::from_millis(ms))
        } else {
            Err(SessionError::BadRequest(format!(
                "{name} must be between 1 and {max_ms}, not {ms}"
            )))
        }
    }

    /// Counts a session being made against the maximum, until the guard is dropped.
    fn reserve(&self) -> Result<Opening<'_>, SessionError> {
        let mut opening = lock(&self.opening);
        if self.count() + *opening >= self.config.max_sessions {
            return Err(SessionError::TooMany(self.config.max_sessions));
        }
        *opening += 1;
        Ok(Opening(&self.opening))
    }
}

/// A session being made, counted in [`Sessions::opening`] while it lives.
struct Opening<'a>(&'a Mutex<usize>);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        *lock(self.0) -= 1;
    }
}

/// `op` on the held sandbox, unless the session has ended (or ends meanwhile:
/// [`SessionError::NotFound`]).
async fn on_sandbox<'a, S, T, Fut>(
    session: &Session<S>,
    guard: &'a mut Held<S>,
    op: impl FnOnce(&'a mut S) -> Fut,
) -> Result<T, SessionError>
where
    Fut: std::future::Future<Output = T> + 'a,
{
    let Some(sandbox) = guard.as_mut() else {
        return Err(SessionError::NotFound(session.id.clone()));
    };
    let mut ended = session.ended.subscribe();
    tokio::select! {
        out = op(sandbox) => Ok(out),
        _ = ended.wait_for(|ended| *ended) => Err(SessionError::NotFound(session.id.clone())),
    }
}

/// Checks a file path by its words: relative, not empty, no `..`, no NUL, at most
/// 4096 bytes. (Symlinks are for the agent, inside the sandbox, to refuse.)
pub fn check_path(path: &str) -> Result<(), SessionError> {
    use std::path::{Component, Path};
    let words_ok = !path.is_empty()
        && path.len() <= 4096
        && !path.contains('\0')
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && Path::new(path)
            .components()
            .any(|c| matches!(c, Component::Normal(_)));
    if words_ok {
        Ok(())
    } else {
        Err(SessionError::BadPath(path.to_owned()))
    }
}

/// A time as RFC 3339, UTC, to the millisecond.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Locks a session mutex; one poisoned by a panic goes on with its data.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

mod egress;
mod error;
mod files;
mod import;
mod pause;
mod processes;
mod run;
mod snapshots;
mod state;
#[cfg(test)]
mod tests;

pub use error::{OnIdle, SessionConfig, SessionError};
use pause::{found_session, paused_session};
pub use run::SessionRun;
pub use snapshots::MAX_FORKS;
use state::{Held, Pause, Session, Slot};
