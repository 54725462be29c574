use super::*;
use std::os::unix::fs::PermissionsExt;

fn config(dir: &Path, max_bytes: u64) -> StoreConfig {
    StoreConfig {
        dir: dir.to_owned(),
        max_bytes,
        max_entries: 100,
    }
}

fn paused(id: &str) -> PausedRecord {
    PausedRecord {
        id: id.to_owned(),
        idle_timeout_ms: 1000,
        ttl_ms: 2000,
        runs: 3,
        paused_at_ms: 4,
        bytes: 0,
        memory: false,
        egress: Some(vec!["pypi.org".to_owned()]),
        egress_bytes: 5000,
    }
}

fn incoming_with(store: &Store, bytes: usize) -> Incoming {
    let incoming = store.incoming().expect("incoming");
    fs::write(incoming.archive(), vec![7u8; bytes]).expect("archive");
    incoming
}

const ID: &str = "0123456789abcdef0123456789abcdef";
const OTHER: &str = "fedcba9876543210fedcba9876543210";

#[test]
fn a_paused_session_is_found_again_by_the_next_runner() {
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().join("data");
    {
        let (store, found) = Store::open(config(&root, 1 << 20)).expect("open");
        assert!(found.paused.is_empty());
        let mut record = paused(ID);
        store
            .commit_session(&incoming_with(&store, 100), &mut record)
            .expect("commit");
        assert_eq!(record.bytes, 100);
        assert_eq!(store.used(), 100);
        let mode = fs::metadata(store.session_archive(ID)).expect("archive");
        assert_eq!(mode.len(), 100);
    }
    let (store, found) = Store::open(config(&root, 1 << 20)).expect("open again");
    assert_eq!(found.paused.len(), 1);
    assert_eq!(found.paused[0].runs, 3);
    assert_eq!(found.paused[0].bytes, 100);
    assert_eq!(found.paused[0].egress, Some(vec!["pypi.org".to_owned()]));
    assert_eq!(found.paused[0].egress_bytes, 5000);
    assert_eq!(store.used(), 100);
    store.remove_session(ID);
    assert_eq!(store.used(), 0);
    assert!(!store.session_archive(ID).exists());
}

#[test]
fn a_record_of_a_runner_before_egress_reads_as_granted_nothing() {
    let old = r#"{"id":"x","idleTimeoutMs":1,"ttlMs":2,"runs":0,"pausedAtMs":3,"bytes":4}"#;
    let record: PausedRecord = serde_json::from_str(old).expect("an older record");
    assert_eq!(record.egress, None);
    assert_eq!(record.egress_bytes, 0);
    let none = PausedRecord {
        egress: None,
        egress_bytes: 0,
        ..paused(ID)
    };
    let written = serde_json::to_string(&none).expect("a record");
    assert!(!written.contains("egress"), "{written}");
}

#[test]
fn a_paused_sessions_hosts_are_rewritten_in_its_record() {
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().join("data");
    {
        let (store, _) = Store::open(config(&root, 1 << 20)).expect("open");
        let mut record = paused(ID);
        store
            .commit_session(&incoming_with(&store, 10), &mut record)
            .expect("commit");
        store
            .set_session_egress(ID, Some(Vec::new()))
            .expect("rewritten");
        assert!(
            store.set_session_egress(OTHER, None).is_err(),
            "no such session"
        );
    }
    let (_, found) = Store::open(config(&root, 1 << 20)).expect("open again");
    assert_eq!(found.paused.len(), 1);
    assert_eq!(found.paused[0].egress, Some(Vec::new()));
    assert_eq!((found.paused[0].runs, found.paused[0].bytes), (3, 10));
}

#[test]
fn folders_are_the_runner_s_alone() {
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().join("data");
    let (store, _) = Store::open(config(&root, 1 << 20)).expect("open");
    for sub in ["", "sessions", "snapshots", "incoming"] {
        // "": the folder, new here, is made 0700.
        let mode = fs::metadata(root.join(sub))
            .expect("folder")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{sub}");
    }
    let mut record = paused(ID);
    store
        .commit_session(&incoming_with(&store, 1), &mut record)
        .expect("commit");
    let record_mode = fs::metadata(root.join("sessions").join(ID).join(SESSION_RECORD))
        .expect("record")
        .permissions()
        .mode();
    assert_eq!(record_mode & 0o777, 0o600);
}

