//! Which destination addresses the proxy refuses.
//!
//! Refused unless RUNNER_EGRESS_ALLOW_CIDRS names them: loopback, private (RFC 1918,
//! 100.64.0.0/10, fc00::/7), link-local (169.254.0.0/16 with the cloud metadata address,
//! fe80::/10), multicast, unspecified, broadcast, and the runner host's own addresses (read
//! once at start). Other reserved ranges pass: some networks serve real hosts from them.
//! An IPv4-mapped IPv6 address is judged as its IPv4 address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forbidden {
    Loopback,
    Private,
    LinkLocal,
    Multicast,
    Unspecified,
    Broadcast,
    ThisHost,
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Forbidden::Loopback => "a loopback address",
            Forbidden::Private => "a private address",
            Forbidden::LinkLocal => "a link-local address",
            Forbidden::Multicast => "a multicast address",
            Forbidden::Unspecified => "an unspecified address",
            Forbidden::Broadcast => "the broadcast address",
            Forbidden::ThisHost => "an address of the runner's host",
        })
    }
}

/// The address check of one proxy.
#[derive(Debug, Clone)]
pub(crate) struct AddressCheck {
    open: Vec<IpNet>,
    own: Vec<IpAddr>,
    pass_loopback: bool,
}

impl AddressCheck {
    /// `open`: RUNNER_EGRESS_ALLOW_CIDRS; `own`: the host's addresses; `pass_loopback`: tests
    /// only, lets loopback destinations through (their servers listen there).
    pub(crate) fn new(open: Vec<IpNet>, own: Vec<IpAddr>, pass_loopback: bool) -> AddressCheck {
        AddressCheck {
            open,
            own: own.into_iter().map(canonical).collect(),
            pass_loopback,
        }
    }

    /// Whether the proxy may connect to `ip`.
    pub(crate) fn check(&self, ip: IpAddr) -> Result<(), Forbidden> {
        let ip = canonical(ip);
        if self.open.iter().any(|range| range.contains(&ip)) {
            return Ok(());
        }
        if self.pass_loopback && ip.is_loopback() {
            return Ok(());
        }
        match classify(ip) {
            Some(reason) => Err(reason),
            None if self.own.contains(&ip) => Err(Forbidden::ThisHost),
            None => Ok(()),
        }
    }
}

/// The host's own addresses, every interface's (empty, with a warning, if they cannot be
/// read: the class checks still refuse loopback and private addresses).
pub(crate) fn host_addresses() -> Vec<IpAddr> {
    match nix::ifaddrs::getifaddrs() {
        Ok(interfaces) => interfaces
            .filter_map(|interface| interface.address)
            .filter_map(|address| {
                let v4 = address.as_sockaddr_in().map(|a| IpAddr::V4(a.ip()));
                v4.or_else(|| address.as_sockaddr_in6().map(|a| IpAddr::V6(a.ip())))
            })
            .collect(),
        Err(error) => {
            tracing::warn!(%error, "egress: cannot read the host's addresses");
            Vec::new()
        }
    }
}

/// An IPv4-mapped IPv6 address as its IPv4 address; others as they are.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

fn classify(ip: IpAddr) -> Option<Forbidden> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Forbidden> {
    let [a, b, ..] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some(Forbidden::Unspecified)
    } else if ip.is_loopback() {
        Some(Forbidden::Loopback)
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        Some(Forbidden::Private)
    } else if ip.is_link_local() {
        Some(Forbidden::LinkLocal)
    } else if ip.is_multicast() {
        Some(Forbidden::Multicast)
    } else if ip.is_broadcast() {
        Some(Forbidden::Broadcast)
    } else {
        None
    }
}

