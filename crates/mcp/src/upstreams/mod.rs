//! The operator's MCP servers whose tools sandboxed programs call (`MCP_UPSTREAMS`):
//! sandbox-mcp is their client, and the only party that holds their addresses and
//! credentials. A program in a sandbox sees names, descriptions and input schemas; its
//! calls come back through the runner ([`run_calls`]) and are made here.
//!
//! - `config`: the TOML file, validated at start ([`UpstreamsConfig`]).
//! - `glob`: the `allow` globs.
//! - `link`: one upstream's connection, kept by a background task: connected and its
//!   tools listed at start, reconnected with backoff when it drops or cannot be made.
//! - `listed`: an upstream's allowed tools and the check of arguments against their
//!   input schemas.
//! - `answer`: one call made and its result made a program's answer.
//! - [`run_calls`]: the calls of one run: budget, cancellation, the run's time, and the
//!   record in its result (`toolCalls`).
//! - [`stubs`]: the tools as Python and TypeScript signatures (`search_tools`).
//! - `metrics`: calls counted by server, tool and outcome, for `/metrics`.

mod answer;
pub mod config;
pub mod glob;
mod link;
pub(crate) mod listed;
mod metrics;
pub mod run_calls;
pub mod stubs;

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use sandbox_protocol::tools::{OfferedServer, ToolsOffer};
use serde_json::Value;
use tokio::sync::Notify;

pub use answer::{Answered, Outcome};
pub use config::{UpstreamConfig, UpstreamsConfig, UpstreamsError};
use link::Live;
pub use listed::AllowedTool;
pub use metrics::CallCount;

/// How long start-up waits for every upstream's first try before serving anyway (the
/// ones still trying join when they answer).
const START_WAIT: Duration = Duration::from_secs(10);

/// The upstreams of this server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Upstreams {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    servers: Vec<Arc<Upstream>>,
    counts: metrics::Counts,
}

/// One upstream: its settings and its connection, if it is up.
#[derive(Debug)]
pub(crate) struct Upstream {
    config: UpstreamConfig,
    live: RwLock<Option<Live>>,
    /// A call found the connection broken: its keeper reconnects at once.
    broken: Notify,
}

