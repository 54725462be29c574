//! The pool against a fake backend ([`fake`]): no root, no real sandbox, and paused
//! time, so that every delay is exact. Each test ends with a shutdown and checks that
//! every sandbox made was destroyed exactly once.

mod data_stack;
pub(crate) mod fake;

use super::*;
use fake::{Fake, FakeError};
use std::future::pending;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

fn config(size: usize) -> PoolConfig {
    PoolConfig {
        size,
        queue_size: 4,
        queue_timeout: Duration::from_secs(1),
    }
}

async fn start(fake: &Fake, config: PoolConfig) -> Arc<Pool<Fake>> {
    let pool = Pool::start(Arc::new(fake.clone()), config, warm(), false).await;
    Arc::new(pool.expect("the pool starts"))
}

/// The languages the fake's sandboxes can be prepared for.
fn warm() -> Vec<Lang> {
    vec![Lang::PYTHON, Lang::NODE]
}

/// A job in `lang`, one-shot, with small caps (the channel's tests use it too).
pub(crate) fn job(lang: Lang) -> Job {
    Job {
        lang,
        recipe: sandbox_protocol::language::Recipe {
            file: "main".into(),
            compile: Vec::new(),
            run: vec!["true".into()],
            env: Default::default(),
            compile_timeout_ms: 0,
            loader: None,
            memory_mb: None,
        },
        code: String::new(),
        timeout_ms: 1000,
        stdout_cap: 1024,
        stderr_cap: 1024,
        session: false,
        sigstop_between_runs: false,
        outputs: None,
        python_paths: Vec::new(),
        stream: false,
        tools: None,
    }
}

/// Waits (in paused time: the clock moves only when every task waits) until the pool
/// has `n` warm sandboxes.
async fn until_warm(pool: &Pool<Fake>, n: usize) {
    for _ in 0..10_000 {
        if pool.state().available == n {
            return;
        }
        tokio::time::sleep(MS).await;
    }
    panic!("the pool never had {n} warm sandboxes: {:?}", pool.state());
}

