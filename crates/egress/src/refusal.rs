//! What the proxy answers a program it does not serve: the status and a short text body
//! naming the host and the rule.

use std::fmt;
use std::net::IpAddr;

use crate::address::Forbidden;
use crate::head::BadRequest;

/// A request the proxy does not serve, and why.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The host (or port) is not in the sandbox's grant.
    NotGranted {
        target: String,
        allowed: Vec<String>,
    },
    /// Every address of the name is one the proxy refuses.
    Address {
        host: String,
        ip: IpAddr,
        why: Forbidden,
    },
    /// The sandbox used its bytes.
    BytesUsedUp { max: u64 },
    /// The sandbox has its most connections open.
    TooManyConnections { max: usize },
    /// A plain HTTP request whose Host header names another host than its URL.
    HostMismatch { header: String, target: String },
    /// The request's host is not a host name.
    BadHost { host: String },
    /// The name does not resolve (or not in time).
    Unresolved { host: String, error: String },
    /// No address of the name took the connection.
    Unreachable { target: String, error: String },
    /// The head could not be served.
    BadRequest(BadRequest),
    /// The head was over the size limit.
    HeadTooLarge,
    /// The head did not arrive in time.
    HeadTimeout,
}

impl Refusal {
    /// The HTTP status line's code and reason.
    pub(crate) fn status(&self) -> (u16, &'static str) {
        match self {
            Refusal::NotGranted { .. }
            | Refusal::Address { .. }
            | Refusal::BytesUsedUp { .. }
            | Refusal::TooManyConnections { .. }
            | Refusal::HostMismatch { .. } => (403, "Forbidden"),
            Refusal::BadHost { .. } | Refusal::BadRequest(_) => (400, "Bad Request"),
            Refusal::Unresolved { .. } | Refusal::Unreachable { .. } => (502, "Bad Gateway"),
            Refusal::HeadTooLarge => (431, "Request Header Fields Too Large"),
            Refusal::HeadTimeout => (408, "Request Timeout"),
        }
    }

    /// Whether it counts as a refusal (a policy or limit said no), not a failure.
    pub(crate) fn is_refusal(&self) -> bool {
        self.status().0 == 403
    }

    /// The whole answer: status line, headers, body.
    pub(crate) fn answer(&self) -> Vec<u8> {
        let (code, reason) = self.status();
        let body = format!("{self}\n");
        format!(
            "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotGranted { target, allowed } if allowed.is_empty() => {
                write!(f, "egress: {target} is not allowed (allowed: nothing)")
            }
            Refusal::NotGranted { target, allowed } => {
                write!(f, "egress: {target} is not allowed (allowed: {})", allowed.join(", "))
            }
            Refusal::Address { host, ip, why } => write!(f, "egress: {host} resolves to {ip}, {why}"),
            Refusal::BytesUsedUp { max } => write!(
                f,
                "egress: this sandbox has used its {max} bytes of network traffic (RUNNER_EGRESS_MAX_BYTES)"
            ),
            Refusal::TooManyConnections { max } => write!(
                f,
                "egress: this sandbox already has {max} connections open, its most at once"
            ),
            Refusal::HostMismatch { header, target } => write!(
                f,
                "egress: the Host header ({header}) names another host than the URL ({target})"
            ),
            Refusal::BadHost { host } => write!(f, "egress: `{host}` is not a host name"),
            Refusal::Unresolved { host, error } => write!(f, "egress: {host} does not resolve ({error})"),
            Refusal::Unreachable { target, error } => write!(f, "egress: cannot reach {target} ({error})"),
            Refusal::BadRequest(bad) => write!(f, "{bad}"),
            Refusal::HeadTooLarge => write!(
                f,
                "egress: the request head is over {} bytes",
                crate::head::MAX_HEAD
            ),
            Refusal::HeadTimeout => write!(f, "egress: the request head did not arrive in time"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_name_the_host_and_the_rule() {
        let refusal = Refusal::NotGranted {
            target: "api.example.com:443".into(),
            allowed: vec!["pypi.org".into(), "*.pythonhosted.org".into()],
        };
        assert_eq!(
            refusal.to_string(),
            "egress: api.example.com:443 is not allowed (allowed: pypi.org, *.pythonhosted.org)"
        );
        let refusal = Refusal::Address {
            host: "example.org".into(),
            ip: "10.0.0.5".parse().unwrap(),
            why: Forbidden::Private,
        };
        assert_eq!(
            refusal.to_string(),
            "egress: example.org resolves to 10.0.0.5, a private address"
        );
        let answer = String::from_utf8(refusal.answer()).unwrap();
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        assert!(answer
            .ends_with("\r\n\r\negress: example.org resolves to 10.0.0.5, a private address\n"));
        assert!(refusal.is_refusal());
        assert!(!Refusal::HeadTimeout.is_refusal());
    }
}
