//! The warm pool: sandboxes made ahead of time, one job each, destroyed after.
//!
//! `size` slots bound how many sandboxes exist at once, warm or running: a slot is
//! taken when a sandbox starts being made and given back once it is destroyed, and
//! background fillers keep every free slot busy making the next one. A request takes
//! a warm sandbox, or waits in a bounded queue for a bounded time.
//!
//! A warm sandbox may have its language's loader started already (python, node,
//! typescript, java: those whose row has one; bash and the compiled languages have
//! none). A request takes a sandbox prepared for its language when
//! there is one, else an unprepared one, else any (the agent then starts the
//! interpreter cold), and the sandbox made to replace it is prepared for the language
//! of that request: the mix of the pool follows the traffic.
//!
//! A Python sandbox is also lean or holds the data stack (the warm imports: numpy,
//! pandas, matplotlib), where the backend makes the two differently (a process
//! backend with warm imports; crate::data_stack says which programs want which): a
//! request takes one of its kind first, else a Python one of the other kind, and the
//! first fill makes one of each (before node's).
//!
//! The pool is generic over what makes its sandboxes ([`SandboxFactory`]): the real
//! [`Backend`], or a fake one in the unit tests.

mod factory;
#[cfg(test)]
pub(crate) mod tests;

pub use factory::{PooledSandbox, SandboxFactory};

use crate::backend::{Backend, DepsMount, RunOutcome};
use crate::live::LiveOutput;
use sandbox_protocol::agent::Job;
use sandbox_protocol::Lang;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// How long a filler waits after a failed creation before it tries again.
const RETRY_DELAY: Duration = Duration::from_millis(500);
/// The most sandboxes made at once.
const FILLERS_MAX: usize = 4;
/// How long a spent sandbox waits before it is destroyed and its slot refilled, while
/// other warm sandboxes remain and nobody waits: on a small host the destroy and the
/// next creation (an interpreter start-up) would otherwise compete for the CPUs with
/// the answer on its way to the caller (through sandbox-mcp, say).
const REFILL_DEFER: Duration = Duration::from_millis(25);
/// The languages a pool prepares for before traffic says otherwise (those of them that
/// have a loader), in turn with unprepared sandboxes and, where Python's are of two
/// kinds, one holding the data stack.
const FIRST_LANGS: [Lang; 2] = [Lang::PYTHON, Lang::NODE];

/// What a warm sandbox is made ready for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Prep {
    /// The language whose loader waits in it (none: bash and the compiled languages,
    /// which have none).
    lang: Option<Lang>,
    /// Its interpreter holds the data stack (the warm imports): Python's only, where
    /// the backend makes lean ones too.
    data: bool,
}

impl Prep {
    const NONE: Prep = Prep {
        lang: None,
        data: false,
    };
}

/// How the pool is sized.
#[derive(Debug, Clone, Copy)]
pub struct PoolConfig {
    /// Sandboxes that exist at once (warm plus running).
    pub size: usize,
    /// Requests that may wait for a sandbox at once.
    pub queue_size: usize,
    /// How long a request may wait.
    pub queue_timeout: Duration,
}

/// Why no sandbox was handed out.
#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    /// The wait queue is full.
    #[error("every sandbox is busy (pool size {size}) and the wait queue is full (size {queue})")]
    QueueFull {
        /// The size concerned.
        size: usize,
        /// Requests already waiting.
        queue: usize,
    },
    /// No sandbox became free in time.
    #[error("no sandbox became free within {0:?}")]
    Timeout(Duration),
    /// The pool is shutting down.
    #[error("the runner is shutting down")]
    Closed,
}

