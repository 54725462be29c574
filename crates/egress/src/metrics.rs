//! Counters by host for `/metrics`. A host is counted under the policy entry that covers
//! it (`pypi.org`, `*.pythonhosted.org`, `10.1.0.0/16`), and under `_other` when none does,
//! so the number of series is the policy's size plus one whatever programs ask for.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::policy::Policy;

/// The label of hosts no policy entry covers.
pub(crate) const OTHER: &str = "_other";

/// One label's counters.
#[derive(Debug, Default)]
pub(crate) struct HostCounters {
    connections: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    refused: AtomicU64,
}

impl HostCounters {
    pub(crate) fn count_connection(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_bytes(&self, bytes: usize, inbound: bool) {
        let counter = if inbound {
            &self.bytes_in
        } else {
            &self.bytes_out
        };
        counter.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// A metric family: its name, its help, and the counter it shows.
type Family = (&'static str, &'static str, fn(&HostCounters) -> &AtomicU64);

const FAMILIES: [Family; 4] = [
    (
        "sandbox_runner_egress_connections_total",
        "Connections the egress proxy made, by the policy entry covering the host",
        |c| &c.connections,
    ),
    (
        "sandbox_runner_egress_refused_total",
        "Requests the egress proxy refused, by the policy entry covering the host (_other: none)",
        |c| &c.refused,
    ),
    (
        "sandbox_runner_egress_bytes_in_total",
        "Bytes from destinations to sandboxes",
        |c| &c.bytes_in,
    ),
    (
        "sandbox_runner_egress_bytes_out_total",
        "Bytes from sandboxes to destinations",
        |c| &c.bytes_out,
    ),
];

/// Every label's counters, made once from the policy.
#[derive(Debug)]
pub(crate) struct HostMetrics(BTreeMap<String, Arc<HostCounters>>);

impl HostMetrics {
    pub(crate) fn new(policy: &Policy) -> HostMetrics {
        let labels = policy
            .names()
            .into_iter()
            .chain(policy.ranges())
            .chain([OTHER.to_string()]);
        HostMetrics(labels.map(|label| (label, Arc::default())).collect())
    }

    /// The counters of `label` (`None` or an unknown label: `_other`'s).
    pub(crate) fn counters(&self, label: Option<&str>) -> Arc<HostCounters> {
        let found = label.and_then(|label| self.0.get(label));
        match found.or_else(|| self.0.get(OTHER)) {
            Some(counters) => counters.clone(),
            None => Arc::default(),
        }
    }

    /// Prometheus text lines.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for (name, help, counter) in FAMILIES {
            let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} counter");
            for (label, counters) in &self.0 {
                let value = counter(counters).load(Ordering::Relaxed);
                let _ = writeln!(out, "{name}{{host=\"{label}\"}} {value}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_the_policy_entries_and_other() {
        let policy = Policy::parse("pypi.org,*.pythonhosted.org", "10.1.0.0/16").unwrap();
        let metrics = HostMetrics::new(&policy);
        metrics.counters(Some("pypi.org")).count_connection();
        metrics.counters(Some("pypi.org")).count_bytes(10, true);
        metrics.counters(None).count_refused();
        metrics.counters(Some("not-a-label")).count_refused();
        let text = metrics.render();
        assert!(
            text.contains("sandbox_runner_egress_connections_total{host=\"pypi.org\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sandbox_runner_egress_bytes_in_total{host=\"pypi.org\"} 10"),
            "{text}"
        );
        assert!(
            text.contains("sandbox_runner_egress_refused_total{host=\"_other\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("sandbox_runner_egress_refused_total{host=\"10.1.0.0/16\"} 0"),
            "{text}"
        );
        assert!(text.contains("{host=\"*.pythonhosted.org\"}"), "{text}");
        assert_eq!(
            text.matches("sandbox_runner_egress_bytes_out_total{")
                .count(),
            4
        );
    }
}
