//! A session's runs: each held for the session (one at a time, a second refused as busy),
//! done in a task of its own so that it goes on to its end whoever waits for it, in the
//! session's sandbox (woken first if it is paused).

use super::{lock, Held, Session, SessionError, Sessions, HOLD_WAIT};
use crate::backend::{DepsMount, RunOutcome};
use crate::live::LiveOutput;
use crate::pool::PooledSandbox;
use sandbox_protocol::agent::Job;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::task::JoinHandle;

impl<S: PooledSandbox> Sessions<S> {
    /// Runs `job`, a session's ([`Place::Session`](crate::job::Place::Session)), in the
    /// session's sandbox. The run goes on to its end (bounded by its timeout) even if the
    /// caller goes away, so that the session's channel is never left in the middle of an
    /// exchange; the session stays busy meanwhile.
    pub async fn run(
        self: &Arc<Self>,
        id: &str,
        job: Job,
        deps: Option<DepsMount>,
    ) -> Result<RunOutcome, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        self.start_run(id, job, deps, None).await?.outcome().await
    }

    /// Starts [`run`](Self::run)'s run, its output sent to `live` as it comes, and
    /// returns once the session is held for it: a session that does not exist or is
    /// busy is refused here, before anything starts.
    pub async fn start_run(
        self: &Arc<Self>,
        id: &str,
        job: Job,
        deps: Option<DepsMount>,
        live: Option<LiveOutput>,
    ) -> Result<SessionRun, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        let (session, guard) = self.hold(id, HOLD_WAIT).await?;
        let sessions = self.clone();
        Ok(SessionRun(tokio::spawn(async move {
            sessions.run_held(session, guard, job, deps, live).await
        })))
    }

    async fn run_held(
        &self,
        session: Arc<Session<S>>,
        mut guard: Held<S>,
        job: Job,
        deps: Option<DepsMount>,
        live: Option<LiveOutput>,
    ) -> Result<RunOutcome, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        let id = session.id.clone();
        self.wake_held(&session, &mut guard).await?;
        let Some(sandbox) = guard.as_mut() else {
            return Err(SessionError::NotFound(id));
        };
        let mut ended = session.ended.subscribe();
        let result = tokio::select! {
            result = sandbox.session_run(job, deps.as_ref(), live) => Some(result),
            _ = ended.wait_for(|ended| *ended) => None,
        };
        session.runs.fetch_add(1, Ordering::SeqCst);
        session.touch();
        let error = match result {
            Some(Ok(mut outcome)) => {
                let running = outcome.job.processes_running;
                session.processes.store(running, Ordering::SeqCst);
                if let Some(state_lost) = lock(&session.woken).take() {
                    outcome.resumed = true;
                    outcome.job.state_lost |= state_lost;
                }
                return Ok(outcome);
            }
            None => return Err(SessionError::NotFound(id)),
            Some(Err(e)) => e.to_string(),
        };
        self.fail(&id, guard, error).await
    }
}

/// A session's run under way ([`Sessions::start_run`]): it goes on to its end whether
/// or not its outcome is awaited.
pub struct SessionRun(JoinHandle<Result<RunOutcome, SessionError>>);

impl SessionRun {
    /// The run's outcome, once it ends.
    pub async fn outcome(self) -> Result<RunOutcome, SessionError> {
        self.0
            .await
            .map_err(|e| SessionError::Sandbox(format!("the run's task failed: {e}")))?
    }
}