/// What a pool prepares its first sandboxes for, in turn: the first languages that
/// have a loader, Python's twice where `data_stack` says the backend makes both kinds
/// (lean, then with the data stack), then none.
fn first_mix(warm: &[Lang], data_stack: bool) -> Vec<Prep> {
    FIRST_LANGS
        .into_iter()
        .filter(|lang| warm.contains(lang))
        .flat_map(|lang| {
            let both = data_stack && lang == Lang::PYTHON;
            let kinds: &[bool] = if both { &[false, true] } else { &[false] };
            kinds.iter().map(move |&data| Prep {
                lang: Some(lang.clone()),
                data,
            })
        })
        .chain([Prep::NONE])
        .collect()
}

/// Locks one of the pool's mutexes. A poisoned one means that a thread panicked while
/// holding it: a bug, said in the log; the pool then goes on with the data as it was
/// left rather than lose track of it (a warm sandbox forgotten would never be destroyed).
fn lock<'a, T>(mutex: &'a Mutex<T>, what: &'static str) -> MutexGuard<'a, T> {
    mutex.lock().unwrap_or_else(|poisoned| {
        tracing::error!(
            lock = what,
            "bug: a thread panicked while holding this pool lock; going on with its data"
        );
        mutex.clear_poison();
        poisoned.into_inner()
    })
}

/// A warm sandbox and the slot it holds.
struct Warm<S> {
    sandbox: S,
    prepared: Prep,
    slot: OwnedSemaphorePermit,
}

/// A sandbox handed to one request.
pub struct Lease<B: SandboxFactory = Backend> {
    warm: Warm<B::Sandbox>,
    shared: Arc<Shared<B>>,
}

impl<B: SandboxFactory> Lease<B> {
    /// Grants the sandbox's programs `grant` at the runner's proxy (nothing where it
    /// has no way there: the runner opens no host).
    pub fn grant_egress(&self, grant: Option<sandbox_egress::Grant>) {
        if let (Some(grant), Some(egress)) = (grant, self.warm.sandbox.egress()) {
            egress.set_grant(grant);
        }
    }

    /// Keeps the sandbox for good (a session's): its slot is given back, and the pool
    /// makes another sandbox in its place. The caller destroys it.
    pub fn keep(self) -> B::Sandbox {
        let Warm { sandbox, slot, .. } = self.warm;
        drop(slot);
        sandbox
    }

    /// Runs the job (with its inline dependencies `deps` mounted first, its output sent
    /// to `live` as it comes), or stops it when `cancelled` completes first (`None`: the
    /// caller went away). The sandbox is destroyed after, in the background, so the answer does not
    /// wait for it (a little later when the pool has warm sandboxes to spare: see
    /// [`REFILL_DEFER`]); its slot is refilled once it is gone.
    pub async fn run(
        self,
        job: Job,
        deps: Option<DepsMount>,
        live: Option<LiveOutput>,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Option<Result<RunOutcome, B::Error>> {
        let Warm {
            mut sandbox, slot, ..
        } = self.warm;
        let result = tokio::select! {
            result = sandbox.run_with(job, deps.as_ref(), live) => Some(result),
            () = cancelled => {
                tracing::info!("the caller went away: the run is stopped");
                None
            }
        };
        // A run that was stopped or failed may have processes left: those go at once.
        let defer = matches!(result, Some(Ok(_))) && self.shared.can_defer_refill();
        let destroying = Underway::destroying(&self.shared);
        tokio::spawn(async move {
            if defer {
                tokio::time::sleep(REFILL_DEFER).await;
            }
            sandbox.destroy().await;
            drop((slot, destroying));
        });
        result
    }
}

struct Shared<B: SandboxFactory> {
    backend: Arc<B>,
    config: PoolConfig,
    ready: Mutex<VecDeque<Warm<B::Sandbox>>>,
    readied: Notify,
    /// What the next sandboxes are to be prepared for, oldest demand first.
    wanted: Mutex<VecDeque<Prep>>,
    /// The languages a sandbox can be prepared for (those with a loader).
    warm: Vec<Lang>,
    /// The backend makes Python sandboxes lean or with the data stack.
    data_stack: bool,
    /// Sandboxes with the data stack being made now: a program that wants the stack
    /// waits for one of them rather than take a lean sandbox (a fork from a template
    /// takes milliseconds; importing the stack, a second or more).
    making_data: AtomicUsize,
    /// The pool's slots (to tell whether a sandbox wanted will be made soon).
    slots: Arc<Semaphore>,
    /// Spent sandboxes being destroyed: their slots are given back soon.
    destroying: AtomicUsize,
    waiting: AtomicUsize,
    closed: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl<B: SandboxFactory> Shared<B> {
    fn available(&self) -> usize {
        lock(&self.ready, "ready").len()
    }

    /// A refill may wait while warm sandboxes remain and no request waits for one.
    fn can_defer_refill(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) == 0 && self.available() > 0
    }

