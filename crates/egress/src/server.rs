//! The proxy of one runner, shared by its sandboxes: one accept loop per sandbox, each
//! connection served in its own task, all of them ended when the loop's task is.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};

use crate::address::{host_addresses, AddressCheck};
use crate::dial::{Dial, TcpDialer};
use crate::metrics::HostMetrics;
use crate::policy::Policy;
use crate::proxy::{Proxy, Timeouts};
use crate::resolve::{Resolve, SystemResolver};
use crate::sandbox::{Limits, SandboxEgress};

/// Connections a sandbox may have waiting for their refusal beyond its limit (each held at
/// most the head time); past them a connection is closed unanswered.
const REFUSING: usize = 16;

/// What [`Egress::new`] takes as given, open to tests.
#[derive(Debug, Clone)]
pub struct Options {
    /// How names are resolved (default: as the host does, getaddrinfo).
    pub resolver: Arc<dyn Resolve>,
    /// How connections to checked addresses are opened (default: TCP on the host's
    /// network).
    pub dialer: Arc<dyn Dial>,
    /// Lets loopback destinations through the address check, for tests whose servers
    /// listen on loopback. No configuration reaches it: the runner uses [`Egress::new`].
    pub pass_loopback: bool,
    /// Every wait's bound.
    pub timeouts: Timeouts,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            resolver: Arc::new(SystemResolver),
            dialer: Arc::new(TcpDialer),
            pass_loopback: false,
            timeouts: Timeouts::default(),
        }
    }
}

/// The proxy of one runner (one per process), shared by its sandboxes.
#[derive(Clone, Debug)]
pub struct Egress(Arc<Proxy>);

impl Egress {
    /// A proxy for `policy`, each sandbox within `limits`; it reads the host's addresses
    /// (refused as destinations) now.
    pub fn new(policy: Policy, limits: Limits) -> Egress {
        Egress::with_options(policy, limits, Options::default())
    }

    /// [`Egress::new`] with another resolver, dialer, timeouts, or (tests) loopback let
    /// through.
    pub fn with_options(policy: Policy, limits: Limits, options: Options) -> Egress {
        let own = host_addresses();
        let addresses =
            AddressCheck::new(policy.open_ranges().to_vec(), own, options.pass_loopback);
        let metrics = HostMetrics::new(&policy);
        Egress(Arc::new(Proxy {
            policy,
            limits,
            addresses,
            resolver: options.resolver,
            dialer: options.dialer,
            timeouts: options.timeouts,
            metrics,
        }))
    }

    /// The policy it was made with.
    pub fn policy(&self) -> &Policy {
        &self.0.policy
    }

    /// A new sandbox's handle: its grant (none at first) and its counters.
    pub fn sandbox(&self) -> SandboxEgress {
        SandboxEgress::new(self.0.limits)
    }

    /// Serves the connections accepted on `listener` (a TCP listener that lives in the
    /// sandbox's network namespace, non-blocking) for that sandbox until the task is
    /// aborted or dropped (the runner aborts it when the sandbox goes); its connections
    /// end with it. Call it within a tokio runtime.
    pub fn serve(&self, listener: std::net::TcpListener, sandbox: SandboxEgress) -> JoinHandle<()> {
        let proxy = self.0.clone();
        tokio::spawn(async move {
            let listener = match listener
                .set_nonblocking(true)
                .and_then(|()| tokio::net::TcpListener::from_std(listener))
            {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::error!(%error, "egress: cannot serve the sandbox's listener");
                    return;
                }
            };
            accept_loop(proxy, listener, sandbox).await;
        })
    }

    /// Prometheus lines: connections, bytes and refusals by host.
    pub fn metrics(&self) -> String {
        self.0.metrics.render()
    }
}

async fn accept_loop(proxy: Arc<Proxy>, listener: tokio::net::TcpListener, sandbox: SandboxEgress) {
    let most = proxy.limits.max_connections.saturating_add(REFUSING);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) if connections.len() < most => {
                    connections.spawn(crate::connection::serve(proxy.clone(), sandbox.clone(), stream));
                }
                Ok(_) => tracing::warn!("egress: a sandbox's connection closed unanswered (too many)"),
                Err(error) => {
                    tracing::warn!(%error, "egress: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}
