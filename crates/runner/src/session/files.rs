//! A session's file operations: each held for the session, done in a task of its own
//! and answered by the sandbox's agent (woken first if it is paused).

use super::{on_sandbox, Held, Session, SessionError, Sessions, HOLD_WAIT};
use crate::pool::PooledSandbox;
use sandbox_protocol::agent::{AgentMessage, FileRequest};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl<S: PooledSandbox> Sessions<S> {
    /// Does a file operation in the session's sandbox (refused while a run is in
    /// flight). Like a run, it goes on in a task of its own, so that a caller that goes
    /// away never leaves the channel in the middle of an exchange.
    ///
    /// No file operation ends the session: the agent refuses what it cannot do
    /// ([`SessionError::File`]), and it cannot block (every open is non-blocking and
    /// only regular files on the home folder's tmpfs are read or written), so an answer
    /// always comes. Should one not come within [`FILE_ANSWER_WAIT`](super::FILE_ANSWER_WAIT), the caller hears
    /// so ([`SessionError::FileTimeout`]) and the task goes on waiting for it, the
    /// session busy meanwhile, until it comes or the session ends (TTL, DELETE). Only
    /// a sandbox that fails (its channel closes or garbles) ends the session, as it
    /// would a run.
    pub async fn file(
        self: &Arc<Self>,
        id: &str,
        request: FileRequest,
    ) -> Result<AgentMessage, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        self.in_task(id, HOLD_WAIT, "file", |sessions, session, guard| async move {
            sessions.file_held(session, guard, request).await
        })
        .await
    }

    async fn file_held(
        &self,
        session: Arc<Session<S>>,
        mut guard: Held<S>,
        request: FileRequest,
    ) -> Result<AgentMessage, SessionError>
    where
        S::Error: std::fmt::Display + Send,
    {
        self.wake_held(&session, &mut guard).await?;
        let awake = session.processes.load(Ordering::SeqCst) > 0;
        let answer = on_sandbox(&session, &mut guard, |sandbox| {
            sandbox.session_file(request, awake)
        })
        .await?;
        let error = match answer {
            Ok(AgentMessage::FileFailed { reason, message }) => {
                return Err(SessionError::File(reason, message))
            }
            Ok(answer) => return Ok(answer),
            Err(e) => e.to_string(),
        };
        self.fail(&session.id, guard, error).await
    }
}