impl Upstream {
    fn live(&self) -> Option<Live> {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_live(&self, live: Option<Live>) {
        *self.live.write().unwrap_or_else(PoisonError::into_inner) = live;
    }
}

/// One server's allowed tools now, for `search_tools`.
#[derive(Debug, Clone)]
pub struct ServerTools {
    /// Its name.
    pub name: String,
    /// Whether it is connected now (its tools are absent while it is not).
    pub up: bool,
    /// Its tools programs may call.
    pub tools: Vec<AllowedTool>,
}

/// Stops the upstreams' keepers when dropped: their connections close and their child
/// processes are killed.
#[derive(Debug)]
pub struct Keepers(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Keepers {
    fn drop(&mut self) {
        for keeper in &self.0 {
            keeper.abort();
        }
    }
}

impl Upstreams {
    /// The upstreams of `config`, not connected yet ([`start`](Self::start) connects them).
    pub fn new(config: &UpstreamsConfig) -> Self {
        let servers = config
            .servers
            .iter()
            .map(|config| {
                Arc::new(Upstream {
                    config: config.clone(),
                    live: RwLock::new(None),
                    broken: Notify::new(),
                })
            })
            .collect();
        Upstreams {
            inner: Arc::new(Inner {
                servers,
                counts: metrics::Counts::default(),
            }),
        }
    }

    /// Connects every upstream in the background and keeps it connected until the
    /// returned [`Keepers`] are dropped; returns once each has had its first try (or
    /// after [`START_WAIT`]).
    pub async fn start(&self) -> Keepers {
        let mut keepers = Vec::new();
        let mut firsts = Vec::new();
        for upstream in &self.inner.servers {
            let (tx, rx) = tokio::sync::oneshot::channel();
            keepers.push(tokio::spawn(link::keep(upstream.clone(), tx)));
            firsts.push(rx);
        }
        let all = futures_join(firsts);
        if tokio::time::timeout(START_WAIT, all).await.is_err() {
            tracing::warn!(
                wait_s = START_WAIT.as_secs(),
                "some upstreams have not answered yet: serving without their tools meanwhile"
            );
        }
        Keepers(keepers)
    }

    /// The servers' names, in the file's order.
    pub fn names(&self) -> Vec<String> {
        self.inner
            .servers
            .iter()
            .map(|s| s.config.name.clone())
            .collect()
    }

    /// Every server and its allowed tools now (none while it is down).
    pub fn tools(&self) -> Vec<ServerTools> {
        self.inner
            .servers
            .iter()
            .map(|server| {
                let live = server.live();
                ServerTools {
                    name: server.config.name.clone(),
                    up: live.is_some(),
                    tools: live.map(|l| l.tools.to_vec()).unwrap_or_default(),
                }
            })
            .collect()
    }

    /// What a run is offered: every server, each with its allowed tools now (none while
    /// it is down, so that `tools.<server>` exists in the program either way).
    pub fn offer(&self) -> ToolsOffer {
        ToolsOffer {
            servers: self
                .tools()
                .into_iter()
                .map(|server| OfferedServer {
                    name: server.name,
                    tools: server.tools.iter().map(AllowedTool::offered).collect(),
                })
                .collect(),
        }
    }

    /// The most calls of `server`'s tools one run may make; `None` for a server not
    /// configured.
    pub fn max_calls_per_run(&self, server: &str) -> Option<usize> {
        self.upstream(server).map(|u| u.config.max_calls_per_run)
    }

    /// Calls `tool` of `server` with `arguments`, within `limit` (and the server's own
    /// timeout): refused without reaching the upstream when the tool is not allowed or
    /// the arguments do not match its input schema.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
        limit: Duration,
    ) -> Answered {
        let Some(upstream) = self.upstream(server) else {
            return Answered::refused(format!(
                "there is no server {server:?} among the tools (tools.list() lists them)"
            ));
        };
        let Some(live) = upstream.live() else {
            return Answered::failed(format!(
                "server {server:?} is unreachable now (sandbox-mcp keeps trying it); try again later"
            ));
        };
        let Some(allowed) = live.tools.iter().find(|t| t.name == tool) else {
            return Answered::refused(format!(
                "tool {tool:?} of server {server:?} is not allowed here (tools.list() lists the allowed tools)"
            ));
        };
        if let Err(why) = allowed.check(&arguments) {
            return Answered::refused(format!(
                "the arguments of {server}.{tool} do not match its input schema: {why}"
            ));
        }
        let timeout = upstream.config.timeout.min(limit);
        let answered = answer::call(&live.peer, server, tool, arguments, timeout).await;
        if answered.connection_broken {
            upstream.broken.notify_one();
        }
        answered
    }

    /// The name a call's tool is counted under in `/metrics`: its own when `server` lists
    /// it as allowed now, else a fixed label (a program's made-up names never grow the
    /// series).
    pub fn metric_labels(&self, server: &str, tool: &str) -> (String, String) {
        let Some(upstream) = self.upstream(server) else {
            return (metrics::OTHER.into(), metrics::OTHER.into());
        };
        let listed = upstream
            .live()
            .is_some_and(|live| live.tools.iter().any(|t| t.name == tool));
        let tool = if listed { tool } else { metrics::NOT_ALLOWED };
        (server.to_owned(), tool.to_owned())
    }

    /// Counts one call's outcome for `/metrics`.
    pub fn count(&self, server: &str, tool: &str, outcome: Outcome) {
        let (server, tool) = self.metric_labels(server, tool);
        self.inner.counts.add(server, tool, outcome);
    }

    /// The calls counted so far.
    pub fn counts(&self) -> Vec<CallCount> {
        self.inner.counts.snapshot()
    }

    /// The upstreams connected now, out of all.
    pub fn up(&self) -> (usize, usize) {
        let up = self
            .inner
            .servers
            .iter()
            .filter(|s| s.live().is_some())
            .count();
        (up, self.inner.servers.len())
    }

    fn upstream(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.inner.servers.iter().find(|s| s.config.name == name)
    }
}

#[cfg(test)]
mod tests;

/// Waits for every receiver (a dropped sender counts as heard).
async fn futures_join(receivers: Vec<tokio::sync::oneshot::Receiver<()>>) {
    for receiver in receivers {
        let _ = receiver.await;
    }
}
