//! Python sandboxes of two kinds, lean or with the data stack: what the pool makes
//! first, which one a request takes, and what replaces it.

use super::*;

async fn start_with_stack(fake: &Fake, size: usize, data_stack: bool) -> Arc<Pool<Fake>> {
    let pool = Pool::start(Arc::new(fake.clone()), config(size), warm(), data_stack).await;
    Arc::new(pool.expect("the pool starts"))
}

/// The preparation and kind of the sandbox a lease holds, as the fake made it.
fn made(fake: &Fake, lease: &Lease<Fake>) -> (Option<Lang>, bool) {
    let log = fake.log();
    let id = lease.warm.sandbox.id;
    (log.made[id].clone(), log.data[id])
}

#[tokio::test(start_paused = true)]
async fn the_first_fill_makes_a_lean_python_node_unprepared_and_a_data_python() {
    let fake = Fake::new();
    let pool = start_with_stack(&fake, 4, true).await;
    until_warm(&pool, 4).await;
    let mut made: Vec<(Option<Lang>, bool)> = {
        let log = fake.log();
        log.made.iter().cloned().zip(log.data.clone()).collect()
    };
    made.sort_by_key(|(lang, data)| (lang.as_ref().map(|l| l.as_str().to_owned()), *data));
    assert_eq!(
        made,
        [
            (None, false),
            (Some(Lang::NODE), false),
            (Some(Lang::PYTHON), false),
            (Some(Lang::PYTHON), true),
        ]
    );
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_program_that_wants_the_stack_takes_the_data_sandbox_and_its_refill_is_one() {
    let fake = Fake::new();
    let pool = start_with_stack(&fake, 4, true).await;
    until_warm(&pool, 4).await;
    let data = pool
        .acquire(&Lang::PYTHON, true)
        .await
        .expect("a warm sandbox");
    assert_eq!(made(&fake, &data), (Some(Lang::PYTHON), true));
    let lean = pool
        .acquire(&Lang::PYTHON, false)
        .await
        .expect("a warm sandbox");
    assert_eq!(made(&fake, &lean), (Some(Lang::PYTHON), false));
    run(data, Lang::PYTHON).await.expect("ran");
    run(lean, Lang::PYTHON).await.expect("ran");
    until_warm(&pool, 4).await;
    let refills: Vec<bool> = fake.log().data[4..].to_vec();
    assert_eq!(refills.len(), 2, "{refills:?}");
    assert_eq!(
        refills.iter().filter(|d| **d).count(),
        1,
        "one of each: {refills:?}"
    );
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn without_a_data_sandbox_a_program_takes_a_lean_python_one_before_an_unprepared_one() {
    let fake = Fake::new();
    let pool = start_with_stack(&fake, 4, true).await;
    until_warm(&pool, 4).await;
    let first = pool
        .acquire(&Lang::PYTHON, true)
        .await
        .expect("the data one");
    let second = pool
        .acquire(&Lang::PYTHON, true)
        .await
        .expect("the lean one");
    assert_eq!(made(&fake, &second), (Some(Lang::PYTHON), false));
    let third = pool.acquire(&Lang::PYTHON, true).await.expect("another");
    assert_ne!(
        made(&fake, &third).0,
        Some(Lang::PYTHON),
        "no python is left"
    );
    for lease in [first, second, third] {
        run(lease, Lang::PYTHON).await.expect("ran");
    }
    until_warm(&pool, 4).await;
    assert_eq!(
        fake.log().data[4..],
        [true; 3],
        "the refills hold the stack"
    );
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_backend_with_one_kind_is_never_asked_for_the_stack() {
    let fake = Fake::new();
    let pool = start_with_stack(&fake, 3, false).await;
    until_warm(&pool, 3).await;
    let lease = pool
        .acquire(&Lang::PYTHON, true)
        .await
        .expect("a warm sandbox");
    run(lease, Lang::PYTHON).await.expect("ran");
    until_warm(&pool, 3).await;
    assert!(fake.log().data.iter().all(|d| !d), "{:?}", fake.log());
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_program_that_wants_the_stack_waits_for_the_one_being_made() {
    let fake = Fake::new();
    fake.log().create_time = 10 * MS;
    let pool = start_with_stack(&fake, 4, true).await;
    // Only the first (lean) sandbox is warm; the fillers are making the others.
    assert_eq!(pool.state().available, 1);
    let t0 = Instant::now();
    let data = pool
        .acquire(&Lang::PYTHON, true)
        .await
        .expect("a warm sandbox");
    assert_eq!(made(&fake, &data), (Some(Lang::PYTHON), true));
    assert_eq!(t0.elapsed(), 10 * MS, "it waited for the one being made");
    // A lean program takes the lean one at once.
    let t0 = Instant::now();
    let lean = pool
        .acquire(&Lang::PYTHON, false)
        .await
        .expect("a warm sandbox");
    assert_eq!(made(&fake, &lean), (Some(Lang::PYTHON), false));
    assert_eq!(t0.elapsed(), Duration::ZERO);
    // With none being made, it takes a lean one rather than wait.
    run(data, Lang::PYTHON).await.expect("ran");
    run(lean, Lang::PYTHON).await.expect("ran");
    until_warm(&pool, 4).await;
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn a_program_that_wants_the_stack_does_not_wait_while_making_sandboxes_fails() {
    let fake = Fake::new();
    fake.log().create_time = 10 * MS;
    let pool = start_with_stack(&fake, 2, true).await;
    fake.log().fail_creations = 100;
    let t0 = Instant::now();
    let lease = pool
        .acquire(&Lang::PYTHON, true)
        .await
        .expect("a warm sandbox");
    assert_eq!(made(&fake, &lease), (Some(Lang::PYTHON), false));
    // The one being made fails, and so does the other filler's retry at once.
    assert!(t0.elapsed() <= 20 * MS, "it waited {:?}", t0.elapsed());
    fake.log().fail_creations = 0;
    run(lease, Lang::PYTHON).await.expect("ran");
    until_warm(&pool, 2).await;
    shut(&pool, &fake).await;
}

#[tokio::test(start_paused = true)]
async fn programs_that_want_the_stack_one_after_another_each_get_it() {
    let fake = Fake::new();
    fake.log().create_time = 10 * MS;
    let pool = start_with_stack(&fake, 2, true).await;
    until_warm(&pool, 2).await;
    for _ in 0..3 {
        // The spent sandbox's slot is still held (its destroy is deferred while a lean
        // one is warm): the next waits for the refill rather than take the lean one.
        let lease = pool
            .acquire(&Lang::PYTHON, true)
            .await
            .expect("a warm sandbox");
        assert_eq!(made(&fake, &lease), (Some(Lang::PYTHON), true));
        run(lease, Lang::PYTHON).await.expect("ran");
    }
    until_warm(&pool, 2).await;
    shut(&pool, &fake).await;
}
