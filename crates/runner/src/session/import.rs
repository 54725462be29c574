//! `POST /snapshots/import`: a snapshot from a tar archive someone else made, which is
//! untrusted input. It is read entry by entry through `sandbox_archive`'s checks (paths,
//! types, links, sizes, counts) and written afresh, headers and all, into an incoming
//! folder of the store; only that new archive is kept, and only if every entry passed
//! and it fits in the store. Nothing of it is ever unpacked on the host: the agent of a
//! session started from it unpacks it, inside the sandbox, through the same checks.

use super::{SessionError, Sessions};
use crate::pool::PooledSandbox;
use crate::store::{epoch_ms, SnapshotRecord};
use sandbox_archive::{ArchiveError, Limits};
use sandbox_protocol::snapshot::ImportAnswer;
use std::fs::OpenOptions;
use std::io::BufWriter;
use std::os::unix::fs::OpenOptionsExt;
use std::time::SystemTime;
use tokio::io::AsyncRead;

impl<S: PooledSandbox> Sessions<S> {
    /// Imports a snapshot from `reader`, a tar stream.
    pub async fn import<R>(&self, reader: R) -> Result<ImportAnswer, SessionError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        let incoming = self.store.incoming()?;
        let limits = Limits {
            max_bytes: self.store.remaining(),
            max_entries: self.store.config().max_entries,
        };
        let to = incoming.archive();
        let input = tokio_util::io::SyncIoBridge::new(reader);
        let checked = tokio::task::spawn_blocking(move || {
            let file = OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&to)
                .map_err(ArchiveError::Write)?;
            let mut output = BufWriter::new(file);
            let summary = sandbox_archive::normalize(input, &mut output, limits)?;
            let file = output
                .into_inner()
                .map_err(|e| ArchiveError::Write(e.into_error()))?;
            file.sync_all().map_err(ArchiveError::Write)?;
            Ok(summary)
        })
        .await
        .map_err(|e| SessionError::Store(format!("the import's task failed: {e}")))?;
        match checked {
            Ok(_) => {}
            Err(ArchiveError::Write(e)) => {
                return Err(SessionError::Store(format!(
                    "writing the imported archive: {e}"
                )))
            }
            Err(e) => {
                return Err(SessionError::BadArchive(format!(
                    "the archive was refused: {e}"
                )))
            }
        }
        let snapshot_id = crate::lifecycle::random_id().map_err(SessionError::Random)?;
        let mut record = SnapshotRecord {
            snapshot_id: snapshot_id.clone(),
            session_id: String::new(),
            created_at_ms: epoch_ms(SystemTime::now()),
            bytes: 0,
            memory: false,
        };
        self.store.commit_snapshot(&incoming, &mut record)?;
        Ok(ImportAnswer {
            snapshot_id,
            bytes: record.bytes,
        })
    }
}
