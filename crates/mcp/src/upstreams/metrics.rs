//! Upstream calls counted by server, tool and outcome, for `/metrics`. A program chooses
//! the names it calls: a server not configured, or a tool not allowed, is counted under a
//! fixed label, so that the series stay as few as the allowed tools.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use super::Outcome;

/// The label of a server that is not configured (and of its tool).
pub(super) const OTHER: &str = "_unknown";
/// The label of a tool that is not allowed.
pub(super) const NOT_ALLOWED: &str = "_not_allowed";

/// One series: calls of a tool that ended one way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallCount {
    /// The server's label.
    pub server: String,
    /// The tool's label.
    pub tool: String,
    /// How the calls ended.
    pub outcome: Outcome,
    /// How many.
    pub calls: u64,
}

/// The counters.
#[derive(Debug, Default)]
pub(super) struct Counts(Mutex<BTreeMap<(String, String, Outcome), u64>>);

impl Counts {
    pub(super) fn add(&self, server: String, tool: String, outcome: Outcome) {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *counts.entry((server, tool, outcome)).or_default() += 1;
    }

    pub(super) fn snapshot(&self) -> Vec<CallCount> {
        let counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        counts
            .iter()
            .map(|((server, tool, outcome), calls)| CallCount {
                server: server.clone(),
                tool: tool.clone(),
                outcome: *outcome,
                calls: *calls,
            })
            .collect()
    }
}