#[test]
fn a_second_runner_on_the_same_folder_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let (_store, _) = Store::open(config(dir.path(), 1 << 20)).expect("open");
    match Store::open(config(dir.path(), 1 << 20)) {
        Err(StoreError::Locked(_)) => {}
        Err(e) => panic!("not the lock: {e}"),
        Ok(_) => panic!("two runners on one folder"),
    }
}

#[test]
fn an_archive_past_the_bound_is_refused_and_removed() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, _) = Store::open(config(dir.path(), 150)).expect("open");
    let mut record = paused(ID);
    store
        .commit_session(&incoming_with(&store, 100), &mut record)
        .expect("fits");
    assert_eq!(store.remaining(), 50);
    let mut snapshot = SnapshotRecord {
        snapshot_id: OTHER.to_owned(),
        session_id: ID.to_owned(),
        created_at_ms: 1,
        bytes: 0,
        memory: false,
    };
    match store.commit_snapshot(&incoming_with(&store, 51), &mut snapshot) {
        Err(StoreError::Full {
            bytes: 51,
            used: 100,
            max: 150,
        }) => {}
        other => panic!("not refused: {other:?}"),
    }
    assert_eq!(store.used(), 100);
    assert!(store.snapshot(OTHER).is_none());
    let left = fs::read_dir(dir.path().join("incoming"))
        .expect("incoming")
        .count();
    assert_eq!(left, 0, "the refused archive is removed");
}

#[test]
fn what_a_stopped_runner_left_midway_is_removed_at_the_next_start() {
    let dir = tempfile::tempdir().expect("dir");
    {
        let (store, _) = Store::open(config(dir.path(), 1 << 20)).expect("open");
        let incoming = incoming_with(&store, 10);
        std::mem::forget(incoming); // as if the runner were killed while writing
        make_dir(&dir.path().join("sessions").join(OTHER)).expect("a folder without record");
        make_dir(&dir.path().join("snapshots").join("..bad")).expect("a bad name");
    }
    let (store, found) = Store::open(config(dir.path(), 1 << 20)).expect("open again");
    assert!(found.paused.is_empty());
    assert_eq!(store.used(), 0);
    for sub in ["incoming", "sessions", "snapshots"] {
        let left = fs::read_dir(dir.path().join(sub)).expect("folder").count();
        assert_eq!(left, 0, "{sub}");
    }
}

#[test]
fn snapshots_expire_and_copies_share_nothing_the_original_needs() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, _) = Store::open(config(dir.path(), 1 << 20)).expect("open");
    let mut snapshot = SnapshotRecord {
        snapshot_id: OTHER.to_owned(),
        session_id: ID.to_owned(),
        created_at_ms: epoch_ms(std::time::SystemTime::now()),
        bytes: 0,
        memory: false,
    };
    store
        .commit_snapshot(&incoming_with(&store, 10), &mut snapshot)
        .expect("snapshot");
    let copy = store.incoming().expect("incoming");
    store
        .copy_into(&store.snapshot_folder(OTHER), &copy)
        .expect("copy");
    let mut record = paused(ID);
    store.commit_session(&copy, &mut record).expect("commit");
    assert_eq!(store.used(), 20);
    let day = std::time::Duration::from_secs(86_400);
    assert_eq!(store.expire_snapshots(std::time::SystemTime::now(), day), 0);
    let later = std::time::SystemTime::now() + 2 * day;
    assert_eq!(store.expire_snapshots(later, day), 1);
    assert!(store.snapshot(OTHER).is_none());
    assert_eq!(fs::read(store.session_archive(ID)).expect("copy").len(), 10);
    assert_eq!(store.used(), 10);
}

#[test]
fn an_existing_folder_keeps_its_mode_for_what_else_it_holds() {
    // The default folder, /var/lib/sandbox-runner, also holds the package store, which
    // an ordinary user's runner reads: opening the store must not close it.
    let dir = tempfile::tempdir().expect("dir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let (_store, _) = Store::open(config(dir.path(), 1 << 20)).expect("open");
    let mode = fs::metadata(dir.path())
        .expect("folder")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
}
