//! The sessions' state machine over a pool of the fake backend ([`crate::pool::tests::fake`]):
//! no root, no real sandbox, and paused time, so that idle timeouts and TTLs are exact.
//! Each test ends with the sessions closed and the pool shut down, and checks that every
//! sandbox made was destroyed exactly once.

use super::*;
use crate::backend::RunOutcome;
use crate::pool::tests::fake::{Fake, FakeError};
use crate::pool::{Pool, PoolConfig};
use sandbox_protocol::agent::{AgentMessage, FileRequest, Job};
use sandbox_protocol::language::Recipe;
use sandbox_protocol::Lang;
use tokio::time::sleep;

const SECOND: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// Idle 10 s and TTL 60 s unless asked; at most 20 s and 120 s; two sessions at once.
fn config() -> SessionConfig {
    SessionConfig {
        idle: 10 * SECOND,
        ttl: 60 * SECOND,
        max_idle: 20 * SECOND,
        max_ttl: 120 * SECOND,
        max_sessions: 2,
        file_cap_bytes: 1024,
        process_output_bytes: 1024,
        max_processes: 2,
        on_idle: OnIdle::End,
        paused_ttl: 100 * SECOND,
        snapshot_ttl: 100 * SECOND,
    }
}

/// The pool, and the data folder the sessions keep their files in.
struct Harness {
    pool: Arc<Pool<Fake>>,
    _data: tempfile::TempDir,
}

/// A pool of two fake sandboxes, and the sessions.
async fn start(fake: &Fake) -> (Harness, Arc<Sessions<FakeSandbox>>) {
    start_with(fake, config()).await
}

/// [`start`] with `config`.
async fn start_with(fake: &Fake, config: SessionConfig) -> (Harness, Arc<Sessions<FakeSandbox>>) {
    let pool_config = PoolConfig {
        size: 2,
        queue_size: 4,
        queue_timeout: SECOND,
    };
    let pool = Pool::start(
        Arc::new(fake.clone()),
        pool_config,
        vec![Lang::PYTHON],
        false,
    )
    .await
    .expect("the pool starts");
    let pool = Arc::new(pool);
    let data = tempfile::tempdir().expect("a data folder");
    let (store, found) = Store::open(crate::store::StoreConfig {
        dir: data.path().to_owned(),
        max_bytes: 1 << 20,
        max_entries: 100,
    })
    .expect("the store opens");
    let acquire: Acquire<FakeSandbox> = {
        let pool = pool.clone();
        Arc::new(move || {
            let pool = pool.clone();
            Box::pin(async move { Ok(pool.acquire(&Lang::BASH, false).await?.keep()) })
        })
    };
    let restore: Restore<FakeSandbox> = {
        let pool = pool.clone();
        Arc::new(move |dir| {
            let pool = pool.clone();
            Box::pin(async move { pool.restore(&dir).await.map_err(|e| e.to_string()) })
        })
    };
    let sessions = Sessions::new(
        config,
        Arc::new(store),
        acquire,
        restore,
        found.paused,
        &egress_allowing(""),
    );
    (Harness { pool, _data: data }, Arc::new(sessions))
}

type FakeSandbox = crate::pool::tests::fake::FakeSandbox;

/// A runner's egress policy opening `allow` (empty: egress off).
fn egress_allowing(allow: &str) -> Policy {
    Policy::parse(allow, "").expect("a valid policy")
}

/// Ends every session, shuts the pool down, and checks that nothing was left.
async fn finish(fake: &Fake, harness: Harness, sessions: &Sessions<FakeSandbox>) {
    let ids: Vec<String> = lock(&sessions.table).keys().cloned().collect();
    for id in ids {
        let _ = sessions.close(&id).await;
    }
    assert_eq!(sessions.count(), 0);
    harness.pool.shutdown().await;
    fake.assert_all_destroyed_once();
}

/// A session's job, as the runner makes it (`Place::Session`).
fn job() -> Job {
    Job {
        lang: Lang::BASH,
        recipe: Recipe {
            file: "main.sh".into(),
            compile: Vec::new(),
            run: vec!["bash".into()],
            env: Default::default(),
            compile_timeout_ms: 0,
            loader: None,
            memory_mb: None,
        },
        code: "echo 1".into(),
        timeout_ms: 1000,
        stdout_cap: 1024,
        stderr_cap: 1024,
        session: true,
        sigstop_between_runs: false,
        outputs: None,
        python_paths: Vec::new(),
        stream: false,
        tools: None,
    }
}

async fn open(_pool: &Harness, sessions: &Arc<Sessions<FakeSandbox>>) -> SessionInfo {
    sessions
        .open(CreateSession::default(), None)
        .await
        .expect("a session")
}

