//! A session's hosts at the runner's proxy (issue 33): its grant, which outlives its
//! sandboxes (and, saved with a paused session, its runner: a runner started on the same
//! data folder gives back what its own policy still allows, see
//! [`EgressConfig::regrant`](crate::config::EgressConfig::regrant)), and
//! `PATCH /sessions/{id}`, which changes it.

use super::{lock, SessionError, Sessions};
use crate::pool::PooledSandbox;
use sandbox_egress::{Grant, SandboxEgress};
use sandbox_protocol::api::SessionInfo;

/// A session's hosts at the runner's proxy: its grant (none: the runner opens no host),
/// which outlives its sandboxes (a woken session's new one gets it), and the handle of
/// its sandbox now, which takes each change at once (its running processes' next
/// connections too).
#[derive(Default)]
pub(super) struct SessionEgress {
    grant: Option<Grant>,
    handle: Option<SandboxEgress>,
}

impl SessionEgress {
    /// The session's sandbox is now the one with `handle`: it gets the grant.
    pub(super) fn attach(&mut self, handle: Option<&SandboxEgress>) {
        self.handle = handle.cloned();
        self.apply();
    }

    /// The session's grant is now `grant`, its sandbox's too.
    pub(super) fn set(&mut self, grant: Grant) {
        self.grant = Some(grant);
        self.apply();
    }

    fn apply(&self) {
        if let (Some(grant), Some(handle)) = (&self.grant, &self.handle) {
            handle.set_grant(grant.clone());
        }
    }

    /// A new session's: its first sandbox's `handle`, and `grant` (none: the runner
    /// opens no host).
    pub(super) fn start(&mut self, handle: Option<SandboxEgress>, grant: Option<Grant>) {
        self.handle = handle;
        self.grant = grant;
        self.apply();
    }

    /// What a fork of the session starts with: its grant, no sandbox yet.
    pub(super) fn for_fork(&self) -> SessionEgress {
        SessionEgress {
            grant: self.grant.clone(),
            handle: None,
        }
    }

    /// The names granted (none where the runner opens no host).
    pub(super) fn names(&self) -> Option<Vec<String>> {
        self.grant.as_ref().map(Grant::names)
    }
}

impl<S: PooledSandbox> Sessions<S> {
    /// Sets the hosts a session's programs may reach (`PATCH /sessions/{id}`): at once,
    /// without waiting for a call in flight (its next connections take it), and for
    /// every sandbox it has later; what the session is now.
    pub fn set_egress(&self, id: &str, grant: Grant) -> Result<SessionInfo, SessionError> {
        let session = self.get(id)?;
        lock(&session.egress).set(grant);
        Ok(session.info(self.config().paused_ttl))
    }
}
