//! The warm pool: sandboxes made ahead of time, one job each, destroyed after.
//!
//! `size` slots bound how many sandboxes exist at once, warm or running: a slot is
//! taken when a sandbox starts being made and given back once it is destroyed, and
//! background fillers keep every free slot busy making the next one. A request takes
//! a warm sandbox, or waits in a bounded queue for a bounded time.

use crate::backend::{Backend, RunOutcome, Sandbox};
use sandbox_protocol::agent::Job;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// How long a filler waits after a failed creation before it tries again.
const RETRY_DELAY: Duration = Duration::from_millis(500);

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
    #[error("all {size} sandboxes are busy and {queue} requests are already waiting")]
    QueueFull { size: usize, queue: usize },
    /// No sandbox became free in time.
    #[error("no sandbox became free within {0:?}")]
    Timeout(Duration),
    /// The pool is shutting down.
    #[error("the runner is shutting down")]
    Closed,
}

/// A warm sandbox and the slot it holds.
struct Warm {
    sandbox: Sandbox,
    slot: OwnedSemaphorePermit,
}

/// A sandbox handed to one request.
pub struct Lease {
    warm: Warm,
}

impl Lease {
    /// Runs the job; the sandbox is destroyed after, and its slot refilled.
    pub async fn run(self, job: Job) -> Result<RunOutcome, crate::backend::BackendError> {
        let Warm { sandbox, slot } = self.warm;
        let result = sandbox.run(job).await;
        drop(slot);
        result
    }
}

struct Shared {
    backend: Arc<Backend>,
    config: PoolConfig,
    ready_rx: Mutex<mpsc::Receiver<Warm>>,
    available: AtomicUsize,
    waiting: AtomicUsize,
    failing: AtomicBool,
    last_error: std::sync::Mutex<Option<String>>,
}

/// The pool of one runner.
pub struct Pool {
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    fillers: std::sync::Mutex<Vec<JoinHandle<()>>>,
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

impl Pool {
    /// Makes the first sandbox now, so that a runner that cannot make sandboxes
    /// fails at start with the reason; then starts the fillers.
    pub async fn start(
        backend: Arc<Backend>,
        config: PoolConfig,
    ) -> Result<Pool, crate::backend::BackendError> {
        let slots = Arc::new(Semaphore::new(config.size));
        let (ready_tx, ready_rx) = mpsc::channel(config.size.max(1));
        let shared = Arc::new(Shared {
            backend: backend.clone(),
            config,
            ready_rx: Mutex::new(ready_rx),
            available: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
            last_error: std::sync::Mutex::new(None),
        });
        let first_slot = slots
            .clone()
            .try_acquire_owned()
            .expect("a new semaphore of size >= 1 has a free permit");
        let first = backend.create().await?;
        shared.available.fetch_add(1, Ordering::SeqCst);
        if ready_tx
            .send(Warm {
                sandbox: first,
                slot: first_slot,
            })
            .await
            .is_err()
        {
            unreachable!("the receiver lives in shared");
        }
        let (closing, closing_rx) = watch::channel(false);
        let fillers = (0..config.size.clamp(1, 2))
            .map(|_| {
                let filler = Filler {
                    shared: shared.clone(),
                    slots: slots.clone(),
                    ready_tx: ready_tx.clone(),
                    closing: closing_rx.clone(),
                };
                tokio::spawn(filler.run())
            })
            .collect();
        Ok(Pool {
            shared,
            slots,
            fillers: std::sync::Mutex::new(fillers),
            closing,
        })
    }

    /// Takes a warm sandbox, waiting in the queue if none is free.
    pub async fn acquire(&self) -> Result<Lease, AcquireError> {
        let shared = &self.shared;
        let queue = shared.config.queue_size;
        let waiting = shared.waiting.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&shared.waiting);
        if waiting >= queue + shared.available.load(Ordering::SeqCst) {
            return Err(AcquireError::QueueFull {
                size: shared.config.size,
                queue,
            });
        }
        let timeout = shared.config.queue_timeout;
        let take = async {
            let mut rx = shared.ready_rx.lock().await;
            rx.recv().await
        };
        match tokio::time::timeout(timeout, take).await {
            Ok(Some(warm)) => {
                shared.available.fetch_sub(1, Ordering::SeqCst);
                Ok(Lease { warm })
            }
            Ok(None) => Err(AcquireError::Closed),
            Err(_) => Err(AcquireError::Timeout(timeout)),
        }
    }

    /// The pool's state now.
    pub fn state(&self) -> PoolState {
        let s = &self.shared;
        let failing = if s.failing.load(Ordering::SeqCst) {
            s.last_error.lock().map(|e| e.clone()).unwrap_or(None)
        } else {
            None
        };
        PoolState {
            size: s.config.size,
            available: s.available.load(Ordering::SeqCst),
            waiting: s.waiting.load(Ordering::SeqCst),
            failing,
        }
    }

    /// Stops making sandboxes and destroys the warm ones. Runs in flight finish on
    /// their own (each destroys its sandbox).
    pub async fn shutdown(&self) {
        let _ = self.closing.send(true);
        let fillers = match self.fillers.lock() {
            Ok(mut fillers) => std::mem::take(&mut *fillers),
            Err(_) => Vec::new(),
        };
        for filler in fillers {
            let _ = filler.await;
        }
        let mut rx = self.shared.ready_rx.lock().await;
        rx.close();
        while let Some(warm) = rx.recv().await {
            self.shared.available.fetch_sub(1, Ordering::SeqCst);
            warm.sandbox.destroy().await;
        }
        // Wait for in-flight runs to give their slots back.
        let all = self.shared.config.size as u32;
        let _ = self.slots.acquire_many(all).await;
        self.shared.backend.shutdown();
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
struct Filler {
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    ready_tx: mpsc::Sender<Warm>,
    closing: watch::Receiver<bool>,
}

impl Filler {
    async fn run(mut self) {
        loop {
            let slot = tokio::select! {
                slot = self.slots.clone().acquire_owned() => slot,
                _ = self.closing.wait_for(|closing| *closing) => return,
            };
            let Ok(slot) = slot else { return };
            match self.shared.backend.create().await {
                Ok(sandbox) if *self.closing.borrow() => {
                    sandbox.destroy().await;
                    return;
                }
                Ok(sandbox) => self.hand_over(Warm { sandbox, slot }).await,
                Err(e) => {
                    drop(slot);
                    self.record_failure(&e);
                    tokio::time::sleep(RETRY_DELAY).await;
                }
            }
        }
    }

    async fn hand_over(&self, warm: Warm) {
        let shared = &self.shared;
        shared.failing.store(false, Ordering::SeqCst);
        shared.available.fetch_add(1, Ordering::SeqCst);
        if let Err(mpsc::error::SendError(warm)) = self.ready_tx.send(warm).await {
            shared.available.fetch_sub(1, Ordering::SeqCst);
            warm.sandbox.destroy().await;
        }
    }

    fn record_failure(&self, e: &crate::backend::BackendError) {
        tracing::error!(error = %e, "making a sandbox failed");
        if let Ok(mut last) = self.shared.last_error.lock() {
            *last = Some(e.to_string());
        }
        self.shared.failing.store(true, Ordering::SeqCst);
    }
}
