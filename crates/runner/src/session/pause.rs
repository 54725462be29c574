//! Pausing and waking: a paused session's files (its home folder and `/tmp`) are in the
//! store as a session archive, and it has no sandbox, no memory and no host ids; any
//! call wakes it in a fresh sandbox of the pool, its files restored, before the call
//! goes on. What ran in it (interpreters' variables, processes) is lost: the first run
//! after a wake says so (`resumed`, `stateLost`).
//!
//! A session is paused by `POST /sessions/{id}/pause`, at its idle timeout
//! (`RUNNER_SESSION_ON_IDLE=pause`, the default) and when the runner stops; a runner
//! starting on the same data folder finds its paused sessions under their ids
//! ([`Sessions::new`]), each granted at the egress proxy what that runner's policy still
//! allows of the hosts it saved ([`found_session`]). A pause that does not fit in the store is refused
//! ([`SessionError::StorageFull`]), and the session goes on as it was.

use super::egress::regrant;
use super::{lock, Held, Pause, Session, SessionError, Sessions, Slot};
use crate::backend::ArchiveRefusal;
use crate::pool::PooledSandbox;
use crate::store::{from_epoch_ms, Incoming, PausedRecord};
use sandbox_egress::Policy;
use sandbox_protocol::snapshot::{PauseInfo, SessionState};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// How long shutdown waits for a session's call in flight before it ends the session
/// instead of pausing it.
const SHUTDOWN_HOLD: Duration = Duration::from_secs(5);

impl<S: PooledSandbox> Sessions<S> {
    /// Pauses a session (one already paused answers as it is).
    pub async fn pause(self: &Arc<Self>, id: &str) -> Result<PauseInfo, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        self.in_task(
            id,
            super::HOLD_WAIT,
            "pause",
            |sessions, session, guard| async move { sessions.pause_held(session, guard).await },
        )
        .await
    }

    /// Wakes a paused session (an active one answers as it is).
    pub async fn resume(
        self: &Arc<Self>,
        id: &str,
    ) -> Result<sandbox_protocol::api::SessionInfo, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        self.in_task(
            id,
            super::HOLD_WAIT,
            "wake",
            |sessions, session, mut guard| async move {
                sessions.wake_held(&session, &mut guard).await?;
                drop(guard);
                Ok(session.info(sessions.config.paused_ttl))
            },
        )
        .await
    }

    /// Pauses every active session (the runner is stopping): each once its call in
    /// flight ends (at most [`SHUTDOWN_HOLD`]); one that cannot be paused ends.
    pub async fn pause_all(self: &Arc<Self>)
    where
        S::Error: std::fmt::Display + Send,
    {
        let all: Vec<Arc<Session<S>>> = lock(&self.table).drain().map(|(_, s)| s).collect();
        for session in all {
            if session.is_paused() {
                continue;
            }
            let held = tokio::time::timeout(SHUTDOWN_HOLD, session.sandbox.clone().lock_owned());
            let paused = match held.await {
                Ok(guard) => self.pause_held(session.clone(), guard).await.map(|_| ()),
                Err(_) => Err(SessionError::Busy(session.id.clone())),
            };
            if let Err(e) = paused {
                tracing::warn!(session = %session.id, error = %e, "a session could not be paused at shutdown: it ends");
                self.end(&session).await;
            } else {
                tracing::info!(session = %session.id, "session paused at shutdown");
            }
        }
    }

    /// Pauses a session past its idle timeout, unless a call holds it; one that cannot
    /// be paused (the store is full) stays as it is, idle for another timeout. Whether
    /// it was paused.
    pub(super) async fn pause_idle(&self, session: Arc<Session<S>>) -> bool
    where
        S::Error: std::fmt::Display + Send,
    {
        let Ok(guard) = session.sandbox.clone().try_lock_owned() else {
            return false;
        };
        match self.pause_held(session.clone(), guard).await {
            Ok(paused) => {
                tracing::info!(session = %session.id, bytes = paused.bytes, "idle session paused");
                true
            }
            Err(SessionError::Sandbox(_) | SessionError::NotFound(_)) => false,
            Err(e) => {
                tracing::warn!(session = %session.id, error = %e, "an idle session could not be paused: it stays");
                session.touch();
                false
            }
        }
    }

    async fn pause_held(
        &self,
        session: Arc<Session<S>>,
        mut guard: Held<S>,
    ) -> Result<PauseInfo, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        let sandbox = match &mut *guard {
            Slot::Active(sandbox) => sandbox,
            Slot::Paused => return Ok(paused_info(&session)),
            Slot::Ended => return Err(SessionError::NotFound(session.id.clone())),
        };
        let incoming = self.store.incoming()?;
        let awake = session.processes.load(Ordering::SeqCst) > 0;
        let packed = sandbox
            .session_pack(&incoming.archive(), self.store.remaining(), awake)
            .await;
        match packed {
            Ok(Ok(_)) => {}
            Ok(Err(refusal)) => return Err(self.refusal(refusal)),
            Err(e) => return self.fail(&session.id, guard, e.to_string()).await,
        }
        let memory = save_whole(sandbox, &incoming).await?;
        let at = SystemTime::now();
        let mut record = session.record(at, memory);
        if let Err(e) = self.store.commit_session(&incoming, &mut record) {
            if !memory {
                return Err(e.into()); // the session goes on as it was
            }
            // The sandbox is spent: keep its files at least.
            incoming.drop_saved();
            record.memory = false;
            if let Err(e) = self.store.commit_session(&incoming, &mut record) {
                return self.fail(&session.id, guard, e.to_string()).await;
            }
        }
        if let Some(sandbox) = guard.take() {
            sandbox.destroy().await;
        }
        *guard = Slot::Paused;
        session.processes.store(0, Ordering::SeqCst);
        *lock(&session.paused) = Some(Pause {
            at,
            bytes: record.bytes,
        });
        self.save_changed_egress(&session, record.egress.as_deref());
        Ok(paused_info(&session))
    }

    /// Wakes the held session if it is paused: its sandbox restored whole where its
    /// backend saved it so, else one from the pool with its files; its TTL counted again
    /// from now. One that cannot be woken stays paused.
    pub(super) async fn wake_held(
        &self,
        session: &Session<S>,
        guard: &mut Held<S>,
    ) -> Result<(), SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        if !matches!(**guard, Slot::Paused) {
            return Ok(());
        }
        let _waking = self.reserve()?;
        let folder = self.store.session_folder(&session.id);
        let (sandbox, lost) = self.sandbox_from(Some(&folder)).await?;
        lock(&session.egress).attach(sandbox.egress());
        **guard = Slot::Active(sandbox);
        *lock(&session.paused) = None;
        *lock(&session.woken) = Some(lost);
        *lock(&session.deadline) = (
            Instant::now() + session.ttl,
            SystemTime::now() + session.ttl,
        );
        session.touch();
        self.store.remove_session(&session.id);
        tracing::info!(session = %session.id, "session woken");
        Ok(())
    }

    /// The error for an archive operation the sandbox refused.
    pub(super) fn refusal(&self, refusal: ArchiveRefusal) -> SessionError {
        match refusal {
            ArchiveRefusal::TooLarge { limit } => SessionError::StorageFull(format!(
                "the session's files take more than the {limit} bytes left of the runner's storage (RUNNER_MAX_STORED_BYTES); delete snapshots or paused sessions"
            )),
            other => SessionError::Archive(format!("the session's files could not be packed: {other}")),
        }
    }
}