/// A run of session `id` in a task of its own, once it holds the session.
async fn held_run(
    sessions: &Arc<Sessions<FakeSandbox>>,
    id: &str,
) -> tokio::task::JoinHandle<Result<RunOutcome, SessionError>> {
    let task = run_in_task(sessions, id);
    until("the run holds the session", || {
        sessions.info(id).is_ok_and(|i| i.busy)
    })
    .await;
    task
}

/// A run of session `id` in a task of its own.
fn run_in_task(
    sessions: &Arc<Sessions<FakeSandbox>>,
    id: &str,
) -> tokio::task::JoinHandle<Result<RunOutcome, SessionError>> {
    let (sessions, id) = (sessions.clone(), id.to_owned());
    tokio::spawn(async move { sessions.run(&id, job(), None).await })
}

/// Lets other tasks run, without moving the clock, until `done` says so.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..100 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never: {what}");
}

fn not_found<T: std::fmt::Debug>(result: Result<T, SessionError>) -> bool {
    matches!(result, Err(SessionError::NotFound(_)))
}

/// Waits (in paused time) until the pool has both its sandboxes warm.
async fn until_warm(pool: &Pool<Fake>) {
    for _ in 0..10_000 {
        if pool.state().available == 2 {
            return;
        }
        tokio::time::sleep(MS).await;
    }
    panic!("the pool never warmed: {:?}", pool.state());
}

