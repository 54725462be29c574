//! The runner's data folder (`RUNNER_DATA_DIR`): paused sessions and snapshots, each a
//! session archive (`files.tar`, see `sandbox_archive`) and a JSON record, kept across
//! restarts of the runner and reboots of its host.
//!
//! ```text
//! <dir>/lock                      held (flock) by the one runner using the folder
//! <dir>/sessions/<id>/            a paused session: files.tar, session.json, and vm/
//!                                 where its backend saved it whole (a VM's memory)
//! <dir>/snapshots/<id>/           a snapshot: files.tar, snapshot.json, vm/ likewise
//! <dir>/incoming/<n>/             being written; renamed into place when complete,
//!                                 removed on failure and at the next start
//! ```
//!
//! Everything is the runner's (root's), folders 0700 and files 0600: no sandbox reaches
//! it (the sandboxes' roots never show the host's folders), and only the runner's API,
//! behind its token, reads it. Together, archives are bounded by `max_bytes`: each is
//! counted once complete ([`Store::commit_session`], [`Store::commit_snapshot`]), and one
//! that does not fit is refused ([`StoreError::Full`]) and removed.

mod records;
#[cfg(test)]
mod tests;

pub use records::{epoch_ms, from_epoch_ms, PausedRecord, SnapshotRecord};

use nix::fcntl::{Flock, FlockArg};
use std::collections::HashMap;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The archive's name in each folder.
const ARCHIVE: &str = "files.tar";
/// A paused session's record.
const SESSION_RECORD: &str = "session.json";
/// A snapshot's record.
const SNAPSHOT_RECORD: &str = "snapshot.json";
/// The folder where a backend saved a sandbox whole.
const SAVED: &str = "vm";

/// The data folder's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The folder.
    pub dir: PathBuf,
    /// The bytes its archives may take together.
    pub max_bytes: u64,
    /// The most entries of an imported archive.
    pub max_entries: u64,
}

/// Why the data folder could not do something.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error("the data folder: {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On what.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Another runner holds the folder.
    #[error("another runner uses the data folder {0} (it holds its lock file): give each runner its own RUNNER_DATA_DIR")]
    Locked(PathBuf),
    /// The archive does not fit in what the folder may take.
    #[error("the runner's storage is full: {bytes} more bytes would take paused sessions and snapshots past RUNNER_MAX_STORED_BYTES ({max}; {used} in use); delete snapshots or paused sessions")]
    Full {
        /// The archive's bytes.
        bytes: u64,
        /// The bytes in use.
        used: u64,
        /// The most.
        max: u64,
    },
}

/// What a runner starting on the folder finds there.
#[derive(Debug, Default)]
pub struct Found {
    /// The paused sessions.
    pub paused: Vec<PausedRecord>,
}

/// The data folder of one runner.
pub struct Store {
    config: StoreConfig,
    used: Mutex<u64>,
    snapshots: Mutex<HashMap<String, SnapshotRecord>>,
    next_incoming: AtomicU64,
    _lock: Flock<File>,
}

/// A folder being written under `incoming/`: removed when dropped, unless committed.
pub struct Incoming {
    dir: PathBuf,
    kept: std::sync::atomic::AtomicBool,
}

impl Incoming {
    /// The folder.
    pub fn folder(&self) -> &Path {
        &self.dir
    }

    /// Where its archive goes.
    pub fn archive(&self) -> PathBuf {
        self.dir.join(ARCHIVE)
    }

    /// Where a backend saves the sandbox whole (made, 0700, by [`Incoming::saved`]).
    pub fn saved_path(&self) -> PathBuf {
        self.dir.join(SAVED)
    }

    /// Makes the folder a backend saves the sandbox in, and gives it.
    pub fn saved(&self) -> Result<PathBuf, StoreError> {
        let dir = self.saved_path();
        make_dir(&dir)?;
        Ok(dir)
    }

    /// Removes what a backend saved (the archive stays).
    pub fn drop_saved(&self) {
        remove_dir(&self.saved_path());
    }