fn classify_v6(ip: Ipv6Addr) -> Option<Forbidden> {
    let first = ip.segments()[0];
    if ip.is_unspecified() {
        Some(Forbidden::Unspecified)
    } else if ip.is_loopback() {
        Some(Forbidden::Loopback)
    } else if first & 0xfe00 == 0xfc00 {
        Some(Forbidden::Private)
    } else if first & 0xffc0 == 0xfe80 {
        Some(Forbidden::LinkLocal)
    } else if ip.is_multicast() {
        Some(Forbidden::Multicast)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(open: &[&str], own: &[&str], ip: &str) -> Result<(), Forbidden> {
        let open = open.iter().map(|r| r.parse().unwrap()).collect();
        let own = own.iter().map(|a| a.parse().unwrap()).collect();
        AddressCheck::new(open, own, false).check(ip.parse().unwrap())
    }

    #[test]
    fn refuses_each_class() {
        let cases = [
            ("127.0.0.1", Forbidden::Loopback),
            ("127.200.0.9", Forbidden::Loopback),
            ("::1", Forbidden::Loopback),
            ("10.0.0.5", Forbidden::Private),
            ("172.16.0.1", Forbidden::Private),
            ("172.31.255.255", Forbidden::Private),
            ("192.168.1.1", Forbidden::Private),
            ("100.64.0.1", Forbidden::Private),
            ("100.127.255.255", Forbidden::Private),
            ("fd00::1", Forbidden::Private),
            ("fc00::1", Forbidden::Private),
            ("169.254.169.254", Forbidden::LinkLocal),
            ("fe80::1", Forbidden::LinkLocal),
            ("224.0.0.1", Forbidden::Multicast),
            ("ff02::1", Forbidden::Multicast),
            ("0.0.0.0", Forbidden::Unspecified),
            ("0.1.2.3", Forbidden::Unspecified),
            ("::", Forbidden::Unspecified),
            ("255.255.255.255", Forbidden::Broadcast),
            ("::ffff:10.0.0.5", Forbidden::Private),
            ("::ffff:127.0.0.1", Forbidden::Loopback),
            ("::ffff:169.254.169.254", Forbidden::LinkLocal),
        ];
        for (ip, reason) in cases {
            assert_eq!(check(&[], &[], ip), Err(reason), "{ip}");
        }
    }

    #[test]
    fn passes_public_and_other_reserved_ranges() {
        for ip in [
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "192.0.2.10",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "240.0.0.1",
            "2606:4700::1",
            "2001:db8::1",
        ] {
            assert_eq!(check(&[], &[], ip), Ok(()), "{ip}");
        }
    }

    #[test]
    fn refuses_the_hosts_own_addresses() {
        assert_eq!(
            check(&[], &["203.0.113.5"], "203.0.113.5"),
            Err(Forbidden::ThisHost)
        );
        assert_eq!(
            check(&[], &["203.0.113.5"], "::ffff:203.0.113.5"),
            Err(Forbidden::ThisHost)
        );
        assert_eq!(check(&[], &["203.0.113.5"], "203.0.113.6"), Ok(()));
    }

    #[test]
    fn open_ranges_pass_whatever_the_class() {
        assert_eq!(check(&["10.1.0.0/16"], &[], "10.1.2.3"), Ok(()));
        assert_eq!(
            check(&["10.1.0.0/16"], &[], "10.2.0.1"),
            Err(Forbidden::Private)
        );
        assert_eq!(check(&["127.0.0.0/8"], &["127.0.0.1"], "127.0.0.1"), Ok(()));
        assert_eq!(check(&["fd00::/8"], &[], "fd00::1"), Ok(()));
    }

    #[test]
    fn pass_loopback_lets_loopback_only() {
        let check = AddressCheck::new(Vec::new(), vec!["127.0.0.1".parse().unwrap()], true);
        assert_eq!(check.check("127.0.0.1".parse().unwrap()), Ok(()));
        assert_eq!(
            check.check("10.0.0.1".parse().unwrap()),
            Err(Forbidden::Private)
        );
    }

    #[test]
    fn reads_the_hosts_addresses() {
        assert!(host_addresses().contains(&"127.0.0.1".parse().unwrap()));
    }
}