/// Lets the other tasks run, without moving the clock, until `n` requests wait.
async fn until_waiting(pool: &Pool<Fake>, n: usize) {
    for _ in 0..100 {
        if pool.state().waiting == n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{n} requests never waited: {:?}", pool.state());
}

/// A request that waits in a task of its own.
fn request(pool: &Arc<Pool<Fake>>, lang: Lang) -> JoinHandle<Result<Lease<Fake>, AcquireError>> {
    let pool = pool.clone();
    tokio::spawn(async move { pool.acquire(&lang, false).await })
}

/// Runs the job of a lease to its end.
async fn run(lease: Lease<Fake>, lang: Lang) -> Result<RunOutcome, FakeError> {
    lease
        .run(job(lang), None, None, pending())
        .await
        .expect("not cancelled")
}

/// Shuts the pool down, failing rather than hanging if the shutdown never ends.
async fn shutdown(pool: &Pool<Fake>) {
    let ends = tokio::time::timeout(Duration::from_secs(600), pool.shutdown()).await;
    ends.expect("the shutdown ends");
}

async fn shut(pool: &Pool<Fake>, fake: &Fake) {
    shutdown(pool).await;
    fake.assert_all_destroyed_once();
}

#[tokio::test(start_paused = true)]
async fn the_first_sandbox_is_made_at_start_then_the_fillers_fill_every_slot() {
    let fake = Fake::new();
    fake.log().create_time = 10 * MS;
    let t0 = Instant::now();
    let pool = start(&fake, config(3)).await;
    assert_eq!(t0.elapsed(), 10 * MS, "start waits for the first sandbox");
    assert_eq!(fake.log().made, [Some(Lang::PYTHON)]);
    assert_eq!(pool.state().available, 1);
    until_warm(&pool, 3).await;
    assert!(
        t0.elapsed() < 30 * MS,
        "two fillers make the rest side by side"
    );
    let made = fake.log().made.clone();
    assert_eq!(made.len(), 3);
    assert!(
        made.contains(&Some(Lang::NODE)) && made.contains(&None),
        "{made:?}"
    );
    assert!(pool.state().failing.is_none());
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_start_whose_first_creation_fails_returns_the_error_and_shuts_the_backend() {
    let fake = Fake::new();
    fake.log().fail_creations = 1;
    let result = Pool::start(Arc::new(fake.clone()), config(2), warm(), false).await;
    assert_eq!(result.err(), Some(FakeError::Create));
    assert_eq!(fake.log().shutdowns.len(), 1, "the backend was shut down");
    tokio::time::sleep(10 * RETRY_DELAY).await;
    assert_eq!(fake.log().attempts.len(), 1, "no filler was started");
    fake.assert_all_destroyed_once();
}

#[tokio::test(start_paused = true)]
async fn a_request_past_a_full_queue_is_refused_at_once() {
    let fake = Fake::new();
    let pool = start(
        &fake,
        PoolConfig {
            queue_size: 1,
            ..config(1)
        },
    )
    .await;
    let lease = pool
        .acquire(&Lang::BASH, false)
        .await
        .expect("the warm sandbox");
    let waiter = request(&pool, Lang::BASH);
    until_waiting(&pool, 1).await;
    let t0 = Instant::now();
    match pool.acquire(&Lang::BASH, false).await {
        Err(AcquireError::QueueFull { size: 1, queue: 1 }) => {}
        other => panic!("expected QueueFull, got {:?}", other.map(|_| ())),
    }
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(
        pool.state().waiting,
        1,
        "the refused request left the queue"
    );
    run(lease, Lang::BASH).await.expect("ran");
    let lease = waiter.await.unwrap().expect("the waiter gets the refill");
    run(lease, Lang::BASH).await.expect("ran");
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_at_most_the_queue_timeout() {
    let fake = Fake::new();
    let pool = start(&fake, config(1)).await;
    let lease = pool
        .acquire(&Lang::BASH, false)
        .await
        .expect("the warm sandbox");
    let t0 = Instant::now();
    match pool.acquire(&Lang::BASH, false).await {
        Err(AcquireError::Timeout(timeout)) => assert_eq!(timeout, Duration::from_secs(1)),
        other => panic!("expected Timeout, got {:?}", other.map(|_| ())),
    }
    assert_eq!(t0.elapsed(), Duration::from_secs(1));
    assert_eq!(pool.state().waiting, 0);
    run(lease, Lang::BASH).await.expect("ran");
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_request_takes_a_sandbox_prepared_for_its_language_else_an_unprepared_one_else_any() {
    let fake = Fake::new();
    let pool = start(&fake, config(3)).await;
    until_warm(&pool, 3).await;
    let mut leases = Vec::new();
    for expected in [Some(Lang::NODE), None, Some(Lang::PYTHON)] {
        let lease = pool
            .acquire(&Lang::NODE, false)
            .await
            .expect("a warm sandbox");
        assert_eq!(lease.warm.prepared.lang, expected);
        assert_eq!(fake.log().made[lease.warm.sandbox.id], expected);
        leases.push(lease);
    }
    for lease in leases {
        run(lease, Lang::NODE).await.expect("ran");
    }
    until_warm(&pool, 3).await;
    assert_eq!(
        fake.log().made[3..],
        [const { Some(Lang::NODE) }; 3],
        "the refills follow the requests"
    );
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn the_refill_is_prepared_for_the_language_of_the_request() {
    let fake = Fake::new();
    let pool = start(&fake, config(1)).await;
    let lease = pool
        .acquire(&Lang::BASH, false)
        .await
        .expect("the warm sandbox");
    assert_eq!(
        lease.warm.prepared.lang,
        Some(Lang::PYTHON),
        "any, when no better"
    );
    run(lease, Lang::BASH).await.expect("ran");
    until_warm(&pool, 1).await;
    let lease = pool
        .acquire(&Lang::PYTHON, false)
        .await
        .expect("the refill");
    assert_eq!(lease.warm.prepared.lang, None, "bash needs no preparation");
    run(lease, Lang::PYTHON).await.expect("ran");
    until_warm(&pool, 1).await;
    assert_eq!(
        fake.log().made,
        [Some(Lang::PYTHON), None, Some(Lang::PYTHON)]
    );
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_spent_sandbox_is_destroyed_after_refill_defer_while_others_are_warm() {
    let fake = Fake::new();
    let pool = start(&fake, config(2)).await;
    until_warm(&pool, 2).await;
    let lease = pool
        .acquire(&Lang::PYTHON, false)
        .await
        .expect("a warm sandbox");
    let id = lease.warm.sandbox.id;
    run(lease, Lang::PYTHON).await.expect("ran");
    let ended = Instant::now();
    until_warm(&pool, 2).await;
    assert_eq!(fake.log().destroyed_at(id) - ended, REFILL_DEFER);
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_spent_sandbox_is_destroyed_at_once_when_none_is_warm_or_a_request_waits() {
    let fake = Fake::new();
    let pool = start(&fake, config(1)).await;
    let lease = pool
        .acquire(&Lang::BASH, false)
        .await
        .expect("the warm sandbox");
    let waiter = request(&pool, Lang::BASH);
    until_waiting(&pool, 1).await;
    run(lease, Lang::BASH).await.expect("ran");
    let ended = Instant::now();
    let lease = waiter.await.unwrap().expect("the refill");
    assert_eq!(fake.log().destroyed_at(0), ended, "a request waits");
    run(lease, Lang::BASH).await.expect("ran");
    let ended = Instant::now();
    until_warm(&pool, 1).await;
    assert_eq!(fake.log().destroyed_at(1), ended, "no sandbox is warm");
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_run_is_destroyed_at_once() {
    let fake = Fake::new();
    fake.log().fail_runs = true;
    let pool = start(&fake, config(2)).await;
    until_warm(&pool, 2).await;
    let lease = pool
        .acquire(&Lang::PYTHON, false)
        .await
        .expect("a warm sandbox");
    let id = lease.warm.sandbox.id;
    assert_eq!(run(lease, Lang::PYTHON).await, Err(FakeError::Run));
    let ended = Instant::now();
    until_warm(&pool, 2).await;
    assert_eq!(fake.log().destroyed_at(id), ended);
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_caller_left_is_stopped_and_its_sandbox_destroyed_at_once() {
    let fake = Fake::new();
    fake.log().run_time = Duration::from_secs(10);
    let pool = start(&fake, config(2)).await;
    until_warm(&pool, 2).await;
    let lease = pool
        .acquire(&Lang::PYTHON, false)
        .await
        .expect("a warm sandbox");
    let id = lease.warm.sandbox.id;
    let t0 = Instant::now();
    let result = lease
        .run(job(Lang::PYTHON), None, None, tokio::time::sleep(100 * MS))
        .await;
    assert!(result.is_none(), "a cancelled run answers nothing");
    assert_eq!(t0.elapsed(), 100 * MS);
    until_warm(&pool, 2).await;
    assert_eq!(fake.log().destroyed_at(id), t0 + 100 * MS);
    tokio::time::sleep(Duration::from_secs(20)).await;
    {
        let log = fake.log();
        assert_eq!(log.runs, [(id, Lang::PYTHON)]);
        assert!(log.finished.is_empty(), "the run was stopped: {log:?}");
    }
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_destroys_warm_sandboxes_waits_for_runs_then_shuts_the_backend() {
    let fake = Fake::new();
    fake.log().run_time = Duration::from_secs(1);
    let pool = start(&fake, config(2)).await;
    until_warm(&pool, 2).await;
    let lease = pool
        .acquire(&Lang::PYTHON, false)
        .await
        .expect("a warm sandbox");
    let running = lease.warm.sandbox.id;
    let in_flight = tokio::spawn(run(lease, Lang::PYTHON));
    tokio::task::yield_now().await;
    let t0 = Instant::now();
    shutdown(&pool).await;
    assert_eq!(
        t0.elapsed(),
        Duration::from_secs(1),
        "the run finished first"
    );
    assert!(in_flight.await.unwrap().is_ok(), "the run ended normally");
    {
        let log = fake.log();
        assert_eq!(
            log.destroyed_at(1 - running),
            t0,
            "the warm one goes at once"
        );
        assert_eq!(log.destroyed_at(running), t0 + Duration::from_secs(1));
        assert_eq!(log.made.len(), 2, "nothing made after the shutdown");
    }
    fake.assert_all_destroyed_once();
}

#[tokio::test(start_paused = true)]
async fn requests_waiting_at_shutdown_or_after_it_get_closed() {
    let fake = Fake::new();
    let pool = start(&fake, config(1)).await;
    let lease = pool
        .acquire(&Lang::BASH, false)
        .await
        .expect("the warm sandbox");
    let waiter = request(&pool, Lang::BASH);
    until_waiting(&pool, 1).await;
    let closing = tokio::spawn({
        let pool = pool.clone();
        async move { shutdown(&pool).await }
    });
    assert!(matches!(waiter.await.unwrap(), Err(AcquireError::Closed)));
    assert!(matches!(
        pool.acquire(&Lang::BASH, false).await,
        Err(AcquireError::Closed)
    ));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!closing.is_finished(), "shutdown waits for the lease's run");
    run(lease, Lang::BASH).await.expect("ran");
    closing.await.unwrap();
    fake.assert_all_destroyed_once();
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_being_made_at_shutdown_is_destroyed() {
    let fake = Fake::new();
    fake.log().create_time = 100 * MS;
    let pool = start(&fake, config(2)).await;
    tokio::task::yield_now().await;
    assert_eq!(fake.log().attempts.len(), 2, "the filler is making one");
    shutdown(&pool).await;
    assert_eq!(fake.log().made.len(), 2);
    assert_eq!(pool.state().available, 0);
    fake.assert_all_destroyed_once();
}

#[tokio::test(start_paused = true)]
async fn abort_runs_ends_the_runs_in_flight() {
    let fake = Fake::new();
    fake.log().run_time = Duration::from_secs(10);
    let pool = start(&fake, config(1)).await;
    let lease = pool
        .acquire(&Lang::BASH, false)
        .await
        .expect("the warm sandbox");
    let in_flight = tokio::spawn(run(lease, Lang::BASH));
    tokio::task::yield_now().await;
    pool.abort_runs();
    assert_eq!(in_flight.await.unwrap(), Err(FakeError::Killed));
    assert_eq!(fake.log().kills, 1);
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_creation_is_reported_and_retried_with_the_same_preparation() {
    let fake = Fake::new();
    let pool = start(&fake, config(2)).await;
    fake.log().fail_creations = 2;
    let t0 = Instant::now();
    tokio::time::sleep(MS).await;
    let failing = pool.state().failing;
    assert_eq!(failing.as_deref(), Some("fake: the creation failed"));
    // The other filler took the freed slot at once, and failed too.
    assert_eq!(fake.log().attempts.len(), 3);
    tokio::time::sleep_until(t0 + RETRY_DELAY - MS).await;
    assert_eq!(fake.log().attempts.len(), 3, "no retry before the delay");
    assert!(pool.state().failing.is_some());
    tokio::time::sleep_until(t0 + RETRY_DELAY + MS).await;
    assert_eq!(pool.state().available, 2, "the retry succeeded");
    assert_eq!(pool.state().failing, None, "a success clears the failure");
    {
        let log = fake.log();
        assert_eq!(
            log.attempts[1..],
            [const { Some(Lang::NODE) }; 3],
            "the same preparation"
        );
        assert_eq!(log.made, [Some(Lang::PYTHON), Some(Lang::NODE)]);
    }
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_poisoned_lock_loses_no_warm_sandbox() {
    let fake = Fake::new();
    let pool = start(&fake, config(2)).await;
    until_warm(&pool, 2).await;
    let poisoning = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ready = pool.shared.ready.lock();
        panic!("poisoning the pool's lock on purpose");
    }));
    assert!(poisoning.is_err() && pool.shared.ready.is_poisoned());
    assert_eq!(
        pool.state().available,
        2,
        "the warm sandboxes are still counted"
    );
    let lease = pool
        .acquire(&Lang::PYTHON, false)
        .await
        .expect("a warm sandbox");
    run(lease, Lang::PYTHON).await.expect("ran");
    until_warm(&pool, 2).await;
    shut(&pool, &fake).await;
}
