//! Snapshots and forks: a session's files, packed once into the store, to start other
//! sessions from. A snapshot is kept until `DELETE /snapshots/{id}` or its TTL; a fork
//! makes new sessions, each paused with its own copy of the files (a hard link: an
//! archive is never changed once written), each woken by its first call.
//!
//! Taken of an active session, the snapshot is packed between its calls (the session
//! held, its processes, if any run, going on meanwhile) and the session goes on; of a
//! paused one, its stored archive is copied.

use super::pause::save_whole;
use super::{lock, paused_session, Held, SessionError, Sessions, Slot, HOLD_WAIT};
use crate::pool::PooledSandbox;
use crate::store::{epoch_ms, from_epoch_ms, Incoming, SnapshotRecord, Store};
use sandbox_protocol::snapshot::{ForkedSession, SnapshotInfo};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

pub use sandbox_protocol::snapshot::MAX_FORKS;

impl<S: PooledSandbox> Sessions<S> {
    /// Takes a snapshot of a session's files.
    pub async fn snapshot(self: &Arc<Self>, id: &str) -> Result<SnapshotInfo, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        self.in_task(
            id,
            HOLD_WAIT,
            "snapshot",
            |sessions, session, guard| async move {
                let incoming = sessions.pack_held(&session.id, guard).await?;
                let snapshot_id = crate::lifecycle::random_id().map_err(SessionError::Random)?;
                let mut record = SnapshotRecord {
                    snapshot_id,
                    session_id: session.id.clone(),
                    created_at_ms: epoch_ms(SystemTime::now()),
                    bytes: 0,
                    memory: Store::saved_in(incoming.folder()).is_some(),
                };
                sessions.store.commit_snapshot(&incoming, &mut record)?;
                Ok(sessions.snapshot_info(&record))
            },
        )
        .await
    }

    /// Makes `count` new sessions, each with a copy of a session's files.
    pub async fn fork(
        self: &Arc<Self>,
        id: &str,
        count: u64,
    ) -> Result<Vec<ForkedSession>, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        if !(1..=MAX_FORKS).contains(&count) {
            return Err(SessionError::BadRequest(format!(
                "count must be between 1 and {MAX_FORKS}, not {count}"
            )));
        }
        self.in_task(
            id,
            HOLD_WAIT,
            "fork",
            move |sessions, session, guard| async move {
                let packed = sessions.pack_held(&session.id, guard).await?;
                let mut made = Vec::new();
                for _ in 0..count {
                    match sessions.fork_one(&session, &packed) {
                        Ok(forked) => made.push(forked),
                        Err(e) => {
                            for forked in &made {
                                let _ = sessions.close(&forked.id).await;
                            }
                            return Err(e);
                        }
                    }
                }
                Ok(made)
            },
        )
        .await
    }

    /// A snapshot's record, or [`SessionError::SnapshotNotFound`].
    pub fn snapshot_record(&self, id: &str) -> Result<SnapshotRecord, SessionError> {
        self.store
            .snapshot(id)
            .ok_or_else(|| SessionError::SnapshotNotFound(id.to_owned()))
    }

    /// A snapshot's folder, or [`SessionError::SnapshotNotFound`].
    pub(super) fn snapshot_folder(&self, id: &str) -> Result<PathBuf, SessionError> {
        self.snapshot_record(id)?;
        Ok(self.store.snapshot_folder(id))
    }

    /// Every snapshot, oldest first.
    pub fn snapshots(&self) -> Vec<SnapshotInfo> {
        self.store
            .snapshots()
            .iter()
            .map(|record| self.snapshot_info(record))
            .collect()
    }

    /// Deletes a snapshot.
    pub fn delete_snapshot(&self, id: &str) -> Result<(), SessionError> {
        if self.store.remove_snapshot(id) {
            Ok(())
        } else {
            Err(SessionError::SnapshotNotFound(id.to_owned()))
        }
    }

    /// A snapshot as the API gives it.
    pub fn snapshot_info(&self, record: &SnapshotRecord) -> SnapshotInfo {
        let created = from_epoch_ms(record.created_at_ms);
        SnapshotInfo {
            snapshot_id: record.snapshot_id.clone(),
            session_id: record.session_id.clone(),
            created_at: super::rfc3339(created),
            bytes: record.bytes,
            expires_at: super::rfc3339(created + self.config.snapshot_ttl),
        }
    }

    /// The held session as a fresh incoming folder: its files packed by its sandbox, and
    /// the sandbox saved whole where its backend can (then restored from that save for
    /// the session to go on), or a copy of what a paused session has stored.
    async fn pack_held(&self, id: &str, mut guard: Held<S>) -> Result<Incoming, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        let incoming = self.store.incoming()?;
        let session = self.get(id)?;
        let awake = session.processes.load(Ordering::SeqCst) > 0;
        let sandbox = match &mut *guard {
            Slot::Active(sandbox) => sandbox,
            Slot::Paused => {
                self.store
                    .copy_into(&self.store.session_folder(id), &incoming)?;
                return Ok(incoming);
            }
            Slot::Ended => return Err(SessionError::NotFound(id.to_owned())),
        };
        let packed = sandbox
            .session_pack(&incoming.archive(), self.store.remaining(), awake)
            .await;
        match packed {
            Ok(Ok(_)) => {}
            Ok(Err(refusal)) => return Err(self.refusal(refusal)),
            Err(e) => return self.fail(id, guard, e.to_string()).await,
        }
        if !save_whole(sandbox, &incoming).await? {
            return Ok(incoming);
        }
        // The saved sandbox is spent: the session goes on in one restored from the save.
        if let Some(spent) = guard.take() {
            spent.destroy().await;
        }
        match self.sandbox_from(Some(incoming.folder())).await {
            Ok((sandbox, lost)) => {
                lock(&session.egress).attach(sandbox.egress());
                *guard = Slot::Active(sandbox);
                if lost {
                    *lock(&session.woken) = Some(true);
                }
                Ok(incoming)
            }
            Err(e) => self.fail(id, guard, e.to_string()).await,
        }
    }

    /// One paused session with a copy of `packed`.
    fn fork_one(
        &self,
        original: &super::Session<S>,
        packed: &Incoming,
    ) -> Result<ForkedSession, SessionError> {
        let incoming = self.store.incoming()?;
        self.store.copy_into(packed.folder(), &incoming)?;
        let id = crate::lifecycle::random_id().map_err(SessionError::Random)?;
        let at = SystemTime::now();
        let mut record = original.record(at, Store::saved_in(packed.folder()).is_some());
        record.id = id.clone();
        record.runs = 0;
        self.store.commit_session(&incoming, &mut record)?;
        let session = paused_session::<S>(&record);
        // A fork may reach what its original may (its sandbox gets it when it wakes).
        *lock(&session.egress) = lock(&original.egress).for_fork();
        lock(&self.table).insert(id.clone(), Arc::new(session));
        Ok(ForkedSession {
            id,
            idle_timeout_ms: record.idle_timeout_ms,
            expires_at: super::rfc3339(at + self.config.paused_ttl),
        })
    }
}
