//! The sessions' endpoints: `POST /sessions`, `GET` and `DELETE /sessions/{id}`,
//! `POST /sessions/{id}/run` (the body and the answer of `POST /run`), and the files of
//! the session's home folder: `PUT` and `GET /sessions/{id}/files/{path}` (raw bytes),
//! `GET /sessions/{id}/files` (the listing). The router puts them behind the runner's
//! bearer token.
//!
//! While the runner drains, `POST /sessions` is refused (503 `draining`); the sessions
//! already open keep working (runs and files) until the runner exits, which it does as
//! soon as no request is in flight, or when its shutdown grace is over.

use super::{check_path, SessionError};
use crate::http::{
    body_bytes, classify, code_limit, decode_object, parse_run, refuse_when_draining, to_response,
    ApiError, AppState,
};
use crate::metrics::Outcome;
use crate::pool::SandboxFactory;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use sandbox_protocol::agent::{decode_bytes, encode_bytes, AgentMessage, FileRequest};
use sandbox_protocol::api::{CreateSession, FileList, RunResponse, SessionInfo};
use std::sync::Arc;
use std::time::Instant;

/// The sessions' routes, for the runner's router.
pub fn routes<B: SandboxFactory>(file_cap_bytes: usize) -> Router<Arc<AppState<B>>> {
    Router::new()
        .route("/sessions", post(create::<B>))
        .route("/sessions/{id}", get(info::<B>).delete(close::<B>))
        .route("/sessions/{id}/run", post(run::<B>))
        .route("/sessions/{id}/files", get(list::<B>))
        .route(
            "/sessions/{id}/files/{*path}",
            get(download::<B>)
                .put(upload::<B>)
                .layer(DefaultBodyLimit::max(file_cap_bytes)),
        )
}

/// The most entries a listing gives.
const LIST_LIMIT: usize = 10_000;
/// The most bytes a listing's entries take as JSON (a listing's answer is at most this
/// and a few bytes).
const LIST_BYTES: usize = 4 << 20;

async fn upload<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path((id, path)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let cap = state.sessions.config().file_cap_bytes;
    let body = body_bytes(body, || format!("a file may be at most {cap} bytes"))?;
    check_path(&path)?;
    let request = FileRequest::Put {
        path,
        data: encode_bytes(&body),
    };
    state.sessions.file(&id, request).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn download<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    check_path(&path)?;
    let cap = state.sessions.config().file_cap_bytes as u64;
    let answer = state
        .sessions
        .file(&id, FileRequest::Get { path, cap })
        .await?;
    let AgentMessage::File { data } = answer else {
        return Err(unexpected(&id));
    };
    let bytes = decode_bytes(&data)
        .map_err(|e| ApiError::Session(SessionError::Sandbox(format!("the file's base64: {e}"))))?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

async fn list<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(id): Path<String>,
) -> Result<Json<FileList>, ApiError> {
    let request = FileRequest::List {
        limit: LIST_LIMIT,
        max_bytes: LIST_BYTES,
    };
    match state.sessions.file(&id, request).await? {
        AgentMessage::Files { files, truncated } => Ok(Json(FileList { files, truncated })),
        _ => Err(unexpected(&id)),
    }
}

fn unexpected(id: &str) -> ApiError {
    ApiError::Session(SessionError::Sandbox(format!(
        "session {id}'s agent answered a file operation out of turn"
    )))
}

async fn create<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<SessionInfo>), ApiError> {
    let body = body_bytes(body, code_limit(&state.config))?;
    let request = decode_create(&body)?;
    refuse_when_draining(&state.base.lifecycle)?;
    let info = state.sessions.open(&state.pool, request).await?;
    tracing::info!(session = %info.id, "session opened");
    Ok((StatusCode::CREATED, Json(info)))
}

/// An empty body, `{}`, or `{idleTimeoutMs?, ttlMs?}`.
fn decode_create(body: &[u8]) -> Result<CreateSession, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(CreateSession::default());
    }
    decode_object(
        body,
        r#"{"idleTimeoutMs"?: integer, "ttlMs"?: integer} (or an empty body)"#,
    )
}

async fn info<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(id): Path<String>,
) -> Result<Json<SessionInfo>, ApiError> {
    Ok(Json(state.sessions.info(&id)?))
}

async fn close<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.sessions.close(&id).await?;
    tracing::info!(session = %id, "session closed");
    Ok(StatusCode::NO_CONTENT)
}

async fn run<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RunResponse>, ApiError> {
    let body = body_bytes(body, code_limit(&state.config))?;
    let job = parse_run(&body, &state.config)?;
    let lang = job.lang.clone();
    let started = Instant::now();
    let deps = state.base.deps.resolve(&job).await?;
    let result = state.sessions.run(&id, job, deps).await;
    let seconds = Some(started.elapsed().as_secs_f64());
    let metrics = &state.base.metrics;
    match result {
        Ok(outcome) => {
            metrics.program_started(&lang);
            metrics.record(&lang, classify(&outcome), seconds);
            Ok(Json(to_response(outcome, true)))
        }
        Err(e) => {
            if matches!(e, SessionError::Sandbox(_)) {
                metrics.program_started(&lang);
                metrics.record(&lang, Outcome::Error, seconds);
            }
            Err(e.into())
        }
    }
}
