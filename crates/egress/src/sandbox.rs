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

    pub(crate) fn limits(&self) -> Limits {
        self.0.limits
    }

    pub(crate) fn count_refused(&self) {
        self.0.refused.fetch_add(1, Ordering::Relaxed);
    }
}
