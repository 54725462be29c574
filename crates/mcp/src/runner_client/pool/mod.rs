//! Many runners behind one server (`SANDBOX_RUNNER_URL` with several URLs, or a name that
//! resolves to several addresses): which runners there are, how each is doing, and which
//! one takes a call.
//!
//! - Members: one per configured URL; a URL whose host name resolves to several addresses
//!   stands for one runner per address (its URL with the address in place of the name),
//!   re-resolved every `SANDBOX_RUNNER_RESOLVE_MS`. A name with one address keeps its URL
//!   as written, so one runner behaves exactly as with a single URL.
//! - Health: every member's `GET /health` is polled in the background, once before the
//!   server serves and then every `SANDBOX_RUNNER_HEALTH_MS`; this server's own `/health`
//!   and `/metrics` show what the last poll saw and never make a request of their own. A
//!   member that answers other than 200, or not at all, is skipped until it answers 200
//!   again. A refused connection during a call marks it at once.
//! - Placement: the member with the most free sandboxes (its last `available` less the
//!   calls this server has in flight there); ties go round the members in turn.
//! - Retries: only where the program cannot have started (connection refused, 429, 503
//!   from the queue or a draining runner): the call goes to another member within its
//!   deadline. A request that reached a runner and then failed is never sent again.

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use sandbox_protocol::api::{CreateSession, Limits, RunRequest, RunResponse, SessionInfo};
use tokio::time::{Instant, MissedTickBehavior};

use super::wait::bounded;
use super::{Listeners, RunnerClient, RunnerError};

mod member;

use crate::handle::RunnerId;
use crate::runner_target::RunnerTarget;
use member::InFlight;
pub(crate) use member::Probe;
pub use member::{Member, MemberReport, MemberState, Seen};

/// The pause before a new round once every runner has refused a call this round.
const ROUND_PAUSE: Duration = Duration::from_millis(250);

/// The runners behind this server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Runners {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    targets: Vec<RunnerTarget>,
    members: RwLock<Vec<Arc<Member>>>,
    resolve_every: Duration,
    health_every: Duration,
    /// When the names were last resolved.
    resolved_at: Mutex<Option<Instant>>,
    turn: AtomicUsize,
}

/// How often the pool looks again.
#[derive(Debug, Clone, Copy)]
pub struct Cadence {
    /// Between two resolutions of the runners' host names.
    pub resolve_every: Duration,
    /// Between two health polls of each runner.
    pub health_every: Duration,
}

