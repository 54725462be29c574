//! What every connection of every sandbox reads: the policy, the checks, the resolver,
//! the timeouts and the counters by host.

use std::sync::Arc;
use std::time::Duration;

use crate::address::AddressCheck;
use crate::dial::Dial;
use crate::metrics::HostMetrics;
use crate::policy::Policy;
use crate::resolve::Resolve;
use crate::sandbox::Limits;

/// How long the proxy waits for each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// For the request head (default 10 s).
    pub head: Duration,
    /// For the ClientHello after `200 Connection established` (default 5 s).
    pub hello: Duration,
    /// For resolving, and again for connecting (default 10 s each).
    pub connect: Duration,
    /// For a connection on which nothing moves either way (default 5 min).
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            head: Duration::from_secs(10),
            hello: Duration::from_secs(5),
            connect: Duration::from_secs(10),
            idle: Duration::from_secs(300),
        }
    }
}

/// What every connection of every sandbox reads.
#[derive(Debug)]
pub(crate) struct Proxy {
    pub(crate) policy: Policy,
    pub(crate) limits: Limits,
    pub(crate) addresses: AddressCheck,
    pub(crate) resolver: Arc<dyn Resolve>,
    pub(crate) dialer: Arc<dyn Dial>,
    pub(crate) timeouts: Timeouts,
    pub(crate) metrics: HostMetrics,
}
