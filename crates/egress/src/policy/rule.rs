//! A name rule (`host`, `*.domain`, either with `:port`) and what it covers.

use std::fmt;

/// The ports a rule without one covers.
const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// Which hosts a rule covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Hosts {
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
pub(super) struct Rule {
    pub(super) hosts: Hosts,
    pub(super) port: Option<u16>,
}

impl Rule {
    fn covers_port(&self, port: u16) -> bool {
        match self.port {
            Some(own) => own == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    pub(super) fn covers(&self, name: &str, port: u16) -> bool {
        self.covers_port(port) && self.hosts.covers_name(name)
    }

    pub(super) fn contains(&self, other: &Rule) -> bool {
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
