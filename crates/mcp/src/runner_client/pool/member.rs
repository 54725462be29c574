//! One runner of the pool: what was last heard from it, and this server's counters there.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::runner_client::RunnerClient;

/// How a member answered its last health poll (or its last call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberState {
    /// Not polled yet: tried, after the healthy ones.
    Unknown,
    /// `/health` answered 200: takes calls.
    Ok,
    /// `/health` answered, but not 200 (starting, degraded, draining): skipped.
    Unhealthy,
    /// No answer (refused, timed out): skipped.
    Unreachable,
}

/// What this server last heard from a member.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    /// How it is doing.
    pub state: MemberState,
    /// The `status` of its last `/health` body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Warm sandboxes free at the last poll.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<usize>,
    /// Its pool's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_size: Option<usize>,
    /// Its process's id (changes when it restarts), where the runner reports one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
}

/// The parts of a runner's `/health` body placement reads; all optional, so that runners
/// of any version are read.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Probe {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    available: Option<usize>,
    #[serde(default)]
    pool_size: Option<usize>,
    #[serde(default)]
    instance_id: Option<String>,
}

/// One runner of the pool, with its counters.
#[derive(Debug)]
pub struct Member {
    pub(super) client: RunnerClient,
    in_flight: AtomicUsize,
    pub(super) calls: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) seen: Mutex<Seen>,
}

/// A member's numbers at one moment, for `/health` and `/metrics`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberReport {
    /// Its base URL.
    pub url: String,
    /// What was last heard from it.
    #[serde(flatten)]
    pub seen: Seen,
    /// Calls this server has there now.
    pub in_flight: usize,
    /// Calls sent there (each attempt counts).
    pub calls: u64,
    /// Calls there that failed and were not sent elsewhere.
    pub failures: u64,
    /// Calls it refused before the program started, sent to another runner.
    pub retries: u64,
}

impl Member {
    pub(super) fn new(client: RunnerClient) -> Self {
        Member {
            client,
            in_flight: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            seen: Mutex::new(Seen {
                state: MemberState::Unknown,
                status: None,
                available: None,
                pool_size: None,
                instance_id: None,
            }),
        }
    }

    pub(super) fn seen(&self) -> Seen {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn set_state(&self, state: MemberState) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .state = state;
    }

    /// The member's numbers now.
    pub fn report(&self) -> MemberReport {
        MemberReport {
            url: self.client.url().to_string(),
            seen: self.seen(),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
        }
    }

    /// Polls its `/health` once and records what it says.
    pub(super) async fn poll(&self) {
        let (state, probe) = match self.client.probe().await {
            Ok((true, probe)) => (MemberState::Ok, Some(probe)),
            Ok((false, probe)) => (MemberState::Unhealthy, Some(probe)),
            Err(_) => (MemberState::Unreachable, None),
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.state != state {
            tracing::info!(runner = %self.client.url(), ?state, "runner state changed");
        }
        seen.state = state;
        if let Some(probe) = probe {
            if seen.instance_id.is_some() && probe.instance_id != seen.instance_id {
                tracing::warn!(runner = %self.client.url(), "runner restarted (new instanceId): its sessions are gone");
            }
            seen.status = probe.status;
            seen.available = probe.available;
            seen.pool_size = probe.pool_size;
            seen.instance_id = probe.instance_id;
        }
    }

    /// Lower is a better place for the next call.
    pub(super) fn load(&self) -> i64 {
        let in_flight = self.in_flight.load(Ordering::Relaxed) as i64;
        let available = self.seen().available.unwrap_or(0) as i64;
        in_flight - available
    }

    pub(super) fn rank(&self) -> u8 {
        match self.seen().state {
            MemberState::Ok => 0,
            MemberState::Unknown => 1,
            MemberState::Unhealthy | MemberState::Unreachable => 2,
        }
    }
}

/// Counts a call in flight on a member until dropped (also when the call is cancelled).
pub(super) struct InFlight<'a>(&'a Member);

impl<'a> InFlight<'a> {
    pub(super) fn enter(member: &'a Member) -> Self {
        member.in_flight.fetch_add(1, Ordering::Relaxed);
        member.calls.fetch_add(1, Ordering::Relaxed);
        InFlight(member)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
