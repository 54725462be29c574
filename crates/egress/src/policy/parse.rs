//! The lists' entries read: names checked and normalized, ports, address ranges.

use std::net::IpAddr;

use ipnet::IpNet;

use super::error::PolicyError;
use super::name::normalize_name;
use super::rule::{Hosts, Rule};
use super::MAX_ENTRIES;

pub(super) enum Entry {
    Rule(Rule),
    Range(IpNet),
}

pub(super) fn parse_entry(text: &str) -> Result<Entry, PolicyError> {
    match parse_rule(text.trim()) {
        Err(PolicyError::AddressAsName { .. }) => parse_range(text.trim()).map(Entry::Range),
        other => other.map(Entry::Rule),
    }
}

pub(super) fn split(list: &str) -> Result<impl Iterator<Item = &str>, PolicyError> {
    let count = list.split(',').filter(|e| !e.trim().is_empty()).count();
    if count > MAX_ENTRIES {
        return Err(PolicyError::TooMany { count });
    }
    Ok(list.split(',').map(str::trim).filter(|e| !e.is_empty()))
}

pub(super) fn dedup<T: PartialEq>(items: Vec<T>) -> Vec<T> {
    let mut kept: Vec<T> = Vec::with_capacity(items.len());
    for item in items {
        if !kept.contains(&item) {
            kept.push(item);
        }
    }
    kept
}

pub(super) fn parse_range(entry: &str) -> Result<IpNet, PolicyError> {
    let bad = || PolicyError::BadRange {
        entry: entry.to_string(),
    };
    let range = match entry.parse::<IpNet>() {
        Ok(range) => range,
        Err(_) => IpNet::from(entry.parse::<IpAddr>().map_err(|_| bad())?),
    };
    Ok(range.trunc())
}

pub(super) fn parse_rule(entry: &str) -> Result<Rule, PolicyError> {
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
