//! The proxy of one runner, shared by its sandboxes: one accept loop per sandbox, each
//! connection served in its own task, all of them ended when the loop's task is.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::address::{host_addresses, AddressCheck};
use crate::connection::{self, Client};
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
            accept_loop(
                proxy,
                Accepting::<tokio::net::TcpStream>::Tcp(listener),
                sandbox,
            )
            .await;
        })
    }

    /// As [`Egress::serve`], for connections that reach the runner some other way (a VM's
    /// tunnel): each stream received on `streams` is one program's connection to the
    /// proxy, served for `sandbox` under the same caps, until the task is aborted or
    /// the sending side is dropped and the last connection has ended.
    pub fn serve_streams<C: Client>(
        &self,
        streams: mpsc::Receiver<C>,
        sandbox: SandboxEgress,
    ) -> JoinHandle<()> {
        let proxy = self.0.clone();
        tokio::spawn(accept_loop(proxy, Accepting::Streams(streams), sandbox))
    }

    /// Prometheus lines: connections, bytes and refusals by host.
    pub fn metrics(&self) -> String {
        self.0.metrics.render()
    }
}

/// Where a sandbox's connections come from.
enum Accepting<C> {
    /// A listener inside the sandbox.
    Tcp(tokio::net::TcpListener),
    /// Streams handed over one by one.
    Streams(mpsc::Receiver<C>),
}

/// What waiting for the next connection gave.
enum Next<C> {
    Tcp(std::io::Result<tokio::net::TcpStream>),
    Stream(C),
    /// No more will come.
    End,
}

impl<C: Client> Accepting<C> {
    async fn next(&mut self) -> Next<C> {
        match self {
            Accepting::Tcp(listener) => Next::Tcp(listener.accept().await.map(|(s, _)| s)),
            Accepting::Streams(streams) => streams.recv().await.map_or(Next::End, Next::Stream),
        }
    }
}

async fn accept_loop<C: Client>(
    proxy: Arc<Proxy>,
    mut source: Accepting<C>,
    sandbox: SandboxEgress,
) {
    let most = proxy.limits.max_connections.saturating_add(REFUSING);
    let mut connections = JoinSet::new();
    let mut open = true;
    while open || !connections.is_empty() {
        tokio::select! {
            next = source.next(), if open => match next {
                Next::Tcp(Ok(stream)) if connections.len() < most => {
                    // As the dialer's: relayed writes go out at once.
                    let _ = stream.set_nodelay(true);
                    connections.spawn(connection::serve(proxy.clone(), sandbox.clone(), stream));
                }
                Next::Stream(stream) if connections.len() < most => {
                    connections.spawn(connection::serve(proxy.clone(), sandbox.clone(), stream));
                }
                Next::Tcp(Ok(_)) | Next::Stream(_) => {
                    tracing::warn!("egress: a sandbox's connection closed unanswered (too many)");
                }
                Next::Tcp(Err(error)) => {
                    tracing::warn!(%error, "egress: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Next::End => open = false,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}
