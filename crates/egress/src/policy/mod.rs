//! The operator's policy (`RUNNER_EGRESS_ALLOW`, `RUNNER_EGRESS_ALLOW_CIDRS`) and the grants
//! cut from it for one sandbox.
//!
//! A rule is `host`, `*.domain` (the domain's subdomains, not the domain itself) or either
//! with `:port`; without a port a rule covers ports 80 and 443. Names are ASCII (an IDN in
//! its `xn--` form), compared without case and without a trailing dot. A grant is a list of
//! entries of the same forms (or address ranges), each within the policy.

mod error;
mod name;
mod parse;
mod rule;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use ipnet::IpNet;

pub use error::PolicyError;
pub(crate) use name::Host;
use parse::{dedup, parse_entry, parse_range, parse_rule, split, Entry};
use rule::Rule;

/// Most entries a list may hold (each list, the operator's or a request's).
pub const MAX_ENTRIES: usize = 256;

/// The operator's policy: RUNNER_EGRESS_ALLOW and RUNNER_EGRESS_ALLOW_CIDRS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
    ranges: Vec<IpNet>,
}

impl Policy {
    /// Parses the two lists (comma-separated; empty strings: nothing open). Errors name
    /// the entry (a bad name, a bad port, a bad range).
    pub fn parse(allow: &str, cidrs: &str) -> Result<Policy, PolicyError> {
        let rules = dedup(
            split(allow)?
                .map(parse_rule)
                .collect::<Result<Vec<_>, _>>()?,
        );
        let ranges = dedup(
            split(cidrs)?
                .map(parse_range)
                .collect::<Result<Vec<_>, _>>()?,
        );
        Ok(Policy { rules, ranges })
    }

    /// Whether nothing is open (egress off: no listener, no proxy variables).
    pub fn is_off(&self) -> bool {
        self.rules.is_empty() && self.ranges.is_empty()
    }

    /// The rules as the operator wrote them, normalized (`host`, `*.domain`, `host:port`),
    /// for /health and tool descriptions.
    pub fn names(&self) -> Vec<String> {
        self.rules.iter().map(Rule::to_string).collect()
    }

    /// The address ranges (RUNNER_EGRESS_ALLOW_CIDRS), normalized.
    pub fn ranges(&self) -> Vec<String> {
        self.ranges.iter().map(IpNet::to_string).collect()
    }

    /// The grant for a request's `egress` list: each entry must be within the policy (one
    /// of its rules, or a name/port one of its rules covers); else the entries that are not.
    ///
    /// An entry may also be an address or range within RUNNER_EGRESS_ALLOW_CIDRS, which
    /// opens IP literals inside it.
    pub fn grant(&self, names: &[String]) -> Result<Grant, NotAllowed> {
        if names.len() > MAX_ENTRIES {
            return Err(NotAllowed(vec![format!(
                "{} entries (at most {MAX_ENTRIES})",
                names.len()
            )]));
        }
        let mut rules = Vec::new();
        let mut ranges = Vec::new();
        let mut outside = Vec::new();
        for name in names {
            match parse_entry(name) {
                Ok(Entry::Rule(rule)) if self.rules.iter().any(|own| own.contains(&rule)) => {
                    rules.push(rule)
                }
                Ok(Entry::Range(range)) if self.ranges.iter().any(|own| own.contains(&range)) => {
                    ranges.push(range)
                }
                _ => outside.push(name.clone()),
            }
        }
        if !outside.is_empty() {
            return Err(NotAllowed(outside));
        }
        Ok(Grant::from_parts(dedup(rules), dedup(ranges)))
    }

    /// Every allowed name (RUNNER_EGRESS_DEFAULT=all).
    pub fn grant_all(&self) -> Grant {
        Grant::from_parts(self.rules.clone(), self.ranges.clone())
    }

    /// The ranges whose addresses pass the address check although private, loopback, ...
    pub(crate) fn open_ranges(&self) -> &[IpNet] {
        &self.ranges
    }

    /// The policy entry covering `host:port` (its normalized text), for metrics labels.
    pub(crate) fn label(&self, host: &Host, port: u16) -> Option<String> {
        match host {
            Host::Name(name) => self
                .rules
                .iter()
                .find(|rule| rule.covers(name, port))
                .map(Rule::to_string),
            Host::Address(ip) => self
                .ranges
                .iter()
                .find(|range| range.contains(ip))
                .map(IpNet::to_string),
        }
    }
}

/// What one sandbox may reach now (cheap to clone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant(Arc<GrantParts>);

#[derive(Debug, PartialEq, Eq, Default)]
struct GrantParts {
    rules: Vec<Rule>,
    ranges: Vec<IpNet>,
}

impl Grant {
    fn from_parts(rules: Vec<Rule>, ranges: Vec<IpNet>) -> Grant {
        Grant(Arc::new(GrantParts { rules, ranges }))
    }

    /// Nothing open.
    pub fn none() -> Grant {
        Grant::from_parts(Vec::new(), Vec::new())
    }

    /// The granted entries, normalized (names first, then ranges).
    pub fn names(&self) -> Vec<String> {
        let names = self.0.rules.iter().map(Rule::to_string);
        names
            .chain(self.0.ranges.iter().map(IpNet::to_string))
            .collect()
    }

    /// Whether nothing is granted.
    pub fn is_none(&self) -> bool {
        self.0.rules.is_empty() && self.0.ranges.is_empty()
    }

    /// Whether `host:port` is granted.
    pub(crate) fn allows(&self, host: &Host, port: u16) -> bool {
        match host {
            Host::Name(name) => self.0.rules.iter().any(|rule| rule.covers(name, port)),
            Host::Address(ip) => self.0.ranges.iter().any(|range| range.contains(ip)),
        }
    }
}

/// `NotAllowed`: the entries outside the policy (its Display says which), for 400
/// `egress_not_allowed`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress: not within the operator's policy: {}", .0.join(", "))]
pub struct NotAllowed(pub Vec<String>);
