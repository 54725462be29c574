//! Pausing, waking and forking over the fake backend, in paused time: what is packed and
//! unpacked, which sandboxes are destroyed, what counts against the maximum.

use super::*;
use sandbox_protocol::snapshot::SessionState;

/// The test settings, idle sessions pausing.
fn pausing() -> SessionConfig {
    SessionConfig {
        on_idle: OnIdle::Pause,
        ..config()
    }
}

#[tokio::test(start_paused = true)]
async fn a_paused_session_has_no_sandbox_and_its_next_run_wakes_it() {
    let fake = Fake::new();
    let (pool, sessions) = start(&fake).await;
    let id = open(&pool, &sessions).await.id;
    let paused = sessions.pause(&id).await.expect("paused");
    assert_eq!(
        (paused.state, paused.bytes > 0),
        (SessionState::Paused, true)
    );
    assert_eq!(fake.log().packed.len(), 1);
    let kept = fake.log().packed[0];
    assert!(
        fake.log().destroyed.iter().any(|(n, _)| *n == kept),
        "its sandbox is gone"
    );
    assert_eq!(sessions.count(), 0, "a paused session counts for nothing");
    assert_eq!(
        sessions.info(&id).expect("info").state,
        SessionState::Paused
    );
    assert!(sessions.store().session_archive(&id).exists());

    let woken = sessions.run(&id, job(), None).await.expect("woken");
    assert!(woken.resumed && woken.job.state_lost, "{woken:?}");
    assert_eq!(fake.log().unpacked.len(), 1);
    assert_ne!(fake.log().unpacked[0], kept, "a fresh sandbox");
    assert!(
        !sessions.store().session_archive(&id).exists(),
        "its stored files go"
    );
    let next = sessions.run(&id, job(), None).await.expect("a run");
    assert!(!next.resumed, "only the first run after a wake says so");
    assert_eq!(sessions.count(), 1);
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_session_pauses_and_ends_at_the_paused_ttl() {
    let fake = Fake::new();
    let (pool, sessions) = start_with(&fake, pausing()).await;
    let id = open(&pool, &sessions).await.id;
    sleep(10 * SECOND).await;
    assert_eq!(sessions.reap().await, 1);
    assert_eq!(
        sessions.info(&id).expect("info").state,
        SessionState::Paused
    );
    sleep(99 * SECOND).await;
    assert_eq!(sessions.reap().await, 0, "the paused TTL is not over");
    tokio::time::advance(2 * SECOND).await;
    // The paused TTL is counted on the system's clock, which paused time does not move:
    // the pause is made to look older instead.
    if let Some(pause) = lock(&sessions.get(&id).expect("session").paused).as_mut() {
        pause.at -= 101 * SECOND;
    }
    assert_eq!(sessions.reap().await, 1);
    assert!(not_found(sessions.info(&id)));
    assert!(
        !sessions.store().session_archive(&id).exists(),
        "its files are removed"
    );
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn forks_start_paused_and_each_wakes_at_its_first_call() {
    let fake = Fake::new();
    let (pool, sessions) = start(&fake).await;
    let id = open(&pool, &sessions).await.id;
    let forks = sessions.fork(&id, 3).await.expect("forked");
    assert_eq!(forks.len(), 3);
    assert_eq!(fake.log().packed.len(), 1, "one pack for every copy");
    assert_eq!(sessions.count(), 1, "forks take no sandbox until used");
    for fork in &forks {
        assert_eq!(
            sessions.info(&fork.id).expect("info").state,
            SessionState::Paused
        );
    }
    let woken = sessions
        .run(&forks[1].id, job(), None)
        .await
        .expect("woken");
    assert!(woken.resumed);
    assert!(matches!(
        sessions.fork(&id, 0).await,
        Err(SessionError::BadRequest(_))
    ));
    assert!(matches!(
        sessions.fork(&id, MAX_FORKS + 1).await,
        Err(SessionError::BadRequest(_))
    ));
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn waking_counts_against_the_maximum_as_opening_does() {
    let fake = Fake::new();
    let (pool, sessions) = start(&fake).await;
    let first = open(&pool, &sessions).await.id;
    open(&pool, &sessions).await;
    sessions.pause(&first).await.expect("paused");
    open(&pool, &sessions).await;
    let refused = sessions.run(&first, job(), None).await;
    assert!(
        matches!(refused, Err(SessionError::TooMany(2))),
        "{refused:?}"
    );
    assert_eq!(
        sessions.info(&first).expect("info").state,
        SessionState::Paused,
        "one that cannot be woken stays paused"
    );
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn a_session_its_backend_saves_whole_wakes_restored_with_its_state() {
    let fake = Fake::new();
    fake.log().saves_whole = true;
    let (pool, sessions) = start(&fake).await;
    let id = open(&pool, &sessions).await.id;
    sessions.pause(&id).await.expect("paused");
    let saved = fake.log().saved.clone();
    assert_eq!(saved.len(), 1, "saved whole beside its files");
    assert!(Store::saved_in(&sessions.store().session_folder(&id)).is_some());

    let woken = sessions.run(&id, job(), None).await.expect("woken");
    assert!(woken.resumed, "{woken:?}");
    assert!(!woken.job.state_lost, "restored whole: nothing lost");
    assert_eq!(fake.log().restored.len(), 1);
    assert!(
        fake.log().unpacked.is_empty(),
        "no files unpacked into a fresh one"
    );

    // A fork of an active session saves it, restores the original from the save, and
    // each fork is restored from its own copy.
    let forks = sessions.fork(&id, 2).await.expect("forked");
    assert_eq!(fake.log().saved.len(), 2);
    assert_eq!(
        fake.log().restored.len(),
        2,
        "the original went on, restored"
    );
    for fork in &forks {
        let woken = sessions.run(&fork.id, job(), None).await.expect("woken");
        assert!(woken.resumed && !woken.job.state_lost);
        sessions.close(&fork.id).await.expect("closed"); // two sessions at most
    }
    assert_eq!(fake.log().restored.len(), 4);
    finish(&fake, pool, &sessions).await;
}

/// A record of a session paused with `egress` granted.
fn record_granted(egress: Option<&[&str]>) -> PausedRecord {
    PausedRecord {
        id: "0123456789abcdef0123456789abcdef".into(),
        idle_timeout_ms: 10_000,
        ttl_ms: 60_000,
        runs: 1,
        paused_at_ms: crate::store::epoch_ms(std::time::SystemTime::now()),
        bytes: 0,
        memory: false,
        egress: egress.map(|names| names.iter().map(|n| n.to_string()).collect()),
        egress_bytes: 0,
    }
}

#[test]
fn a_session_found_paused_is_granted_only_what_the_runners_policy_allows_now() {
    let shown = |record: &PausedRecord, allow: &str| {
        let session = found_session::<FakeSandbox>(record, &egress_allowing(allow));
        session.info(100 * SECOND).egress
    };
    let saved = record_granted(Some(&["pypi.org", "*.pythonhosted.org"]));
    let both = Some(vec!["pypi.org".to_owned(), "*.pythonhosted.org".to_owned()]);
    assert_eq!(shown(&saved, "pypi.org,*.pythonhosted.org"), both);
    assert_eq!(
        shown(&saved, "pypi.org,files.pythonhosted.org"),
        Some(vec!["pypi.org".to_owned()]),
        "narrowed to what is still allowed"
    );
    assert_eq!(shown(&saved, ""), None, "egress off: nothing");
    let before_egress = record_granted(None);
    assert_eq!(
        shown(&before_egress, "pypi.org"),
        Some(Vec::new()),
        "saved without a grant: nothing, whatever is open now"
    );
    let saved_record = found_session::<FakeSandbox>(&saved, &egress_allowing("pypi.org"))
        .record(std::time::SystemTime::now(), false);
    assert_eq!(
        saved_record.egress,
        Some(vec!["pypi.org".to_owned()]),
        "its next pause saves what it has now"
    );
}

/// The bytes budget is the session's over its whole life: a session found paused goes
/// on counting from what its record saved, its next sandbox starts there (its own
/// counters, which a run's answer shows, start at zero), and so do its forks.
#[test]
fn a_session_found_paused_goes_on_counting_its_bytes() {
    let policy = egress_allowing("pypi.org");
    let record = PausedRecord {
        egress_bytes: 7000,
        ..record_granted(Some(&["pypi.org"]))
    };
    let session = found_session::<FakeSandbox>(&record, &policy);
    let limits = sandbox_egress::Limits {
        max_bytes: 10_000,
        max_connections: 4,
    };
    let handle = sandbox_egress::Egress::new(policy, limits).sandbox();
    lock(&session.egress).attach(Some(&handle));
    assert_eq!(handle.bytes_used(), 7000);
    assert_eq!(handle.usage().bytes_in, 0);
    assert_eq!(lock(&session.egress).for_fork().bytes_used(), 7000);
    let next = session.record(std::time::SystemTime::now(), false);
    assert_eq!(next.egress_bytes, 7000, "its next pause saves it again");
}

/// The hosts paused session `id`'s record keeps.
fn stored_egress(sessions: &Sessions<FakeSandbox>, id: &str) -> Option<Vec<String>> {
    let path = sessions.store().session_folder(id).join("session.json");
    let bytes = std::fs::read(path).expect("its record");
    let record: PausedRecord = serde_json::from_slice(&bytes).expect("a record");
    record.egress
}

#[tokio::test(start_paused = true)]
async fn a_grant_is_saved_with_the_pause_and_changed_while_paused() {
    let fake = Fake::new();
    let (pool, sessions) = start(&fake).await;
    let id = open(&pool, &sessions).await.id;
    let policy = egress_allowing("pypi.org,*.pythonhosted.org");
    let both = ["pypi.org".to_owned(), "*.pythonhosted.org".to_owned()];
    let grant = policy.grant(&both).expect("within the policy");
    sessions.set_egress(&id, grant).expect("set");
    sessions.pause(&id).await.expect("paused");
    assert_eq!(stored_egress(&sessions, &id), Some(both.to_vec()));
    let info = sessions
        .set_egress(&id, Grant::none())
        .expect("narrowed while paused");
    assert_eq!(info.egress, Some(Vec::new()));
    assert_eq!(
        stored_egress(&sessions, &id),
        Some(Vec::new()),
        "a restarted runner would give it nothing"
    );
    let woken = sessions.run(&id, job(), None).await.expect("woken");
    assert!(woken.resumed);
    assert_eq!(sessions.info(&id).expect("info").egress, Some(Vec::new()));
    finish(&fake, pool, &sessions).await;
}
