//! One session's state: what its slot holds (its sandbox, nothing while it is paused,
//! nothing once it ended), its clocks (idle, TTL, pause) and counters, and what
//! `GET /sessions/{id}` says of it.

use super::egress::SessionEgress;
use super::{lock, rfc3339};
use crate::store::PausedRecord;
use sandbox_protocol::api::SessionInfo;
use sandbox_protocol::snapshot::SessionState;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{watch, OwnedMutexGuard};
use tokio::time::Instant;

/// What a session holds now.
pub(super) enum Slot<S> {
    /// Its sandbox.
    Active(S),
    /// Nothing: its files are in the store, and a call wakes it.
    Paused,
    /// Nothing: it has ended.
    Ended,
}

impl<S> Slot<S> {
    pub(super) fn as_mut(&mut self) -> Option<&mut S> {
        match self {
            Slot::Active(sandbox) => Some(sandbox),
            Slot::Paused | Slot::Ended => None,
        }
    }

    /// The sandbox, the slot left ended.
    pub(super) fn take(&mut self) -> Option<S> {
        match std::mem::replace(self, Slot::Ended) {
            Slot::Active(sandbox) => Some(sandbox),
            Slot::Paused | Slot::Ended => None,
        }
    }
}

/// A session's slot, held by the one operation in flight.
pub(super) type Held<S> = OwnedMutexGuard<Slot<S>>;

/// A paused session's pause.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pause {
    pub(super) at: SystemTime,
    pub(super) bytes: u64,
}

/// One session.
pub(super) struct Session<S> {
    pub(super) id: String,
    pub(super) idle: Duration,
    pub(super) ttl: Duration,
    /// When its TTL ends it (counted from its making, and again from each wake).
    pub(super) deadline: Mutex<(Instant, SystemTime)>,
    /// The sandbox, or why there is none. Held by the call in flight.
    pub(super) sandbox: Arc<tokio::sync::Mutex<Slot<S>>>,
    pub(super) last_used: Mutex<Instant>,
    pub(super) runs: AtomicU64,
    /// How many of its processes ran at its last answer: while any does, it is not
    /// frozen between calls (and the reaper asks again until none does).
    pub(super) processes: AtomicUsize,
    /// Turns true when the session ends: a run in flight stops.
    pub(super) ended: watch::Sender<bool>,
    /// Set while it is paused (what `GET /sessions/{id}` and the reaper read without
    /// waiting for the call in flight).
    pub(super) paused: Mutex<Option<Pause>>,
    /// It was woken since its last run (`Some(state_lost)`): the next run's answer says so.
    pub(super) woken: Mutex<Option<bool>>,
    /// Its hosts at the runner's proxy.
    pub(super) egress: Mutex<SessionEgress>,
}

impl<S> Session<S> {
    pub(super) fn new(id: String, idle: Duration, ttl: Duration, slot: Slot<S>) -> Self {
        let (ended, _) = watch::channel(false);
        let now = Instant::now();
        Session {
            id,
            idle,
            ttl,
            deadline: Mutex::new((now + ttl, SystemTime::now() + ttl)),
            sandbox: Arc::new(tokio::sync::Mutex::new(slot)),
            last_used: Mutex::new(now),
            runs: AtomicU64::new(0),
            processes: AtomicUsize::new(0),
            ended,
            paused: Mutex::new(None),
            woken: Mutex::new(None),
            egress: Mutex::default(),
        }
    }

    pub(super) fn info(&self, paused_ttl: Duration) -> SessionInfo {
        let paused = *lock(&self.paused);
        SessionInfo {
            id: self.id.clone(),
            idle_timeout_ms: self.idle.as_millis() as u64,
            expires_at: rfc3339(match paused {
                Some(pause) => pause.at + paused_ttl,
                None => lock(&self.deadline).1,
            }),
            runs: self.runs.load(Ordering::SeqCst),
            busy: self.sandbox.try_lock().is_err(),
            state: if paused.is_some() {
                SessionState::Paused
            } else {
                SessionState::Active
            },
            paused_at: paused.map(|pause| rfc3339(pause.at)),
            egress: lock(&self.egress).names(),
        }
    }

    pub(super) fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    pub(super) fn is_paused(&self) -> bool {
        lock(&self.paused).is_some()
    }

    /// Active and past its TTL.
    pub(super) fn past_ttl(&self, now: Instant) -> bool {
        !self.is_paused() && now >= lock(&self.deadline).0
    }

    /// Active and idle (no call in flight) for its idle timeout.
    pub(super) fn idle_out(&self, now: Instant) -> bool {
        let idle_since = *lock(&self.last_used);
        !self.is_paused()
            && now.duration_since(idle_since) >= self.idle
            && self.sandbox.try_lock().is_ok()
    }

    /// Paused for `paused_ttl` or longer.
    pub(super) fn paused_out(&self, paused_ttl: Duration) -> bool {
        lock(&self.paused).is_some_and(|pause| {
            SystemTime::now()
                .duration_since(pause.at)
                .is_ok_and(|d| d >= paused_ttl)
        })
    }

    /// A paused session's record, for the store.
    pub(super) fn record(&self, at: SystemTime, memory: bool) -> PausedRecord {
        let (egress, egress_bytes) = {
            let egress = lock(&self.egress);
            (egress.names(), egress.bytes_used())
        };
        PausedRecord {
            id: self.id.clone(),
            idle_timeout_ms: self.idle.as_millis() as u64,
            ttl_ms: self.ttl.as_millis() as u64,
            runs: self.runs.load(Ordering::SeqCst),
            paused_at_ms: crate::store::epoch_ms(at),
            bytes: 0,
            memory,
            egress,
            egress_bytes,
        }
    }
}
