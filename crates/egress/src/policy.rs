//! The operator's policy (`RUNNER_EGRESS_ALLOW`, `RUNNER_EGRESS_ALLOW_CIDRS`) and the grants
//! cut from it for one sandbox.
//!
//! A rule is `host`, `*.domain` (the domain's subdomains, not the domain itself) or either
//! with `:port`; without a port a rule covers ports 80 and 443. Names are ASCII (an IDN in
//! its `xn--` form), compared without case and without a trailing dot. A grant is a list of
//! entries of the same forms (or address ranges), each within the policy.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

/// The longest name DNS carries, without its trailing dot.
const MAX_NAME: usize = 253;
/// The longest label of a name.
const MAX_LABEL: usize = 63;
/// Most entries a list may hold (each list, the operator's or a request's).
pub const MAX_ENTRIES: usize = 256;
/// The ports a rule without one covers.
const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// A list entry that does not parse; the message names the entry and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A host name that is not one.
    #[error("egress entry `{entry}`: {reason}")]
    BadName {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A port that is not 1-65535.
    #[error("egress entry `{entry}`: the port must be a number from 1 to 65535")]
    BadPort {
        /// The entry as written.
        entry: String,
    },
    /// An address range that does not parse.
    #[error("egress range `{entry}`: not an IPv4 or IPv6 address or range (e.g. 10.1.0.0/16)")]
    BadRange {
        /// The entry as written.
        entry: String,
    },
    /// An address among the names: addresses are opened by the ranges list.
    #[error("egress entry `{entry}`: an address, not a name; open addresses with RUNNER_EGRESS_ALLOW_CIDRS")]
    AddressAsName {
        /// The entry as written.
        entry: String,
    },
    /// More entries than [`MAX_ENTRIES`].
    #[error("egress list: {count} entries, more than {MAX_ENTRIES}")]
    TooMany {
        /// How many the list had.
        count: usize,
    },
}

/// Which hosts a rule covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Hosts {
    /// This name only.
    Exact(String),
    /// Every subdomain of this name (held without the `*.`).
    Below(String),
}

impl Hosts {
    fn covers_name(&self, name: &str) -> bool {
        match self {
            Hosts::Exact(host) => host == name,
            Hosts::Below(domain) => is_below(name, domain),
        }
    }

    /// Whether every host `other` covers, this covers too.
    fn contains(&self, other: &Hosts) -> bool {
        match (self, other) {
            (_, Hosts::Exact(name)) => self.covers_name(name),
            (Hosts::Below(domain), Hosts::Below(sub)) => sub == domain || is_below(sub, domain),
            (Hosts::Exact(_), Hosts::Below(_)) => false,
        }
    }
}

fn is_below(name: &str, domain: &str) -> bool {
    name.len() > domain.len() + 1
        && name.ends_with(domain)
        && name.as_bytes()[name.len() - domain.len() - 1] == b'.'
}

/// A name rule: which hosts, on which port (`None`: 80 and 443).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Rule {
    hosts: Hosts,
    port: Option<u16>,
}