    /// What a sandbox for a program in `lang` is prepared with: its loader (none for
    /// bash or C), and the data stack if the program wants it and the backend makes
    /// Python sandboxes of both kinds.
    fn preparation(&self, lang: &Lang, data: bool) -> Prep {
        let lang = self.warm.contains(lang).then(|| lang.clone());
        let data = data && self.data_stack && lang.is_some();
        Prep { lang, data }
    }

    /// Takes the best warm sandbox for a program in `lang` (that wants the data stack
    /// if `data`): prepared for it, else (if it wants the stack, once none with it is
    /// being made) for its language, else unprepared, else any.
    fn take(&self, lang: &Lang, data: bool) -> Option<Warm<B::Sandbox>> {
        let want = self.preparation(lang, data);
        let mut ready = lock(&self.ready, "ready");
        let exact = ready.iter().position(|w| w.prepared == want);
        if exact.is_none() && want.data && self.data_coming() {
            return None;
        }
        let index = exact
            .or_else(|| ready.iter().position(|w| w.prepared.lang == want.lang))
            .or_else(|| ready.iter().position(|w| w.prepared.lang.is_none()))
            .or(if ready.is_empty() { None } else { Some(0) })?;
        let warm = ready.remove(index)?;
        drop(ready);
        lock(&self.wanted, "wanted").push_back(want);
        Some(warm)
    }

    /// A sandbox with the data stack is being made, or wanted while a slot is free for
    /// it (or about to be: a spent sandbox's) and making sandboxes does not fail.
    fn data_coming(&self) -> bool {
        let slot_soon =
            self.slots.available_permits() > 0 || self.destroying.load(Ordering::SeqCst) > 0;
        self.making_data.load(Ordering::SeqCst) > 0
            || (slot_soon
                && lock(&self.last_error, "last_error").is_none()
                && lock(&self.wanted, "wanted").iter().any(|p| p.data))
    }