#[tokio::test(start_paused = true)]
async fn a_session_opens_runs_in_its_own_sandbox_and_closes() {
    let fake = Fake::new();
    let (pool, sessions) = start(&fake).await;
    let info = open(&pool, &sessions).await;
    assert_eq!(info.id.len(), 32, "128 random bits: {}", info.id);
    assert_eq!(
        (info.runs, info.busy, info.idle_timeout_ms),
        (0, false, 10_000)
    );
    assert!(
        info.expires_at.ends_with('Z'),
        "RFC 3339, UTC: {}",
        info.expires_at
    );
    let first = sessions.run(&info.id, job(), None).await.expect("a run");
    let second = sessions.run(&info.id, job(), None).await.expect("a run");
    assert_eq!(
        first.job.stdout, second.job.stdout,
        "both runs went to the session's sandbox"
    );
    assert_eq!(sessions.info(&info.id).expect("open").runs, 2);
    let answer = sessions
        .file(
            &info.id,
            FileRequest::List {
                limit: 1,
                max_bytes: 1,
            },
        )
        .await;
    assert!(matches!(answer, Ok(AgentMessage::Stored)), "{answer:?}");
    sessions.close(&info.id).await.expect("closed");
    assert!(not_found(sessions.info(&info.id)));
    assert!(not_found(sessions.run(&info.id, job(), None).await));
    assert!(not_found(sessions.close(&info.id).await));
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn one_call_at_a_time_the_second_is_refused_not_queued() {
    let fake = Fake::new();
    fake.log().run_time = 2 * SECOND;
    let (pool, sessions) = start(&fake).await;
    let id = open(&pool, &sessions).await.id;
    let running = held_run(&sessions, &id).await;
    let busy = sessions.run(&id, job(), None).await;
    assert!(matches!(busy, Err(SessionError::Busy(_))), "{busy:?}");
    let busy = sessions
        .file(
            &id,
            FileRequest::List {
                limit: 1,
                max_bytes: 1,
            },
        )
        .await;
    assert!(matches!(busy, Err(SessionError::Busy(_))), "{busy:?}");
    running.await.expect("task").expect("the first run");
    let info = sessions.info(&id).expect("open");
    assert_eq!((info.busy, info.runs), (false, 1));
    sessions.run(&id, job(), None).await.expect("the next run");
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn durations_out_of_range_are_refused_before_a_sandbox_is_taken() {
    let fake = Fake::new();
    let (pool, sessions) = start(&fake).await;
    until_warm(&pool.pool).await;
    let made = fake.log().made.len();
    for (idle, ttl) in [
        (Some(0), None),
        (Some(20_001), None),
        (None, Some(0)),
        (None, Some(120_001)),
    ] {
        let asked = CreateSession {
            idle_timeout_ms: idle,
            ttl_ms: ttl,
            ..CreateSession::default()
        };
        let refused = sessions.open(asked, None).await;
        assert!(
            matches!(refused, Err(SessionError::BadRequest(_))),
            "{idle:?} {ttl:?}: {refused:?}"
        );
    }
    assert_eq!(pool.pool.state().available, 2, "no sandbox was taken");
    assert_eq!(fake.log().made.len(), made);
    let longest = CreateSession {
        idle_timeout_ms: Some(20_000),
        ttl_ms: Some(120_000),
        ..CreateSession::default()
    };
    let info = sessions
        .open(longest, None)
        .await
        .expect("the maxima are taken");
    assert_eq!(info.idle_timeout_ms, 20_000);
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn at_the_most_sessions_another_is_refused_until_one_ends() {
    let fake = Fake::new();
    let (pool, sessions) = start(&fake).await;
    let first = open(&pool, &sessions).await;
    open(&pool, &sessions).await;
    let refused = sessions.open(CreateSession::default(), None).await;
    assert!(
        matches!(refused, Err(SessionError::TooMany(2))),
        "{refused:?}"
    );
    sessions.close(&first.id).await.expect("closed");
    open(&pool, &sessions).await;
    assert_eq!(sessions.count(), 2);
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_session_ends_at_its_idle_timeout_and_a_used_one_at_its_ttl() {
    let fake = Fake::new();
    let (pool, sessions) = start(&fake).await;
    let idle = open(&pool, &sessions).await.id;
    let used = open(&pool, &sessions).await.id;
    sleep(6 * SECOND).await;
    sessions.run(&used, job(), None).await.expect("a run");
    sleep(4 * SECOND - MS).await;
    assert_eq!(sessions.reap().await, 0, "idle for just under 10 s");
    sleep(MS).await;
    assert_eq!(sessions.reap().await, 1, "idle for 10 s");
    assert!(not_found(sessions.info(&idle)));
    assert!(sessions.info(&used).is_ok(), "used 4 s ago");
    for _ in 0..5 {
        sleep(9 * SECOND).await;
        sessions.run(&used, job(), None).await.expect("a run");
    }
    sleep(5 * SECOND - MS).await;
    assert_eq!(
        sessions.reap().await,
        0,
        "used 5 s ago, just before its TTL"
    );
    sleep(MS).await;
    assert_eq!(sessions.reap().await, 1, "its TTL ends it, however used");
    assert!(not_found(sessions.info(&used)));
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn a_run_in_flight_is_never_idle_but_ends_at_the_ttl() {
    let fake = Fake::new();
    fake.log().run_time = 100 * SECOND;
    let (pool, sessions) = start(&fake).await;
    let id = open(&pool, &sessions).await.id;
    let running = run_in_task(&sessions, &id);
    sleep(30 * SECOND).await;
    assert_eq!(sessions.reap().await, 0, "busy: not idle");
    sleep(30 * SECOND).await;
    assert_eq!(sessions.reap().await, 1, "its TTL ends it, run or not");
    let stopped = running.await.expect("task");
    assert!(not_found(stopped), "the run in flight stopped");
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_that_fails_ends_its_session() {
    let fake = Fake::new();
    let (pool, sessions) = start(&fake).await;
    let id = open(&pool, &sessions).await.id;
    fake.log().fail_runs = true;
    let failed = sessions.run(&id, job(), None).await;
    match failed {
        Err(SessionError::Sandbox(message)) => {
            assert_eq!(message, FakeError::Run.to_string())
        }
        other => panic!("{other:?}"),
    }
    assert!(not_found(sessions.info(&id)), "the session has ended");
    assert_eq!(sessions.count(), 0);
    finish(&fake, pool, &sessions).await;
}

#[tokio::test(start_paused = true)]
async fn closing_a_session_stops_its_run_and_destroys_its_sandbox_first() {
    let fake = Fake::new();
    fake.log().run_time = 100 * SECOND;
    let (pool, sessions) = start(&fake).await;
    let id = open(&pool, &sessions).await.id;
    let running = held_run(&sessions, &id).await;
    let destroyed = fake.log().destroyed.len();
    sessions.close(&id).await.expect("closed");
    assert_eq!(
        fake.log().destroyed.len(),
        destroyed + 1,
        "destroyed before close returned"
    );
    assert!(not_found(running.await.expect("task")));
    assert!(fake.log().finished.is_empty(), "the run never finished");
    finish(&fake, pool, &sessions).await;
}

#[test]
fn file_paths_stay_inside_the_home_folder_by_their_words() {
    for good in ["a", "a/b.txt", "./a", "outputs/plot.png", "a/./b"] {
        assert!(check_path(good).is_ok(), "{good:?}");
    }
    let long = "a".repeat(4097);
    for bad in [
        "",
        ".",
        "..",
        "../a",
        "a/../../b",
        "/etc/passwd",
        "a\0b",
        long.as_str(),
    ] {
        assert!(
            matches!(check_path(bad), Err(SessionError::BadPath(_))),
            "{bad:?}"
        );
    }
}

mod pause;
