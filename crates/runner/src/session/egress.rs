//! A session's hosts at the runner's proxy (issue 33): its grant, which outlives its
//! sandboxes (and, saved with a paused session, its runner: a runner started on the same
//! data folder gives back what its own policy still allows, [`regrant`]), and
//! `PATCH /sessions/{id}`, which changes it.

use super::{lock, Session, SessionError, Sessions};
use crate::pool::PooledSandbox;
use sandbox_egress::{Grant, Policy, SandboxEgress};
use sandbox_protocol::api::SessionInfo;

/// A session's hosts at the runner's proxy: its grant (none: the runner opens no host),
/// which outlives its sandboxes (a woken session's new one gets it), and the handle of
/// its sandbox now, which takes each change at once (its running processes' next
/// connections too).
#[derive(Default)]
pub(super) struct SessionEgress {
    grant: Option<Grant>,
    handle: Option<SandboxEgress>,
    /// Bytes its earlier sandboxes used of the budget, which is the session's over its
    /// whole life (pauses, restarts and the sandbox it was forked from included).
    used: u64,
}

impl SessionEgress {
    /// The session's sandbox is now the one with `handle`: it gets the grant, and the
    /// bytes the session has used so far count against its budget.
    pub(super) fn attach(&mut self, handle: Option<&SandboxEgress>) {
        self.used = self.bytes_used();
        self.handle = handle.cloned();
        self.apply();
    }

    /// Bytes of the budget the session has used so far.
    pub(super) fn bytes_used(&self) -> u64 {
        self.handle
            .as_ref()
            .map_or(self.used, |handle| handle.bytes_used().max(self.used))
    }

    /// A session found paused at start: what it had used when it was saved.
    pub(super) fn carry(&mut self, used: u64) {
        self.used = used;
        self.apply();
    }

    /// The session's grant is now `grant`, its sandbox's too.
    pub(super) fn set(&mut self, grant: Grant) {
        self.grant = Some(grant);
        self.apply();
    }

    fn apply(&self) {
        if let Some(handle) = &self.handle {
            handle.carry_bytes(self.used);
            if let Some(grant) = &self.grant {
                handle.set_grant(grant.clone());
            }
        }
    }

    /// A new session's: its first sandbox's `handle`, and `grant` (none: the runner
    /// opens no host).
    pub(super) fn start(&mut self, handle: Option<SandboxEgress>, grant: Option<Grant>) {
        self.handle = handle;
        self.grant = grant;
        self.apply();
    }

    /// What a fork of the session starts with: its grant and what it has used of its
    /// budget (forking does not give a session more), no sandbox yet.
    pub(super) fn for_fork(&self) -> SessionEgress {
        SessionEgress {
            grant: self.grant.clone(),
            handle: None,
            used: self.bytes_used(),
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
    /// every sandbox it has later; a paused one's record too, so that a runner
    /// restarted meanwhile gives it no more (one that cannot be rewritten changes
    /// nothing). What the session is now.
    pub fn set_egress(&self, id: &str, grant: Grant) -> Result<SessionInfo, SessionError> {
        let session = self.get(id)?;
        {
            // Held while the record is written: what is saved is what was set last.
            let mut egress = lock(&session.egress);
            if session.is_paused() {
                let saved = self.store().set_session_egress(id, Some(grant.names()));
                // A session woken meanwhile has no record left to rewrite.
                if let Err(error) = saved.map_err(SessionError::from) {
                    if session.is_paused() {
                        return Err(error);
                    }
                }
            }
            egress.set(grant);
        }
        Ok(session.info(self.config().paused_ttl))
    }

    /// Saves `session`'s grant in its record, just paused with `saved`, where a
    /// `PATCH` changed it while the pause was being made.
    pub(super) fn save_changed_egress(&self, session: &Session<S>, saved: Option<&[String]>) {
        let egress = lock(&session.egress);
        let now = egress.names();
        if now.as_deref() == saved {
            return;
        }
        if let Err(error) = self.store().set_session_egress(&session.id, now) {
            tracing::warn!(session = %session.id, %error, "a paused session's record keeps the hosts it had before its last PATCH");
        }
    }
}

/// What a session paused by an earlier runner is granted by one whose operator's policy is
/// `policy`: of `saved`, the names its grant held then (none: that runner opened no
/// host), those `policy` still allows, each checked alone, so never more than was saved;
/// nothing where `policy` opens nothing (`None`: egress is off). The names dropped come
/// second, for the log.
pub(super) fn regrant(policy: &Policy, saved: Option<&[String]>) -> (Option<Grant>, Vec<String>) {
    let saved = saved.unwrap_or_default();
    if policy.is_off() {
        return (None, saved.to_vec());
    }
    let (kept, dropped): (Vec<String>, Vec<String>) = saved
        .iter()
        .cloned()
        .partition(|name| policy.grant(std::slice::from_ref(name)).is_ok());
    // Each kept name passed alone, so together they pass too.
    let grant = policy.grant(&kept).unwrap_or_else(|_| Grant::none());
    (Some(grant), dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &str) -> Policy {
        Policy::parse(allow, "").expect("a valid policy")
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn a_paused_sessions_grant_comes_back_within_the_policy_now() {
        let saved = names(&["pypi.org", "*.pythonhosted.org", "internal.test:8443"]);
        let same = policy("pypi.org,*.pythonhosted.org,internal.test:8443");
        let (grant, dropped) = regrant(&same, Some(&saved));
        assert_eq!(grant.expect("on").names(), saved);
        assert!(dropped.is_empty(), "{dropped:?}");

        let narrower = policy("pypi.org,files.pythonhosted.org");
        let (grant, dropped) = regrant(&narrower, Some(&saved));
        assert_eq!(grant.expect("on").names(), ["pypi.org"]);
        assert_eq!(
            dropped,
            names(&["*.pythonhosted.org", "internal.test:8443"])
        );

        let off = policy("");
        assert_eq!(regrant(&off, Some(&saved)), (None, saved.clone()));
        assert_eq!(regrant(&off, None), (None, Vec::new()));
    }

    #[test]
    fn a_regrant_never_widens() {
        // Saved with nothing (or by a runner with egress off): nothing, whatever is open.
        let wide = policy("pypi.org,*.example.test");
        let (grant, dropped) = regrant(&wide, None);
        assert!(grant.expect("on").is_none() && dropped.is_empty());
        let (grant, _) = regrant(&wide, Some(&[]));
        assert!(grant.expect("on").is_none());
        let (grant, _) = regrant(&wide, Some(&names(&["a.example.test"])));
        assert_eq!(grant.expect("on").names(), ["a.example.test"]);
        let narrow = policy("a.example.test");
        let (grant, dropped) = regrant(&narrow, Some(&names(&["*.example.test", "garbage name"])));
        assert!(grant.expect("on").is_none());
        assert_eq!(dropped.len(), 2);
    }
}
