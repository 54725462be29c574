//! sandbox-egress: the proxy through which a sandbox reaches the hosts the operator opened,
//! and nothing else.
//!
//! A sandbox has no network interface but loopback. When the operator opens names
//! (RUNNER_EGRESS_ALLOW) or address ranges (RUNNER_EGRESS_ALLOW_CIDRS), the runner puts a
//! listener at [`PROXY_ADDR`] inside each sandbox's network namespace and hands it to
//! [`Egress::serve`]; programs find it through the variables of [`proxy_env`]. The proxy
//! runs in the runner, on the host's network.
//!
//! What it is for: the [`Policy`] and the [`Grant`] a sandbox gets from it, the proxy
//! (CONNECT for TLS with the ClientHello's server name checked against the host, plain
//! HTTP by its absolute URL and Host), the address checks (names resolved once, every
//! address checked, the connection made to a checked one), the per-sandbox [`Limits`] and
//! counters ([`Usage`]), refusals (`403` with a line naming the host and the rule), logs
//! and metrics. What it is not for: making the listener in the sandbox, configuration, or
//! the runner's API (the runner does those). It cannot see inside TLS, and a granted
//! name's server may itself relay elsewhere: the crate's README says what it checks and
//! what it cannot.

mod address;
mod connection;
mod dial;
mod head;
mod hello;
mod metrics;
mod policy;
mod proxy;
mod refusal;
mod relay;
mod resolve;
mod sandbox;
mod server;

pub use connection::Client;
pub use dial::{Dial, Dialing, TcpDialer};
pub use policy::{Grant, NotAllowed, Policy, PolicyError, MAX_ENTRIES};
pub use proxy::Timeouts;
pub use resolve::{Lookup, Resolve, SystemResolver};
pub use sandbox::{Limits, SandboxEgress, Usage, DEFAULT_MAX_BYTES, DEFAULT_MAX_CONNECTIONS};
pub use server::{Egress, Options};

/// Inside a sandbox: the proxy's address (a VM guest's init listens there too).
pub use sandbox_protocol::tunnel::PROXY_ADDR;

/// The variables programs in a sandbox get: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, their
/// lower-case forms, and NO_PROXY=localhost,127.0.0.1 (the sandbox's own loopback).
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let url = format!("http://{PROXY_ADDR}");
    let no_proxy = "localhost,127.0.0.1".to_string();
    vec![
        ("HTTP_PROXY", url.clone()),
        ("HTTPS_PROXY", url.clone()),
        ("ALL_PROXY", url.clone()),
        ("http_proxy", url.clone()),
        ("https_proxy", url.clone()),
        ("all_proxy", url),
        ("NO_PROXY", no_proxy.clone()),
        ("no_proxy", no_proxy),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_get_every_proxy_variable_and_loopback_stays_direct() {
        let env = proxy_env();
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            let value = env
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str());
            assert_eq!(value, Some("http://127.0.0.1:3128"), "{name}");
        }
        for name in ["NO_PROXY", "no_proxy"] {
            let value = env
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str());
            assert_eq!(value, Some("localhost,127.0.0.1"), "{name}");
        }
        assert_eq!(env.len(), 8);
    }
}
