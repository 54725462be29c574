//! One sandbox's side of the proxy: its grant, its limits and its counters.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::policy::Grant;

/// The default of RUNNER_EGRESS_MAX_BYTES: 256 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// The default number of connections one sandbox may hold open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// Per-sandbox limits: RUNNER_EGRESS_MAX_BYTES (in and out together over the sandbox's life,
/// default 256 MiB) and connections at once (default 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes in and out together over the sandbox's life.
    pub max_bytes: u64,
    /// Connections through the proxy open at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bytes: DEFAULT_MAX_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Counters over a sandbox's life so far (a run's are the difference of two).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Connections made to a destination.
    pub connections: u64,
    /// Bytes from destinations to the sandbox.
    pub bytes_in: u64,
    /// Bytes from the sandbox to destinations.
    pub bytes_out: u64,
    /// Requests refused (a 403, or a connection closed for its TLS server name).
    pub refused: u64,
}

impl Usage {
    /// What happened since `earlier` (a snapshot of the same sandbox).
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            connections: self.connections.saturating_sub(earlier.connections),
            bytes_in: self.bytes_in.saturating_sub(earlier.bytes_in),
            bytes_out: self.bytes_out.saturating_sub(earlier.bytes_out),
            refused: self.refused.saturating_sub(earlier.refused),
        }
    }

    /// Whether nothing happened (a run's answer leaves `egress` out then).
    pub fn is_empty(&self) -> bool {
        *self == Usage::default()
    }
}

/// A sandbox's handle: its grant (none at first) and its counters.
#[derive(Clone, Debug)]
pub struct SandboxEgress(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    grant: Mutex<Grant>,
    limits: Limits,
    open: AtomicUsize,
    used: AtomicU64,
    connections: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    refused: AtomicU64,
}

impl SandboxEgress {
    pub(crate) fn new(limits: Limits) -> SandboxEgress {
        SandboxEgress(Arc::new(Shared {
            grant: Mutex::new(Grant::none()),
            limits,
            open: AtomicUsize::new(0),
            used: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }))
    }

    /// Sets what the sandbox may reach from now on (connections open keep going).
    pub fn set_grant(&self, grant: Grant) {
        *self.0.grant.lock().unwrap_or_else(PoisonError::into_inner) = grant;
    }

    /// What the sandbox may reach now.
    pub fn grant(&self) -> Grant {
        self.0
            .grant
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Counters over the sandbox's life so far (a run's are the difference of two).
    pub fn usage(&self) -> Usage {
        Usage {
            connections: self.0.connections.load(Ordering::Relaxed),
            bytes_in: self.0.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.0.bytes_out.load(Ordering::Relaxed),
            refused: self.0.refused.load(Ordering::Relaxed),
        }
    }

    /// Bytes of the sandbox's budget ([`Limits::max_bytes`]) used so far, those carried
    /// over included.
    pub fn bytes_used(&self) -> u64 {
        self.0.used.load(Ordering::Acquire)
    }

    /// Counts `bytes` already used against the budget (a session's earlier sandboxes': a
    /// budget over its whole life), unless more are counted already; its usage
    /// counters, which say what this sandbox moved, stay.
    pub fn carry_bytes(&self, bytes: u64) {
        self.0.used.fetch_max(bytes, Ordering::AcqRel);
    }

    pub(crate) fn limits(&self) -> Limits {
        self.0.limits
    }

    pub(crate) fn count_refused(&self) {
        self.0.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_connection(&self) {
        self.0.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// A place among the connections open at once, or `None` when they are all taken.
    pub(crate) fn open_slot(&self) -> Option<Slot> {
        let max = self.0.limits.max_connections;
        let taken = self
            .0
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            });
        taken.ok().map(|_| Slot(self.0.clone()))
    }

    /// Whether the sandbox's bytes are used up.
    pub(crate) fn bytes_used_up(&self) -> bool {
        self.0.used.load(Ordering::Acquire) >= self.0.limits.max_bytes
    }

    /// Takes up to `wanted` bytes of the sandbox's budget for one direction; returns how
    /// many it may send (fewer than `wanted` once the budget runs out).
    pub(crate) fn take_bytes(&self, wanted: usize, direction: Direction) -> usize {
        let max = self.0.limits.max_bytes;
        let wanted = wanted as u64;
        let before = self
            .0
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_add(wanted).min(max.max(used)))
            });
        let before = before.unwrap_or_else(|used| used);
        let granted = max.saturating_sub(before).min(wanted);
        let counter = match direction {
            Direction::In => &self.0.bytes_in,
            Direction::Out => &self.0.bytes_out,
        };
        counter.fetch_add(granted, Ordering::Relaxed);
        usize::try_from(granted).unwrap_or(usize::MAX)
    }
}

/// Which way bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// From a destination to the sandbox.
    In,
    /// From the sandbox to a destination.
    Out,
}

/// One of a sandbox's connections at once; given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(max_bytes: u64, max_connections: usize) -> SandboxEgress {
        SandboxEgress::new(Limits {
            max_bytes,
            max_connections,
        })
    }

    #[test]
    fn the_byte_budget_covers_both_directions_and_stops_exactly() {
        let sandbox = sandbox(100, 1);
        assert_eq!(sandbox.take_bytes(60, Direction::Out), 60);
        assert!(!sandbox.bytes_used_up());
        assert_eq!(sandbox.take_bytes(60, Direction::In), 40);
        assert!(sandbox.bytes_used_up());
        assert_eq!(sandbox.take_bytes(1, Direction::Out), 0);
        let usage = sandbox.usage();
        assert_eq!((usage.bytes_out, usage.bytes_in), (60, 40));
    }

    #[test]
    fn slots_are_bounded_and_given_back() {
        let sandbox = sandbox(1, 2);
        let first = sandbox.open_slot();
        let second = sandbox.open_slot();
        assert!(first.is_some() && second.is_some());
        assert!(sandbox.open_slot().is_none());
        drop(first);
        assert!(sandbox.open_slot().is_some());
    }

    #[test]
    fn usage_since_and_empty() {
        let later = Usage {
            connections: 3,
            bytes_in: 10,
            bytes_out: 5,
            refused: 1,
        };
        let earlier = Usage {
            connections: 1,
            bytes_in: 4,
            bytes_out: 5,
            refused: 0,
        };
        let run = later.since(&earlier);
        assert_eq!(
            run,
            Usage {
                connections: 2,
                bytes_in: 6,
                bytes_out: 0,
                refused: 1
            }
        );
        assert!(!run.is_empty());
        assert!(later.since(&later).is_empty());
        let json = serde_json::to_string(&run).unwrap();
        assert_eq!(
            json,
            r#"{"connections":2,"bytesIn":6,"bytesOut":0,"refused":1}"#
        );
    }

    #[test]
    fn grant_is_set_and_read() {
        let sandbox = sandbox(1, 1);
        assert_eq!(sandbox.grant(), Grant::none());
        let policy = crate::Policy::parse("pypi.org", "").unwrap();
        sandbox.set_grant(policy.grant_all());
        assert_eq!(sandbox.grant().names(), vec!["pypi.org"]);
    }
}