    fn hand_over(&self, warm: Warm<B::Sandbox>) {
        *lock(&self.last_error, "last_error") = None;
        lock(&self.ready, "ready").push_back(warm);
        self.readied.notify_one();
    }
}

/// The pool of one runner.
pub struct Pool<B: SandboxFactory = Backend> {
    shared: Arc<Shared<B>>,
    slots: Arc<Semaphore>,
    fillers: Mutex<Vec<JoinHandle<()>>>,
    closing: watch::Sender<bool>,
}

/// What `/health` and `/metrics` report of the pool.
#[derive(Debug, Clone)]
pub struct PoolState {
    /// Configured size.
    pub size: usize,
    /// Warm sandboxes.
    pub available: usize,
    /// Requests waiting.
    pub waiting: usize,
    /// The last creation failed (and why).
    pub failing: Option<String>,
}

impl<B: SandboxFactory> Pool<B> {
    /// Makes the first sandbox now, so that a runner that cannot make sandboxes
    /// fails at start with the reason (and releases what the backend holds); then
    /// starts the fillers. `config.size` is at least 1. `warm` are the languages a
    /// sandbox can be prepared for; `data_stack`, whether the backend makes Python
    /// sandboxes lean or with the data stack (see [`crate::data_stack`]).
    pub async fn start(
        backend: Arc<B>,
        config: PoolConfig,
        warm: Vec<Lang>,
        data_stack: bool,
    ) -> Result<Self, B::Error> {
        let slots = Arc::new(Semaphore::new(config.size));
        let mix = first_mix(&warm, data_stack);
        let wanted = mix.iter().cycle().skip(1).take(config.size - 1).cloned();
        let shared = Arc::new(Shared {
            backend: backend.clone(),
            config,
            ready: Mutex::new(VecDeque::new()),
            readied: Notify::new(),
            wanted: Mutex::new(wanted.collect()),
            warm,
            data_stack,
            making_data: AtomicUsize::new(0),
            slots: slots.clone(),
            destroying: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            last_error: Mutex::new(None),
        });
        let slot = slots
            .clone()
            .try_acquire_owned()
            .expect("a new semaphore of size >= 1 has a free permit");
        let prepared = mix[0].clone();
        let sandbox = match backend.create(prepared.lang.clone(), prepared.data).await {
            Ok(sandbox) => sandbox,
            Err(e) => {
                // A runner that cannot start leaves nothing behind either.
                backend.shutdown();
                return Err(e);
            }
        };
        shared.hand_over(Warm {
            sandbox,
            prepared,
            slot,
        });
        let (closing, closing_rx) = watch::channel(false);
        // Making a sandbox waits more than it computes (joining a v1 cgroup waits ~10 ms
        // for an RCU grace period), so several fillers overlap their waits.
        let fillers = (0..config.size.clamp(1, FILLERS_MAX))
            .map(|_| {
                let filler = Filler {
                    shared: shared.clone(),
                    slots: slots.clone(),
                    closing: closing_rx.clone(),
                };
                tokio::spawn(filler.run())
            })
            .collect();
        Ok(Pool {
            shared,
            slots,
            fillers: Mutex::new(fillers),
            closing,
        })
    }

    /// A sandbox its backend restores from what it saved whole in `dir`
    /// ([`PooledSandbox::save`]), kept for good as [`Lease::keep`]'s are (a session's).
    pub async fn restore(&self, dir: &std::path::Path) -> Result<B::Sandbox, B::Error> {
        self.shared.backend.restore(dir).await
    }

    /// Takes a warm sandbox for a job in `lang` (whose program wants the data stack if
    /// `data`), waiting in the queue if none is free.
    pub async fn acquire(&self, lang: &Lang, data: bool) -> Result<Lease<B>, AcquireError> {
        let shared = &self.shared;
        let queue = shared.config.queue_size;
        let waiting = shared.waiting.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&shared.waiting);
        if waiting >= queue + shared.available() {
            return Err(AcquireError::QueueFull {
                size: shared.config.size,
                queue,
            });
        }
        let timeout = shared.config.queue_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let readied = shared.readied.notified();
            tokio::pin!(readied);
            readied.as_mut().enable();
            if shared.closed.load(Ordering::SeqCst) {
                return Err(AcquireError::Closed);
            }
            if let Some(warm) = shared.take(lang, data) {
                return Ok(Lease {
                    warm,
                    shared: shared.clone(),
                });
            }
            if tokio::time::timeout_at(deadline, readied).await.is_err() {
                return Err(AcquireError::Timeout(timeout));
            }
        }
    }

    /// The pool's state now.
    pub fn state(&self) -> PoolState {
        let s = &self.shared;
        PoolState {
            size: s.config.size,
            available: s.available(),
            waiting: s.waiting.load(Ordering::SeqCst),
            failing: lock(&s.last_error, "last_error").clone(),
        }
    }

    /// Kills the processes of every sandbox, running or warm: their runs end at once
    /// (for a shutdown whose grace period is over).
    pub fn abort_runs(&self) {
        self.shared.backend.kill_all();
    }

    /// Stops making sandboxes and destroys the warm ones. Runs in flight finish on
    /// their own (each destroys its sandbox).
    pub async fn shutdown(&self) {
        let _ = self.closing.send(true);
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.readied.notify_waiters();
        let fillers = std::mem::take(&mut *lock(&self.fillers, "fillers"));
        for filler in fillers {
            let _ = filler.await;
        }
        let warm: Vec<_> = lock(&self.shared.ready, "ready").drain(..).collect();
        for w in warm {
            w.sandbox.destroy().await;
        }
        // Wait for in-flight runs to give their slots back.
        let all = self.shared.config.size as u32;
        let _ = self.slots.acquire_many(all).await;
        self.shared.backend.shutdown();
    }
}