impl Runners {
    /// The pool of `targets` (at least one), each taken as written until its name is
    /// first resolved by [`look`](Self::look).
    pub fn new(targets: Vec<RunnerTarget>, cadence: Cadence) -> Result<Self, reqwest::Error> {
        let members = targets
            .iter()
            .cloned()
            .map(|t| RunnerClient::new(t).map(|c| Arc::new(Member::new(c))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Runners {
            inner: Arc::new(Inner {
                targets,
                members: RwLock::new(members),
                resolve_every: cadence.resolve_every,
                health_every: cadence.health_every,
                resolved_at: Mutex::new(None),
                turn: AtomicUsize::new(0),
            }),
        })
    }

    /// The members now.
    pub fn members(&self) -> Vec<Arc<Member>> {
        self.inner
            .members
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every member's numbers now.
    pub fn reports(&self) -> Vec<MemberReport> {
        self.members().iter().map(|m| m.report()).collect()
    }

    /// The first member's client (the one a single-runner deployment has).
    pub fn first(&self) -> Option<RunnerClient> {
        self.members().first().map(|m| m.client.clone())
    }

    /// A healthy member's client (else any), for the runners' limits.
    pub fn any_healthy(&self) -> Option<RunnerClient> {
        let members = self.members();
        members
            .iter()
            .min_by_key(|m| m.rank())
            .map(|m| m.client.clone())
    }

    /// Resolves the names (when [`Cadence::resolve_every`] has passed since the last time)
    /// and polls every member's `/health` once: what `/health`, `/metrics` and placement
    /// read until the next look.
    pub async fn look(&self) {
        if self.resolve_due() {
            self.resolve().await;
        }
        let mut polls = tokio::task::JoinSet::new();
        for member in self.members() {
            polls.spawn(async move { member.poll().await });
        }
        while polls.join_next().await.is_some() {}
    }

    /// Looks again ([`look`](Self::look)) every period, starting one period from now,
    /// forever (until the task is aborted). A look that takes longer than a period (a
    /// runner that does not answer takes the health timeout) delays the next one.
    pub async fn follow(self) {
        let period = self.inner.health_every.min(self.inner.resolve_every);
        let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.look().await;
        }
    }

    /// Whether the names are due to be resolved again; if so, the time is noted now.
    fn resolve_due(&self) -> bool {
        let mut at = self
            .inner
            .resolved_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let due = at.is_none_or(|at| at.elapsed() >= self.inner.resolve_every);
        if due {
            *at = Some(Instant::now());
        }
        due
    }

    /// Resolves every target's host name and makes the members match the addresses.
    async fn resolve(&self) {
        let mut wanted: Vec<RunnerTarget> = Vec::new();
        let current = self.members();
        for target in &self.inner.targets {
            match expand(target).await {
                Some(targets) => wanted.extend(targets),
                // The name did not resolve now: keep what it stood for.
                None => wanted.extend(
                    current
                        .iter()
                        .filter(|m| m.client.came_from(target))
                        .map(|m| m.client.target().clone()),
                ),
            }
        }
        let mut seen = HashSet::new();
        wanted.retain(|t| seen.insert(t.url().to_string()));
        let mut next = Vec::with_capacity(wanted.len());
        for target in wanted {
            let url = target.url().to_string();
            match current.iter().find(|m| m.client.url().as_str() == url) {
                Some(member) => next.push(member.clone()),
                None => match RunnerClient::new(target) {
                    Ok(client) => {
                        tracing::info!(runner = %url, "runner added");
                        next.push(Arc::new(Member::new(client)));
                    }
                    Err(error) => tracing::warn!(runner = %url, %error, "cannot make a client"),
                },
            }
        }
        for gone in current
            .iter()
            .filter(|m| !next.iter().any(|n| Arc::ptr_eq(n, m)))
        {
            tracing::info!(runner = %gone.client.url(), "runner removed");
        }
        *self
            .inner
            .members
            .write()
            .unwrap_or_else(PoisonError::into_inner) = next;
    }

    /// The next member to try, not one of `tried`: the best rank there is, the least
    /// loaded within it, ties in turn.
    fn pick(&self, tried: &[RunnerId]) -> Option<Arc<Member>> {
        let members = self.members();
        let best_rank = members.iter().map(|m| m.rank()).min()?;
        let start = self.inner.turn.fetch_add(1, Ordering::Relaxed);
        let n = members.len();
        let mut chosen: Option<(i64, &Arc<Member>)> = None;
        for i in 0..n {
            let member = &members[(start + i) % n];
            if member.rank() > best_rank.max(1) || tried.contains(&member.client.id()) {
                continue;
            }
            let key = i64::from(member.rank()) * 1_000_000 + member.load();
            if chosen.is_none_or(|(best, _)| key < best) {
                chosen = Some((key, member));
            }
        }
        chosen.map(|(_, m)| m.clone())
    }

    /// Runs `attempt` on one member after another until one takes it, while refusals
    /// say the program has not started and `deadline` allows.
    async fn place<T, F, Fut>(
        &self,
        deadline: Duration,
        mut attempt: F,
    ) -> Result<(RunnerId, T), RunnerError>
    where
        F: FnMut(RunnerClient) -> Fut,
        Fut: Future<Output = Result<T, RunnerError>>,
    {
        let until = Instant::now() + deadline;
        let mut tried: Vec<RunnerId> = Vec::new();
        let mut last: Option<RunnerError> = None;
        let mut any_busy = false;
        loop {
            let Some(member) = self.pick(&tried) else {
                let error = last
                    .take()
                    .unwrap_or_else(|| RunnerError::Unreachable("no runner is known now".into()));
                // A new round only when some runner was busy: when none answered, say so now.
                let busy = !matches!(error, RunnerError::Unreachable(_)) || any_busy;
                if tried.is_empty() || !busy || Instant::now() + ROUND_PAUSE >= until {
                    return Err(error);
                }
                tokio::time::sleep(ROUND_PAUSE).await;
                tried.clear();
                last = Some(error);
                continue;
            };
            let left = until.saturating_duration_since(Instant::now());
            let outcome = {
                let _counted = InFlight::enter(&member);
                bounded(left, attempt(member.client.clone())).await
            };
            match outcome {
                Ok(value) => return Ok((member.client.id(), value)),
                Err(error) if not_started(&error) => {
                    tracing::info!(runner = %member.client.url(), code = error.code(), "refused before the program started: trying another runner");
                    if matches!(error, RunnerError::Unreachable(_)) {
                        member.set_state(MemberState::Unreachable);
                    } else if is_leaving(&error) {
                        member.set_state(MemberState::Unhealthy);
                    }
                    any_busy |= !matches!(error, RunnerError::Unreachable(_));
                    member.retries.fetch_add(1, Ordering::Relaxed);
                    tried.push(member.client.id());
                    last = Some(error);
                }
                Err(error) => {
                    if !matches!(error, RunnerError::Cancelled) {
                        member.failures.fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(error);
                }
            }
        }
    }

    /// Runs one program in a fresh sandbox on the best runner (see the module's notes),
    /// its answer awaited until `deadline` (from now), its output and tool calls to
    /// `listeners` as they come.
    pub async fn run(
        &self,
        request: &RunRequest,
        deadline: Duration,
        listeners: Listeners<'_>,
    ) -> Result<RunResponse, RunnerError> {
        self.place(deadline, |client| async move {
            client.run_once(&["run"], request, listeners).await
        })
        .await
        .map(|(_, response)| response)
    }

    /// Opens a session on the best runner; returns which runner holds it.
    pub async fn create_session(
        &self,
        request: &CreateSession,
        limits: &Limits,
    ) -> Result<(RunnerId, SessionInfo), RunnerError> {
        let deadline = limits.answer_within(Duration::ZERO);
        self.place(deadline, |client| async move {
            client.create_session_once(request).await
        })
        .await
    }

    /// The client of the runner that holds sessions of `id`; [`RunnerError::SessionLost`]
    /// when no such runner is among the members now.
    pub fn holder(&self, id: RunnerId) -> Result<RunnerClient, RunnerError> {
        self.members()
            .iter()
            .find(|m| m.client.id() == id)
            .map(|m| m.client.clone())
            .ok_or_else(|| {
                RunnerError::SessionLost(
                    "its runner is no longer among this server's runners".into(),
                )
            })
    }

    /// Counts a call to the runner `id` (a session's), for `/metrics`.
    pub fn count(&self, id: RunnerId, failed: bool) {
        if let Some(member) = self.members().iter().find(|m| m.client.id() == id) {
            member.calls.fetch_add(1, Ordering::Relaxed);
            if failed {
                member.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Whether `error` says the program cannot have started, so that another runner may
/// take the call.
fn not_started(error: &RunnerError) -> bool {
    matches!(
        error,
        RunnerError::Unreachable(_) | RunnerError::Busy { .. } | RunnerError::TooManySandboxes
    )
}

fn is_leaving(error: &RunnerError) -> bool {
    matches!(error, RunnerError::Busy { code, .. } if code == "draining" || code == "shutting_down")
}

/// The targets `target` stands for now: itself when its host is an address or a name
/// with one address, one per address when the name has several; `None` when the name
/// does not resolve now.
async fn expand(target: &RunnerTarget) -> Option<Vec<RunnerTarget>> {
    let url = target.url();
    let Some(name) = url.host_str() else {
        return Some(vec![target.clone()]);
    };
    if name.starts_with('[') || name.parse::<std::net::IpAddr>().is_ok() {
        return Some(vec![target.clone()]);
    }
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((name, port)).await {
        Ok(addrs) => addrs.collect(),
        Err(error) => {
            tracing::warn!(name, %error, "cannot resolve a runner's name now");
            return None;
        }
    };
    let mut ips: Vec<std::net::IpAddr> = addrs.iter().map(|a| a.ip()).collect();
    ips.sort();
    ips.dedup();
    if ips.len() <= 1 {
        return Some(vec![target.clone()]);
    }
    Some(
        ips.into_iter()
            .filter_map(|ip| {
                let mut each = url.clone();
                each.set_ip_host(ip).ok()?;
                Some(target.at(each))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests;
