//! The proxy of one runner, shared by its sandboxes.

use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

use crate::policy::Policy;
use crate::sandbox::{Limits, SandboxEgress};

/// The proxy of one runner (one per process), shared by its sandboxes.
#[derive(Clone, Debug)]
pub struct Egress {
    policy: Policy,
    limits: Limits,
}

impl Egress {
    /// A proxy for `policy`, each sandbox within `limits`.
    pub fn new(policy: Policy, limits: Limits) -> Egress {
        Egress { policy, limits }
    }

    /// The policy it was made with.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// A new sandbox's handle: its grant (none at first) and its counters.
    pub fn sandbox(&self) -> SandboxEgress {
        SandboxEgress::new(self.limits)
    }

    /// Serves the connections accepted on `listener` (a TCP listener that lives in the
    /// sandbox's network namespace, non-blocking) for that sandbox until the task is
    /// aborted or dropped (the runner aborts it when the sandbox goes). Call it within a
    /// tokio runtime.
    pub fn serve(&self, listener: std::net::TcpListener, sandbox: SandboxEgress) -> JoinHandle<()> {
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
            // Fail closed until the proxy is built: every request is refused.
            while let Ok((mut stream, _)) = listener.accept().await {
                sandbox.count_refused();
                let body = "egress: the proxy refuses every request in this build\n";
                let answer = format!(
                    "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        })
    }

    /// Prometheus lines: connections, bytes and refusals by host.
    pub fn metrics(&self) -> String {
        String::new()
    }
}