/// Counts something under way in one of the pool's counters while it lasts, however
/// it ends (done, failed, its task cancelled or panicking); with `wake`, the requests
/// waiting look again once it ends.
struct Underway<B: SandboxFactory> {
    shared: Arc<Shared<B>>,
    counter: fn(&Shared<B>) -> &AtomicUsize,
    wake: bool,
}

impl<B: SandboxFactory> Underway<B> {
    /// A sandbox with the data stack being made (until it is handed over or fails).
    fn making_data(shared: &Arc<Shared<B>>) -> Self {
        Self::count(shared, |s| &s.making_data, true)
    }

    /// A spent sandbox being destroyed (until its slot is given back).
    fn destroying(shared: &Arc<Shared<B>>) -> Self {
        Self::count(shared, |s| &s.destroying, false)
    }

    fn count(shared: &Arc<Shared<B>>, counter: fn(&Shared<B>) -> &AtomicUsize, wake: bool) -> Self {
        counter(shared).fetch_add(1, Ordering::SeqCst);
        Underway {
            shared: shared.clone(),
            counter,
            wake,
        }
    }
}

impl<B: SandboxFactory> Drop for Underway<B> {
    fn drop(&mut self) {
        (self.counter)(&self.shared).fetch_sub(1, Ordering::SeqCst);
        if self.wake {
            self.shared.readied.notify_waiters();
        }
    }
}

/// Decrements the waiting count when a request leaves the queue, however it leaves.
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A filler: takes a free slot, makes a sandbox in it, hands it to the queue; until
/// the pool closes (a creation under way is finished and its sandbox destroyed).
struct Filler<B: SandboxFactory> {
    shared: Arc<Shared<B>>,
    slots: Arc<Semaphore>,
    closing: watch::Receiver<bool>,
}

impl<B: SandboxFactory> Filler<B> {
    async fn run(mut self) {
        loop {
            let slot = tokio::select! {
                slot = self.slots.clone().acquire_owned() => slot,
                _ = self.closing.wait_for(|closing| *closing) => return,
            };
            let Ok(slot) = slot else { return };
            let prepared = self.next_preparation();
            let (lang, data) = (prepared.lang.clone(), prepared.data);
            let making = data.then(|| Underway::making_data(&self.shared));
            // Held until the sandbox is handed over (or has failed).
            let made = self.shared.backend.create(lang, data).await;
            match made {
                Ok(sandbox) if *self.closing.borrow() => {
                    sandbox.destroy().await;
                    return;
                }
                Ok(sandbox) => self.shared.hand_over(Warm {
                    sandbox,
                    prepared,
                    slot,
                }),
                Err(e) => {
                    drop((slot, making));
                    self.record_failure(&e, prepared);
                    tokio::time::sleep(RETRY_DELAY).await;
                }
            }
        }
    }

    fn next_preparation(&self) -> Prep {
        lock(&self.shared.wanted, "wanted")
            .pop_front()
            .unwrap_or(Prep::NONE)
    }

    fn record_failure(&self, e: &B::Error, prepared: Prep) {
        tracing::error!(error = %e, "making a sandbox failed");
        *lock(&self.shared.last_error, "last_error") = Some(e.to_string());
        // Try the same preparation again next time.
        lock(&self.shared.wanted, "wanted").push_front(prepared);
    }
}