    /// The bytes of its archive and what a backend saved.
    pub fn bytes(&self) -> Result<u64, StoreError> {
        stored_bytes(&self.dir).map_err(io("reading", &self.dir))
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if self.kept.load(Ordering::SeqCst) {
            return;
        }
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.dir.display(), error = %e, "removing an unfinished archive");
            }
        }
    }
}

impl Store {
    /// Opens (making it, 0700) the folder, takes its lock, removes what a runner that
    /// stopped midway left in `incoming/`, and reads what it keeps.
    pub fn open(config: StoreConfig) -> Result<(Store, Found), StoreError> {
        // The folder itself is made 0700 if it is new, and left as it is otherwise: the
        // default, /var/lib/sandbox-runner, also holds the package store and the VM
        // images, which others read.
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&config.dir)
            .map_err(io("making", &config.dir))?;
        for sub in ["sessions", "snapshots", "incoming"] {
            make_dir(&config.dir.join(sub))?;
        }
        let lock_path = config.dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io("opening", &lock_path))?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|_| StoreError::Locked(config.dir.clone()))?;
        clear(&config.dir.join("incoming"))?;
        let store = Store {
            config,
            used: Mutex::new(0),
            snapshots: Mutex::new(HashMap::new()),
            next_incoming: AtomicU64::new(0),
            _lock: lock,
        };
        let mut found = Found::default();
        for (record, bytes) in store.read_all::<PausedRecord>("sessions", SESSION_RECORD, |r| &r.id)
        {
            *lock_(&store.used) += bytes;
            found.paused.push(record);
        }
        for (record, bytes) in
            store.read_all::<SnapshotRecord>("snapshots", SNAPSHOT_RECORD, |r| &r.snapshot_id)
        {
            *lock_(&store.used) += bytes;
            lock_(&store.snapshots).insert(record.snapshot_id.clone(), record);
        }
        Ok((store, found))
    }

    /// The settings.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The bytes archives take now.
    pub fn used(&self) -> u64 {
        *lock_(&self.used)
    }

    /// The bytes one more archive may take now.
    pub fn remaining(&self) -> u64 {
        self.config.max_bytes.saturating_sub(self.used())
    }

    /// A fresh folder to write an archive in.
    pub fn incoming(&self) -> Result<Incoming, StoreError> {
        let n = self.next_incoming.fetch_add(1, Ordering::SeqCst);
        let dir = self.config.dir.join("incoming").join(n.to_string());
        make_dir(&dir)?;
        Ok(Incoming {
            dir,
            kept: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A paused session's folder.
    pub fn session_folder(&self, id: &str) -> PathBuf {
        self.config.dir.join("sessions").join(id)
    }

    /// A paused session's archive.
    pub fn session_archive(&self, id: &str) -> PathBuf {
        self.session_folder(id).join(ARCHIVE)
    }

    /// A snapshot's record, if it exists.
    pub fn snapshot(&self, id: &str) -> Option<SnapshotRecord> {
        lock_(&self.snapshots).get(id).cloned()
    }

    /// Every snapshot, oldest first.
    pub fn snapshots(&self) -> Vec<SnapshotRecord> {
        let mut all: Vec<SnapshotRecord> = lock_(&self.snapshots).values().cloned().collect();
        all.sort_by(|a, b| {
            (a.created_at_ms, &a.snapshot_id).cmp(&(b.created_at_ms, &b.snapshot_id))
        });
        all
    }

    /// A snapshot's folder (the snapshot must exist: see [`snapshot`](Self::snapshot)).
    pub fn snapshot_folder(&self, id: &str) -> PathBuf {
        self.config.dir.join("snapshots").join(id)
    }

    /// A snapshot's archive (the snapshot must exist: see [`snapshot`](Self::snapshot)).
    pub fn snapshot_archive(&self, id: &str) -> PathBuf {
        self.snapshot_folder(id).join(ARCHIVE)
    }

    /// Where a backend saved a stored folder's sandbox whole (`folder` a paused
    /// session's, a snapshot's or an incoming one's), if it did.
    pub fn saved_in(folder: &Path) -> Option<PathBuf> {
        let saved = folder.join(SAVED);
        saved.is_dir().then_some(saved)
    }

    /// Puts a copy of `folder`'s archive, and of what a backend saved there, in
    /// `incoming`: hard links where it can (nothing stored is changed once written),
    /// else copies.
    pub fn copy_into(&self, folder: &Path, incoming: &Incoming) -> Result<(), StoreError> {
        link_or_copy(&folder.join(ARCHIVE), &incoming.archive())?;
        if let Some(saved) = Store::saved_in(folder) {
            let to = incoming.saved()?;
            for entry in fs::read_dir(&saved).map_err(io("reading", &saved))? {
                let entry = entry.map_err(io("reading", &saved))?;
                link_or_copy(&entry.path(), &to.join(entry.file_name()))?;
            }
        }
        Ok(())
    }

    /// Keeps `incoming`'s archive as the paused session `record.id` (replacing any);
    /// the record's `bytes` are set from the archive.
    pub fn commit_session(
        &self,
        incoming: &Incoming,
        record: &mut PausedRecord,
    ) -> Result<(), StoreError> {
        record.bytes = incoming.bytes()?;
        self.commit(
            incoming,
            record.bytes,
            record,
            SESSION_RECORD,
            "sessions",
            &record.id,
        )?;
        incoming.kept.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Keeps `incoming`'s archive as the snapshot `record.snapshot_id`; the record's
    /// `bytes` are set from the archive.
    pub fn commit_snapshot(
        &self,
        incoming: &Incoming,
        record: &mut SnapshotRecord,
    ) -> Result<(), StoreError> {
        let id = record.snapshot_id.clone();
        record.bytes = incoming.bytes()?;
        self.commit(
            incoming,
            record.bytes,
            record,
            SNAPSHOT_RECORD,
            "snapshots",
            &id,
        )?;
        incoming.kept.store(true, Ordering::SeqCst);
        lock_(&self.snapshots).insert(id, record.clone());
        Ok(())
    }

    /// Removes the snapshots taken `ttl` or longer before `now`; how many.
    pub fn expire_snapshots(&self, now: std::time::SystemTime, ttl: std::time::Duration) -> usize {
        let limit = epoch_ms(now).saturating_sub(ttl.as_millis() as u64);
        let old: Vec<String> = lock_(&self.snapshots)
            .values()
            .filter(|r| r.created_at_ms <= limit)
            .map(|r| r.snapshot_id.clone())
            .collect();
        for id in &old {
            tracing::info!(snapshot = %id, "snapshot expired");
            self.remove_snapshot(id);
        }
        old.len()
    }

    /// Rewrites the hosts paused session `id`'s record keeps (its grant changed while it
    /// was paused), its archive untouched: written beside the record, then renamed over
    /// it, so that a runner stopped midway finds one record or the other whole.
    pub fn set_session_egress(
        &self,
        id: &str,
        egress: Option<Vec<String>>,
    ) -> Result<(), StoreError> {
        let path = self.session_folder(id).join(SESSION_RECORD);
        let bytes = fs::read(&path).map_err(io("reading", &path))?;
        let mut record: PausedRecord =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Io {
                what: "reading",
                path: path.clone(),
                source: std::io::Error::other(e),
            })?;
        record.egress = egress;
        let fresh = path.with_extension("json.new");
        // One left by a runner stopped midway.
        let _ = fs::remove_file(&fresh);
        write_record(&fresh, &record)?;
        fs::rename(&fresh, &path).map_err(io("renaming", &fresh))
    }

    /// Removes a paused session's folder.
    pub fn remove_session(&self, id: &str) {
        self.remove("sessions", id);
    }

    /// Removes a snapshot; false if there was none.
    pub fn remove_snapshot(&self, id: &str) -> bool {
        if lock_(&self.snapshots).remove(id).is_none() {
            return false;
        }
        self.remove("snapshots", id);
        true
    }

    /// Counts the archive's `bytes` against the bound, writes the record, and renames
    /// the folder into place. On error the folder stays in `incoming/` (the caller's
    /// [`Incoming`] removes it).
    fn commit<R: serde::Serialize>(
        &self,
        incoming: &Incoming,
        bytes: u64,
        record: &R,
        record_name: &str,
        kind: &str,
        id: &str,
    ) -> Result<(), StoreError> {
        let archive = incoming.archive();
        {
            let mut used = lock_(&self.used);
            if *used + bytes > self.config.max_bytes {
                return Err(StoreError::Full {
                    bytes,
                    used: *used,
                    max: self.config.max_bytes,
                });
            }
            *used += bytes;
        }
        let written = write_record(&incoming.dir.join(record_name), record)
            .and_then(|()| sync(&archive))
            .and_then(|()| {
                let place = self.config.dir.join(kind).join(id);
                remove_dir(&place);
                fs::rename(&incoming.dir, &place).map_err(io("renaming", &incoming.dir))
            });
        if let Err(e) = written {
            *lock_(&self.used) -= bytes;
            return Err(e);
        }
        Ok(())
    }

    fn remove(&self, kind: &str, id: &str) {
        let place = self.config.dir.join(kind).join(id);
        let bytes = stored_bytes(&place).unwrap_or(0);
        remove_dir(&place);
        let mut used = lock_(&self.used);
        *used = used.saturating_sub(bytes);
    }

    /// Reads every record of `kind`, with its archive's bytes; a folder without a
    /// readable record and archive (a runner stopped midway) is removed.
    fn read_all<R: serde::de::DeserializeOwned>(
        &self,
        kind: &str,
        record_name: &str,
        id_of: impl Fn(&R) -> &String,
    ) -> Vec<(R, u64)> {
        let dir = self.config.dir.join(kind);
        let Ok(entries) = fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let place = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let read = fs::read(place.join(record_name))
                .ok()
                .and_then(|bytes| serde_json::from_slice::<R>(&bytes).ok())
                .filter(|record| *id_of(record) == name && valid_id(&name))
                .filter(|_| place.join(ARCHIVE).is_file())
                .zip(stored_bytes(&place).ok());
            match read {
                Some((record, bytes)) => found.push((record, bytes)),
                None => {
                    tracing::warn!(place = %place.display(), "removing an unreadable stored folder");
                    remove_dir(&place);
                }
            }
        }
        found
    }
}

/// An id the store may make a folder of: what [`crate::lifecycle::random_id`] draws.
pub fn valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What a stored folder counts against the bound: its archive, and what a backend saved
/// (its record, a few hundred bytes, is not counted).
fn stored_bytes(folder: &Path) -> std::io::Result<u64> {
    let archive = fs::symlink_metadata(folder.join(ARCHIVE))?.len();
    let saved = match Store::saved_in(folder) {
        Some(saved) => folder_bytes(&saved)?,
        None => 0,
    };
    Ok(archive + saved)
}

/// The bytes of the regular files in `dir` and its folders (the store's own: no link is
/// followed).
fn folder_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.path().symlink_metadata()?;
        if meta.is_dir() {
            total += folder_bytes(&entry.path())?;
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

fn link_or_copy(from: &Path, to: &Path) -> Result<(), StoreError> {
    if fs::hard_link(from, to).is_err() {
        fs::copy(from, to).map_err(io("copying", from))?;
    }
    Ok(())
}

fn make_dir(dir: &Path) -> Result<(), StoreError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io("making", dir))?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io("securing", dir))
}

fn clear(dir: &Path) -> Result<(), StoreError> {
    for entry in fs::read_dir(dir).map_err(io("reading", dir))?.flatten() {
        remove_dir(&entry.path());
    }
    Ok(())
}

fn remove_dir(dir: &Path) {
    if let Err(e) = fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "removing a stored folder");
        }
    }
}

fn write_record<R: serde::Serialize>(path: &Path, record: &R) -> Result<(), StoreError> {
    let json = serde_json::to_vec(record).map_err(|e| StoreError::Io {
        what: "writing",
        path: path.to_owned(),
        source: std::io::Error::other(e),
    })?;
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(io("writing", path))?;
    file.write_all(&json)
        .and_then(|()| file.sync_all())
        .map_err(io("writing", path))
}

fn sync(path: &Path) -> Result<(), StoreError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io("syncing", path))
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Io { what, path, source }
}

fn lock_<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
