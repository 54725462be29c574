//! A sandbox's way to the runner's proxy (issue 33), where the operator opened hosts:
//! a TCP listener on the proxy's address ([`sandbox_egress::PROXY_ADDR`]) inside the
//! sandbox's network namespace, which still has loopback only and no route.
//!
//! The runner makes it: a short-lived thread of its own enters the sandbox's network
//! namespace (by a pidfd of the sandbox's first process inside it), makes the socket and
//! ends; a socket stays in the namespace it was made in, and the runner's other threads
//! never change namespace. The runner's [`Egress`] then serves what the sandbox's
//! programs connect to it, as the sandbox's own ([`SandboxEgress`]: its grant and its
//! counters), until the link is dropped with the sandbox.

use super::error::ProcessError;
use super::leader::Leader;
use sandbox_egress::{Egress, SandboxEgress, PROXY_ADDR};
use std::io;
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use tokio::task::JoinHandle;

/// A sandbox's proxy: its handle (grant, counters) and the task serving its listener,
/// aborted when the link is dropped (the sandbox destroyed, or its making failed).
pub struct ProxyLink {
    /// The sandbox's grant and counters.
    pub handle: SandboxEgress,
    serving: JoinHandle<()>,
}

impl Drop for ProxyLink {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

/// Makes the listener in the network namespace of the sandbox `leader` leads and has
/// `egress` serve it for a new sandbox handle (granted nothing yet).
pub(super) async fn open(egress: &Egress, leader: &Leader) -> Result<ProxyLink, ProcessError> {
    let pidfd = leader.inside_pidfd().map_err(ProcessError::ProxyListener)?;
    let listener = listener_in(pidfd)
        .await
        .map_err(ProcessError::ProxyListener)?;
    let handle = egress.sandbox();
    let serving = egress.serve(listener, handle.clone());
    Ok(ProxyLink { handle, serving })
}

/// The listener, made by a thread of its own in the network namespace of the process
/// `pidfd` refers to. Not a blocking-pool thread: tokio reuses those, and this one is
/// left in the sandbox's namespace.
async fn listener_in(pidfd: OwnedFd) -> io::Result<TcpListener> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("proxy-listener".into())
        .spawn(move || {
            let _ = tx.send(bind_inside(&pidfd));
        })?;
    rx.await
        .map_err(|_| io::Error::other("the thread making the proxy's listener ended early"))?
}

/// In the calling thread: enters the namespace, binds, and makes the socket
/// non-blocking (as [`Egress::serve`] takes it).
fn bind_inside(pidfd: &OwnedFd) -> io::Result<TcpListener> {
    nix::sched::setns(pidfd, nix::sched::CloneFlags::CLONE_NEWNET)?;
    let listener = TcpListener::bind(PROXY_ADDR)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}
