//! The runner's session endpoints as the bench uses them: `POST /sessions`,
//! `POST /sessions/{id}/run`, `DELETE /sessions/{id}`, and (issue 31) `POST
//! /sessions/{id}/pause` and `POST /sessions/{id}/fork`, each checked strictly (any
//! unexpected status or answer fails the bench).

use crate::clients::RunnerApi;
use anyhow::{bail, ensure, Context};
use reqwest::{Method, Response, StatusCode};
use sandbox_protocol::api::{CreateSession, RunRequest, RunResponse, SessionInfo};
use sandbox_protocol::snapshot::{ForkAnswer, ForkRequest, PauseInfo, SessionState};
use sandbox_protocol::Lang;
use std::future::Future;

impl RunnerApi {
    /// `POST /sessions` with `{}` (the runner's default timeouts): the new session's id.
    pub async fn create_session(&self) -> anyhow::Result<String> {
        let response = self
            .request(Method::POST, "/sessions")
            .json(&CreateSession::default())
            .send()
            .await
            .context("POST /sessions")?;
        let response = expect(response, StatusCode::CREATED, "POST /sessions").await?;
        let info: SessionInfo = response
            .json()
            .await
            .context("reading the session's info")?;
        Ok(info.id)
    }

    /// `POST /sessions/{id}/run`; the program must exit 0 and the session's interpreter
    /// must have kept its state (`stateLost` not true).
    pub async fn session_run(
        &self,
        id: &str,
        lang: &Lang,
        code: &str,
    ) -> anyhow::Result<RunResponse> {
        self.checked_run(id, lang, code, false).await
    }

    /// The first run after a pause, which wakes the session: the program must exit 0 and
    /// the answer say `resumed: true` (`stateLost` may be true: files are kept, memory
    /// only where the backend can).
    pub async fn session_wake(
        &self,
        id: &str,
        lang: &Lang,
        code: &str,
    ) -> anyhow::Result<RunResponse> {
        self.checked_run(id, lang, code, true).await
    }

    /// `POST /sessions/{id}/run`, whose program must exit 0; a run that `wakes` the
    /// session must say `resumed: true`, any other must not have lost its state.
    async fn checked_run(
        &self,
        id: &str,
        lang: &Lang,
        code: &str,
        wakes: bool,
    ) -> anyhow::Result<RunResponse> {
        let request = RunRequest {
            lang: lang.to_string(),
            code: code.into(),
            timeout_ms: None,
            tools: None,
            egress: None,
        };
        let what = format!("POST /sessions/{id}/run");
        let response = self
            .request(Method::POST, &format!("/sessions/{id}/run"))
            .json(&request)
            .send()
            .await
            .with_context(|| what.clone())?;
        let response = expect(response, StatusCode::OK, &what).await?;
        let answer: RunResponse = response.json().await.context("reading the answer")?;
        let expected = if wakes {
            answer.resumed == Some(true)
        } else {
            answer.state_lost != Some(true)
        };
        ensure!(
            answer.exit_code == 0 && expected,
            "{} {code:?} in session {id}: unexpected answer {answer:?}",
            lang.as_str()
        );
        Ok(answer)
    }

    /// `POST /sessions/{id}/pause`: 200, the session `paused`.
    pub async fn pause_session(&self, id: &str) -> anyhow::Result<PauseInfo> {
        let what = format!("POST /sessions/{id}/pause");
        let response = self
            .request(Method::POST, &format!("/sessions/{id}/pause"))
            .send()
            .await
            .with_context(|| what.clone())?;
        let response = expect(response, StatusCode::OK, &what).await?;
        let info: PauseInfo = response.json().await.context("reading the pause")?;
        ensure!(
            info.id == id && info.state == SessionState::Paused,
            "{what}: unexpected answer {info:?}"
        );
        Ok(info)
    }

    /// `POST /sessions/{id}/fork` with `{count}`: 201, the new sessions' ids (as many
    /// as asked).
    pub async fn fork_session(&self, id: &str, count: u64) -> anyhow::Result<Vec<String>> {
        let what = format!("POST /sessions/{id}/fork");
        let response = self
            .request(Method::POST, &format!("/sessions/{id}/fork"))
            .json(&ForkRequest { count: Some(count) })
            .send()
            .await
            .with_context(|| what.clone())?;
        let response = expect(response, StatusCode::CREATED, &what).await?;
        let answer: ForkAnswer = response.json().await.context("reading the forks")?;
        ensure!(
            answer.sessions.len() as u64 == count,
            "{what}: {} sessions, not {count}",
            answer.sessions.len()
        );
        Ok(answer.sessions.into_iter().map(|s| s.id).collect())
    }

    /// [`RunnerApi::session_run`] whose output must be `stdout`.
    pub async fn session_expect(
        &self,
        id: &str,
        lang: &Lang,
        code: &str,
        stdout: &str,
    ) -> anyhow::Result<()> {
        let answer = self.session_run(id, lang, code).await?;
        ensure!(
            answer.stdout == stdout,
            "{} {code:?} in session {id} printed {:?}, not {stdout:?}",
            lang.as_str(),
            answer.stdout
        );
        Ok(())
    }

    /// `DELETE /sessions/{id}` (the runner destroys the sandbox before it answers 204).
    pub async fn delete_session(&self, id: &str) -> anyhow::Result<()> {
        let what = format!("DELETE /sessions/{id}");
        let response = self
            .request(Method::DELETE, &format!("/sessions/{id}"))
            .send()
            .await
            .with_context(|| what.clone())?;
        expect(response, StatusCode::NO_CONTENT, &what).await?;
        Ok(())
    }

    /// Makes a session, hands its id to `body`, and deletes it whatever `body` did
    /// (the first error wins).
    pub async fn in_session<T, F, Fut>(&self, body: F) -> anyhow::Result<T>
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = anyhow::Result<T>>,
    {
        let id = self.create_session().await?;
        let result = body(id.clone()).await;
        let deleted = self.delete_session(&id).await;
        let value = result?;
        deleted?;
        Ok(value)
    }
}

/// The response if its status is `status`, else an error with the body.
async fn expect(response: Response, status: StatusCode, what: &str) -> anyhow::Result<Response> {
    if response.status() != status {
        let got = response.status();
        let body = response.text().await.unwrap_or_default();
        bail!("{what} answered {got} (expected {status}): {body}");
    }
    Ok(response)
}
