//! Where a runner is in its life, for `/health`, `/metrics` and the drain: its instance
//! id, whether it drains (after SIGTERM/SIGINT), and how many API requests are in flight.
//!
//! Whether it has started is not kept here: until the pool has made its first sandbox
//! the runner serves a router of its own ([`crate::http::starting`]) that says so.

use std::io::Read;
use tokio::sync::watch;

/// A runner's life: its id and its drain.
#[derive(Debug)]
pub struct Lifecycle {
    instance_id: String,
    draining: watch::Sender<bool>,
    in_flight: watch::Sender<usize>,
}

impl Lifecycle {
    /// A new life, with a fresh random instance id.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self::with_id(random_id()?))
    }

    /// A life with a given id (for tests).
    pub fn with_id(instance_id: String) -> Self {
        Lifecycle {
            instance_id,
            draining: watch::channel(false).0,
            in_flight: watch::channel(0).0,
        }
    }

    /// The id made at start: the same for the process's life, new on every restart.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// From now on: no new runs or sessions.
    pub fn begin_drain(&self) {
        self.draining.send_replace(true);
    }

    /// Whether the drain has begun.
    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// Completes when the drain begins (at once when it has).
    pub async fn draining(&self) {
        let mut draining = self.draining.subscribe();
        let _ = draining.wait_for(|d| *d).await;
    }

    /// Counts a request in flight until the guard is dropped (which a streamed answer's
    /// task may hold beyond its handler).
    pub fn enter(&self) -> InFlight {
        self.in_flight.send_modify(|n| *n += 1);
        InFlight(self.in_flight.clone())
    }

    /// The requests in flight now.
    pub fn in_flight(&self) -> usize {
        *self.in_flight.borrow()
    }

    /// Completes when no request is in flight (at once when none is).
    pub async fn idle(&self) {
        let mut in_flight = self.in_flight.subscribe();
        let _ = in_flight.wait_for(|n| *n == 0).await;
    }
}

/// A request in flight; it leaves the count when dropped, however the request ends.
#[derive(Debug)]
pub struct InFlight(watch::Sender<usize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// 128 random bits from the kernel, as 32 hex digits.
pub fn random_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ids_are_32_hex_digits_and_differ() {
        let (a, b) = (random_id().expect("id"), random_id().expect("id"));
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn idle_waits_for_the_last_request_in_flight() {
        let life = std::sync::Arc::new(Lifecycle::with_id("x".into()));
        life.idle().await; // none in flight: at once
        let first = life.enter();
        let second = life.enter();
        assert_eq!(life.in_flight(), 2);
        let waiting = tokio::spawn({
            let life = life.clone();
            async move { life.idle().await }
        });
        drop(first);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "one request is still in flight");
        drop(second);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("idle once none is in flight")
            .expect("task");
    }

    #[tokio::test]
    async fn draining_completes_once_the_drain_begins() {
        let life = Lifecycle::with_id("x".into());
        assert!(!life.is_draining());
        let not_yet = tokio::time::timeout(Duration::from_millis(20), life.draining()).await;
        assert!(not_yet.is_err());
        life.begin_drain();
        assert!(life.is_draining());
        life.draining().await;
    }
}
