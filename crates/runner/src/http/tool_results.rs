//! Tools called from code, the runner's side of the API: a run whose body offers `tools`
//! (its answer streamed: each call of its program is a `{"toolCall": {...}}` line), and
//! `POST /runs/{runId}/tool-results/{id}`, where its caller answers each call. The
//! runner holds no upstream address and no credential: it passes calls and answers on
//! ([`crate::live::tools`]).

use super::answers;
use super::body::{body_bytes, decode_object};
use super::error::ApiError;
use super::ndjson;
use super::state::AppState;
use crate::live::tools::{Registered, ToolLink};
use crate::live::{self, LiveChunks, LiveOutput};
use crate::pool::SandboxFactory;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use sandbox_protocol::agent::Job;
use sandbox_protocol::tools::{ToolAnswer, MAX_RESULT_BYTES};
use serde::Deserialize;
use std::sync::Arc;

/// The routes, for the runner's router. An answer's body may take a whole result,
/// whatever the code cap.
pub(super) fn routes<B: SandboxFactory>() -> Router<Arc<AppState<B>>> {
    Router::new().route(
        "/runs/{runId}/tool-results/{id}",
        post(answer::<B>).layer(DefaultBodyLimit::max(MAX_RESULT_BYTES + 64 * 1024)),
    )
}

/// A call's path: `/runs/{runId}/tool-results/{id}`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CallPath {
    /// The run's id, as its `toolCall` lines say it (`runId`).
    run_id: String,
    /// The call's id, as its `toolCall` line says it (`id`).
    id: String,
}

/// Answers a call a program made to an offered tool: `{"result": ...}` (the tool's
/// result, any JSON) or `{"error": "..."}` (the program's call fails with this text),
/// at most 1 MiB of JSON. The program gets it while it runs; each call is answered
/// once. A run ends whatever its calls wait for (its timeout bounds them all): an
/// answer after its end is refused with 404 `run_not_found`.
#[utoipa::path(
    post,
    path = "/runs/{runId}/tool-results/{id}",
    operation_id = "answerToolCall",
    tag = "tools",
    params(
        ("runId" = String, Path, description = "The run's id, as its `toolCall` lines say it"),
        ("id" = String, Path, description = "The call's id, as its `toolCall` line says it"),
    ),
    request_body = ToolAnswer,
    responses(
        (status = 204, description = "The answer is on its way to the program"),
        answers::ToolResultErrors,
    ),
    security(("bearer" = []))
)]
pub(super) async fn answer<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(CallPath { run_id, id }): Path<CallPath>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let body = body_bytes(body, || {
        format!("a tool call's answer takes at most {MAX_RESULT_BYTES} bytes of JSON")
    })?;
    let answer: ToolAnswer = decode_object(&body, r#"{"result": any} or {"error": string}"#)?;
    answer.check().map_err(ApiError::BadRequest)?;
    state.tool_runs.answer(&run_id, &id, answer)?;
    Ok(StatusCode::NO_CONTENT)
}

/// A run whose program may call tools, registered while its answer streams.
pub(super) struct ToolRun {
    registered: Registered,
    link: ToolLink,
}

impl ToolRun {
    /// The run of `job`, if it offers tools: only with a streamed answer (400
    /// `bad_request` else: the calls travel on it).
    pub(super) fn of<B: SandboxFactory>(
        state: &AppState<B>,
        job: &Job,
        headers: &HeaderMap,
    ) -> Result<Option<ToolRun>, ApiError> {
        let Some(offer) = &job.tools else {
            return Ok(None);
        };
        if !ndjson::wanted(headers) {
            return Err(ApiError::BadRequest(
                "a run that offers `tools` must ask for its answer streamed \
                 (`Accept: application/x-ndjson`): its tool calls travel on it"
                    .into(),
            ));
        }
        let (registered, link) = state
            .tool_runs
            .register(offer.clone())
            .map_err(|e| ApiError::Sandbox(Box::new(e)))?;
        Ok(Some(ToolRun { registered, link }))
    }

    /// The run's live output, which carries its calls; and the place to hold until its
    /// answer's last line.
    pub(super) fn live(run: Option<ToolRun>) -> (LiveOutput, LiveChunks, Option<Registered>) {
        match run {
            Some(ToolRun { registered, link }) => {
                let (live, chunks) = live::channel_with_tools(link);
                (live, chunks, Some(registered))
            }
            None => {
                let (live, chunks) = live::channel();
                (live, chunks, None)
            }
        }
    }
}
