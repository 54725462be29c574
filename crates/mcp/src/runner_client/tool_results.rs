//! Answering a run's tool calls: `POST /runs/{runId}/tool-results/{id}` with the answer
//! ([`ToolAnswer`]) as its body. 204 is the answer delivered; 404 says the run (or the
//! call) is no longer there, which is no error: the run has ended.

use reqwest::{Method, StatusCode};
use sandbox_protocol::tools::ToolAnswer;

use super::answer::{error_from, transport_error};
use super::{RunnerClient, RunnerError};

/// What became of a tool call's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The runner took it (204).
    Delivered,
    /// The run or the call is gone (404): the answer is dropped.
    RunEnded,
}

impl RunnerClient {
    /// Posts the answer to call `call` of run `run`.
    pub async fn post_tool_result(
        &self,
        run: &str,
        call: &str,
        answer: &ToolAnswer,
    ) -> Result<Delivery, RunnerError> {
        let response = self
            .request(Method::POST, &["runs", run, "tool-results", call])
            .json(answer)
            .send()
            .await
            .map_err(transport_error)?;
        match response.status() {
            StatusCode::NO_CONTENT | StatusCode::OK => Ok(Delivery::Delivered),
            StatusCode::NOT_FOUND => Ok(Delivery::RunEnded),
            _ => Err(error_from(response).await),
        }
    }
}