impl Rule {
    fn covers_port(&self, port: u16) -> bool {
        match self.port {
            Some(own) => own == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    fn covers(&self, name: &str, port: u16) -> bool {
        self.covers_port(port) && self.hosts.covers_name(name)
    }

    fn contains(&self, other: &Rule) -> bool {
        let ports = match other.port {
            Some(port) => self.covers_port(port),
            None => self.port.is_none(),
        };
        ports && self.hosts.contains(&other.hosts)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.hosts {
            Hosts::Exact(host) => write!(f, "{host}")?,
            Hosts::Below(domain) => write!(f, "*.{domain}")?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

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

/// A request's target host: a name to resolve or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    /// A DNS name, normalized (lower case, no trailing dot).
    Name(String),
    /// An address as written in the request.
    Address(IpAddr),
}

impl Host {
    /// Reads a request's host (no port; IPv6 without brackets).
    pub(crate) fn parse(text: &str) -> Result<Host, PolicyError> {
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Host::Address(ip));
        }
        normalize_name(text).map(Host::Name)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Address(ip) => write!(f, "{ip}"),
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

enum Entry {
    Rule(Rule),
    Range(IpNet),
}

fn parse_entry(text: &str) -> Result<Entry, PolicyError> {
    match parse_rule(text.trim()) {
        Err(PolicyError::AddressAsName { .. }) => parse_range(text.trim()).map(Entry::Range),
        other => other.map(Entry::Rule),
    }
}

fn split(list: &str) -> Result<impl Iterator<Item = &str>, PolicyError> {
    let count = list.split(',').filter(|e| !e.trim().is_empty()).count();
    if count > MAX_ENTRIES {
        return Err(PolicyError::TooMany { count });
    }
    Ok(list.split(',').map(str::trim).filter(|e| !e.is_empty()))
}

fn dedup<T: PartialEq>(items: Vec<T>) -> Vec<T> {
    let mut kept: Vec<T> = Vec::with_capacity(items.len());
    for item in items {
        if !kept.contains(&item) {
            kept.push(item);
        }
    }
    kept
}

fn parse_range(entry: &str) -> Result<IpNet, PolicyError> {
    let bad = || PolicyError::BadRange {
        entry: entry.to_string(),
    };
    let range = match entry.parse::<IpNet>() {
        Ok(range) => range,
        Err(_) => IpNet::from(entry.parse::<IpAddr>().map_err(|_| bad())?),
    };
    Ok(range.trunc())
}

fn parse_rule(entry: &str) -> Result<Rule, PolicyError> {
    if entry.parse::<IpAddr>().is_ok() || entry.starts_with('[') || entry.contains('/') {
        return Err(PolicyError::AddressAsName {
            entry: entry.to_string(),
        });
    }
    let (host, port) = match entry.rsplit_once(':') {
        Some((host, port)) => (host, Some(parse_port(entry, port)?)),
        None => (entry, None),
    };
    if host.parse::<IpAddr>().is_ok() {
        return Err(PolicyError::AddressAsName {
            entry: entry.to_string(),
        });
    }
    let bad = |reason| PolicyError::BadName {
        entry: entry.to_string(),
        reason,
    };
    let hosts = match host.strip_prefix("*.") {
        Some(domain) => Hosts::Below(normalize_name(domain).map_err(|e| reason_of(e, bad))?),
        None if host.contains('*') => {
            return Err(bad("`*` only as a whole first label (`*.domain`)"))
        }
        None => Hosts::Exact(normalize_name(host).map_err(|e| reason_of(e, bad))?),
    };
    Ok(Rule { hosts, port })
}

fn reason_of(error: PolicyError, bad: impl Fn(&'static str) -> PolicyError) -> PolicyError {
    match error {
        PolicyError::BadName { reason, .. } => bad(reason),
        other => other,
    }
}

fn parse_port(entry: &str, port: &str) -> Result<u16, PolicyError> {
    // `u16::from_str` takes a leading `+`: a port is digits only.
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    match port.parse::<u16>() {
        Ok(port) if digits && port != 0 => Ok(port),
        _ => Err(PolicyError::BadPort {
            entry: entry.to_string(),
        }),
    }
}

/// Lower case, no trailing dot, ASCII labels of letters, digits, `-` and `_`.
fn normalize_name(name: &str) -> Result<String, PolicyError> {
    let bad = |reason| PolicyError::BadName {
        entry: name.to_string(),
        reason,
    };
    if !name.is_ascii() {
        return Err(bad(
            "not ASCII: write an international name in its xn-- form",
        ));
    }
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return Err(bad("empty name"));
    }
    if name.len() > MAX_NAME {
        return Err(bad("longer than 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > MAX_LABEL {
            return Err(bad("each label (between dots) must be 1 to 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad("a name holds letters, digits, `-`, `_` and dots only"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(bad("a label cannot start or end with `-`"));
        }
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &str) -> Policy {
        Policy::parse(allow, "").unwrap()
    }

    fn grant(policy: &Policy, names: &[&str]) -> Result<Vec<String>, Vec<String>> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        policy.grant(&names).map(|g| g.names()).map_err(|e| e.0)
    }

    fn name(text: &str) -> Host {
        Host::parse(text).unwrap()
    }

    #[test]
    fn empty_lists_are_off() {
        assert!(Policy::parse("", "").unwrap().is_off());
        assert!(Policy::parse(" , ", " ").unwrap().is_off());
        assert!(!Policy::parse("", "10.0.0.0/8").unwrap().is_off());
        assert!(!policy("pypi.org").is_off());
    }

    #[test]
    fn names_are_normalized() {
        let policy = policy(" PyPI.org. , *.PythonHosted.org,internal.example:8443, pypi.org");
        assert_eq!(
            policy.names(),
            vec!["pypi.org", "*.pythonhosted.org", "internal.example:8443"]
        );
        let policy = Policy::parse("", "10.1.2.3/16, 2001:db8::1, 192.0.2.7").unwrap();
        assert_eq!(
            policy.ranges(),
            vec!["10.1.0.0/16", "2001:db8::1/128", "192.0.2.7/32"]
        );
    }

    #[test]
    fn bad_entries_are_named() {
        let cases = [
            ("pypi.org:0", "pypi.org:0"),
            ("pypi.org:65536", "pypi.org:65536"),
            ("pypi.org:+443", "pypi.org:+443"),
            ("pypi.org:", "pypi.org:"),
            ("bücher.example", "bücher.example"),
            ("*", "*"),
            ("a.*.org", "a.*.org"),
            ("*example.org", "*example.org"),
            ("a..org", "a..org"),
            ("-a.org", "-a.org"),
            ("a b.org", "a b.org"),
            ("10.0.0.1", "10.0.0.1"),
            ("10.0.0.1:443", "10.0.0.1:443"),
            ("[::1]:443", "[::1]:443"),
            ("10.0.0.0/8", "10.0.0.0/8"),
        ];
        for (entry, named) in cases {
            let error = Policy::parse(&format!("pypi.org,{entry}"), "").unwrap_err();
            assert!(
                error.to_string().contains(&format!("`{named}`")),
                "{entry}: {error}"
            );
        }
        let error = Policy::parse("", "10.0.0.0/33").unwrap_err();
        assert_eq!(
            error,
            PolicyError::BadRange {
                entry: "10.0.0.0/33".into()
            }
        );
        assert!(Policy::parse("", "example.org").is_err());
        let label = format!("{}.org", "a".repeat(64));
        assert!(Policy::parse(&label, "").is_err());
        let error = Policy::parse("bücher.example", "").unwrap_err();
        assert!(error.to_string().contains("xn--"), "{error}");
    }

    #[test]
    fn lists_are_bounded() {
        let long = vec!["a.org"; MAX_ENTRIES + 1].join(",");
        assert!(matches!(
            Policy::parse(&long, ""),
            Err(PolicyError::TooMany { .. })
        ));
        let policy = policy("a.org");
        let names = vec!["a.org".to_string(); MAX_ENTRIES + 1];
        assert!(policy.grant(&names).is_err());
    }

    #[test]
    fn a_host_rule_covers_the_host_on_80_and_443() {
        let grant = policy("pypi.org").grant_all();
        assert!(grant.allows(&name("pypi.org"), 443));
        assert!(grant.allows(&name("pypi.org"), 80));
        assert!(grant.allows(&name("PYPI.ORG."), 443));
        assert!(!grant.allows(&name("pypi.org"), 8443));
        assert!(!grant.allows(&name("www.pypi.org"), 443));
        assert!(!grant.allows(&name("evilpypi.org"), 443));
    }

    #[test]
    fn a_wildcard_covers_subdomains_not_the_domain() {
        let grant = policy("*.pythonhosted.org").grant_all();
        assert!(grant.allows(&name("files.pythonhosted.org"), 443));
        assert!(grant.allows(&name("a.b.pythonhosted.org"), 443));
        assert!(!grant.allows(&name("pythonhosted.org"), 443));
        assert!(!grant.allows(&name("evilpythonhosted.org"), 443));
    }

    #[test]
    fn a_port_rule_covers_that_port_only() {
        let grant = policy("internal.example:8443").grant_all();
        assert!(grant.allows(&name("internal.example"), 8443));
        assert!(!grant.allows(&name("internal.example"), 443));
        assert!(!grant.allows(&name("internal.example"), 80));
    }

    #[test]
    fn addresses_are_allowed_only_inside_the_ranges() {
        let grant = Policy::parse("pypi.org", "10.1.0.0/16")
            .unwrap()
            .grant_all();
        assert!(grant.allows(&Host::parse("10.1.2.3").unwrap(), 5000));
        assert!(!grant.allows(&Host::parse("10.2.0.1").unwrap(), 443));
        let grant = policy("pypi.org").grant_all();
        assert!(!grant.allows(&Host::parse("151.101.0.223").unwrap(), 443));
    }

    #[test]
    fn a_grant_is_a_subset_of_the_policy() {
        let policy = Policy::parse(
            "pypi.org,*.pythonhosted.org,internal.example:8443",
            "10.1.0.0/16",
        )
        .unwrap();
        assert_eq!(grant(&policy, &[]), Ok(vec![]));
        assert_eq!(grant(&policy, &["PyPI.org."]), Ok(vec!["pypi.org".into()]));
        assert_eq!(
            grant(&policy, &["pypi.org:443"]),
            Ok(vec!["pypi.org:443".into()])
        );
        assert_eq!(
            grant(&policy, &["files.pythonhosted.org"]),
            Ok(vec!["files.pythonhosted.org".into()])
        );
        assert_eq!(
            grant(&policy, &["*.pythonhosted.org"]),
            Ok(vec!["*.pythonhosted.org".into()])
        );
        assert_eq!(
            grant(&policy, &["*.a.pythonhosted.org"]),
            Ok(vec!["*.a.pythonhosted.org".into()])
        );
        assert_eq!(
            grant(&policy, &["internal.example:8443"]),
            Ok(vec!["internal.example:8443".into()])
        );
        assert_eq!(
            grant(&policy, &["10.1.2.0/24", "10.1.0.9"]),
            Ok(vec!["10.1.2.0/24".into(), "10.1.0.9/32".into()])
        );
        let outside = [
            "pypi.org:8080",
            "pythonhosted.org",
            "internal.example",
            "example.com",
            "*.org",
            "10.2.0.0/16",
            "bad name",
        ];
        for entry in outside {
            assert_eq!(
                grant(&policy, &["pypi.org", entry]),
                Err(vec![entry.to_string()]),
                "{entry}"
            );
        }
        let error = policy.grant(&["a.com".into(), "b.com".into()]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "egress: not within the operator's policy: a.com, b.com"
        );
    }

    #[test]
    fn grant_all_and_none() {
        let policy = Policy::parse("pypi.org,*.pythonhosted.org", "10.1.0.0/16").unwrap();
        assert_eq!(
            policy.grant_all().names(),
            vec!["pypi.org", "*.pythonhosted.org", "10.1.0.0/16"]
        );
        assert!(Grant::none().is_none());
        assert_eq!(Grant::none().names(), Vec::<String>::new());
        assert!(!Grant::none().allows(&name("pypi.org"), 443));
    }

    #[test]
    fn labels_are_the_covering_entry() {
        let policy = Policy::parse("pypi.org,*.pythonhosted.org", "10.1.0.0/16").unwrap();
        assert_eq!(
            policy
                .label(&name("files.pythonhosted.org"), 443)
                .as_deref(),
            Some("*.pythonhosted.org")
        );
        assert_eq!(
            policy
                .label(&Host::parse("10.1.0.1").unwrap(), 80)
                .as_deref(),
            Some("10.1.0.0/16")
        );
        assert_eq!(policy.label(&name("example.com"), 443), None);
    }
}
