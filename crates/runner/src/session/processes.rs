//! A session's processes ([`ProcessRequest`]): each operation holds the session's
//! sandbox for the moment the agent takes to answer it (none waits for a process), so
//! that runs, file operations and process operations never interleave on the channel.
//! Reading a process's output while a run is in flight waits for the run to end.
//!
//! While a process runs, the session is not frozen between calls; the reaper asks every
//! [`REAP_EVERY`](super::REAP_EVERY) whether one still does ([`Sessions::settle`]) and
//! freezes the session once none does.

use super::{lock, on_sandbox, Held, Session, SessionError, Sessions};
use crate::pool::PooledSandbox;
use sandbox_protocol::agent::AgentMessage;
use sandbox_protocol::process::{ProcessAnswer, ProcessRequest};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl<S: PooledSandbox> Sessions<S> {
    /// Does a process operation in the session's sandbox, waiting at most `wait` for an
    /// operation in flight (a run) to end ([`SessionError::Busy`] after that).
    pub async fn process(
        self: &Arc<Self>,
        id: &str,
        request: ProcessRequest,
        wait: Duration,
    ) -> Result<ProcessAnswer, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        self.in_task(id, wait, "process", |sessions, session, guard| async move {
            sessions.process_held(session, guard, request).await
        })
        .await
    }

    async fn process_held(
        &self,
        session: Arc<Session<S>>,
        mut guard: Held<S>,
        request: ProcessRequest,
    ) -> Result<ProcessAnswer, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        let answer = on_sandbox(&session, &mut guard, |sandbox| {
            sandbox.session_process(request)
        })
        .await?;
        let error = match answer {
            Ok(AgentMessage::Process { answer, running }) => {
                session.processes.store(running, Ordering::SeqCst);
                return match answer {
                    ProcessAnswer::Failed { reason, message } => {
                        Err(SessionError::Process(reason, message))
                    }
                    answer => Ok(answer),
                };
            }
            Ok(_) => format!(
                "session {}'s agent answered a process operation out of turn",
                session.id
            ),
            Err(e) => e.to_string(),
        };
        self.fail(&session.id, guard, error).await
    }

    /// Freezes the sessions whose processes have all ended since their last call: each
    /// left awake for its processes, and not held by a call, is asked whether one still
    /// runs (which does not count as a call for its idle timeout).
    pub async fn settle(&self)
    where
        S::Error: std::fmt::Display,
    {
        let awake: Vec<Arc<Session<S>>> = lock(&self.table)
            .values()
            .filter(|s| s.processes.load(Ordering::SeqCst) > 0)
            .cloned()
            .collect();
        for session in awake {
            let Ok(mut guard) = session.sandbox.clone().try_lock_owned() else {
                continue; // a call holds it, and settles it when it answers
            };
            let Some(sandbox) = guard.as_mut() else {
                continue;
            };
            match sandbox.session_process(ProcessRequest::List).await {
                Ok(AgentMessage::Process { running, .. }) => {
                    session.processes.store(running, Ordering::SeqCst);
                }
                Ok(_) => {
                    let error = "the agent answered a process list out of turn".to_owned();
                    let _ = self.fail::<()>(&session.id, guard, error).await;
                }
                Err(e) => {
                    let _ = self.fail::<()>(&session.id, guard, e.to_string()).await;
                }
            }
        }
    }
}