/// Saves the sandbox whole beside its packed files in `incoming`, where its backend can
/// (a VM: its memory and devices); whether it did (the sandbox is then spent). A save
/// that fails leaves the files alone kept (a QEMU VM runs on as it was; a Firecracker
/// one is spent, which a pause does not mind and a snapshot repairs).
pub(super) async fn save_whole<S: PooledSandbox>(
    sandbox: &mut S,
    incoming: &Incoming,
) -> Result<bool, SessionError>
where
    S::Error: std::fmt::Display,
{
    let dir = incoming.saved()?;
    match sandbox.save(&dir).await {
        Ok(Some(bytes)) => {
            tracing::info!(bytes, "sandbox saved whole");
            Ok(true)
        }
        Ok(None) => {
            incoming.drop_saved();
            Ok(false)
        }
        Err(error) => {
            tracing::warn!(%error, "the sandbox could not be saved whole: its files are kept alone");
            incoming.drop_saved();
            Ok(false)
        }
    }
}

/// A session an earlier runner paused, found in the store at this one's start: its
/// grant at the proxy is what `egress` (this runner's operator's policy) still allows of
/// the hosts it saved; the others are dropped, and logged.
pub(super) fn found_session<S>(record: &PausedRecord, egress: &Policy) -> Session<S> {
    let session = paused_session(record);
    let (grant, dropped) = regrant(egress, record.egress.as_deref());
    if !dropped.is_empty() {
        tracing::warn!(
            session = %record.id,
            ?dropped,
            "a paused session's hosts that this runner's egress policy no longer allows are dropped from its grant"
        );
    }
    let mut session_egress = lock(&session.egress);
    session_egress.start(None, grant);
    session_egress.carry(record.egress_bytes);
    drop(session_egress);
    session
}

/// The session a paused record describes (granted nothing at the proxy).
pub(super) fn paused_session<S>(record: &PausedRecord) -> Session<S> {
    let session = Session::new(
        record.id.clone(),
        Duration::from_millis(record.idle_timeout_ms),
        Duration::from_millis(record.ttl_ms),
        Slot::Paused,
    );
    session.runs.store(record.runs, Ordering::SeqCst);
    *lock(&session.paused) = Some(Pause {
        at: from_epoch_ms(record.paused_at_ms),
        bytes: record.bytes,
    });
    session
}

fn paused_info<S>(session: &Session<S>) -> PauseInfo {
    let pause = lock(&session.paused).unwrap_or(Pause {
        at: SystemTime::now(),
        bytes: 0,
    });
    PauseInfo {
        id: session.id.clone(),
        state: SessionState::Paused,
        paused_at: super::rfc3339(pause.at),
        bytes: pause.bytes,
    }
}
