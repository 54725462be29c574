//! The sessions' endpoints: `POST /sessions`, `GET`, `PATCH` (its `egress`) and
//! `DELETE /sessions/{id}`,
//! `POST /sessions/{id}/run` (the body and the answer of `POST /run`, streamed alike
//! with `Accept: application/x-ndjson`), and the files of the session's home folder:
//! `PUT` and `GET /sessions/{id}/files/{path}` (raw bytes), `GET /sessions/{id}/files`
//! (the listing). The router puts them behind the runner's
//! bearer token.
//!
//! While the runner drains, `POST /sessions` is refused (503 `draining`); the sessions
//! already open keep working (runs and files) until the runner exits, which it does as
//! soon as no request is in flight, or when its shutdown grace is over.

use super::answers;
use super::body::{body_bytes, code_limit, decode_object, parse_run};
use super::error::ApiError;
use super::ndjson;
use super::state::{refuse_when_draining, AppState};
use super::tool_results::ToolRun;
use crate::backend::RunOutcome;
use crate::job::{self, Place};
use crate::metrics::Outcome;
use crate::pool::SandboxFactory;
use crate::session::{check_path, SessionError};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use sandbox_protocol::agent::{decode_bytes, encode_bytes, AgentMessage, FileRequest};
use sandbox_protocol::api::{
    CreateSession, FileList, RunRequest, RunResponse, SessionInfo, UpdateSession,
};
use sandbox_protocol::process::StreamLine;
use sandbox_protocol::Lang;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Instant;
use utoipa::IntoParams;

/// The sessions' routes, for the runner's router.
pub(super) fn routes<B: SandboxFactory>(file_cap_bytes: usize) -> Router<Arc<AppState<B>>> {
    Router::new()
        .route("/sessions", post(create::<B>))
        .route(
            "/sessions/{id}",
            get(info::<B>).delete(close::<B>).patch(update::<B>),
        )
        .route("/sessions/{id}/run", post(run::<B>))
        .route("/sessions/{id}/files", get(list::<B>))
        .route(
            "/sessions/{id}/files/{*path}",
            get(download::<B>)
                .put(upload::<B>)
                .layer(DefaultBodyLimit::max(file_cap_bytes)),
        )
}

/// A session's path: `/sessions/{id}...`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct SessionPath {
    /// The session's id, as `POST /sessions` answered it.
    pub(super) id: String,
}

/// A file of a session: `/sessions/{id}/files/{path}`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct FilePath {
    /// The session's id, as `POST /sessions` answered it.
    id: String,
    /// A path relative to the home folder, `/home/sandbox`, `/`-separated (a `/` may
    /// also be sent as `%2F`).
    path: String,
}

/// The most entries a listing gives.
const LIST_LIMIT: usize = 10_000;
/// The most bytes a listing's entries take as JSON (a listing's answer is at most this
/// and a few bytes).
const LIST_BYTES: usize = 4 << 20;

/// Writes a file of the session's home folder (its folders made as needed).
#[utoipa::path(
    put,
    path = "/sessions/{id}/files/{path}",
    operation_id = "putFile",
    tag = "sessions",
    params(FilePath),
    request_body(
        content = answers::FileBytes,
        content_type = "application/octet-stream",
        description = "The file's bytes (at most `RUNNER_FILE_CAP_BYTES`)"
    ),
    responses((status = 204, description = "Written"), answers::UploadErrors),
    security(("bearer" = []))
)]
async fn upload<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(FilePath { id, path }): Path<FilePath>,
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

/// Reads a file of the session's home folder.
#[utoipa::path(
    get,
    path = "/sessions/{id}/files/{path}",
    operation_id = "getFile",
    tag = "sessions",
    params(FilePath),
    responses(
        (
            status = 200,
            description = "The file's bytes",
            body = answers::FileBytes,
            content_type = "application/octet-stream"
        ),
        answers::DownloadErrors,
    ),
    security(("bearer" = []))
)]
async fn download<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(FilePath { id, path }): Path<FilePath>,
) -> Result<Response, ApiError> {
    check_path(&path)?;
    let cap = state.sessions.config().file_cap_bytes as u64;
    let answer = state
        .sessions
        .file(&id, FileRequest::Get { path, cap })
        .await?;
    let AgentMessage::File { data } = answer else {
        return Err(ApiError::out_of_turn(&id, "a file operation"));
    };
    let bytes = decode_bytes(&data)
        .map_err(|e| ApiError::Session(SessionError::Sandbox(format!("the file's base64: {e}"))))?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

/// Lists the session's home folder, recursively: each folder's entries by name and
/// before what they hold; at most 10000 entries, 4 MiB of JSON and 32 levels of folders
/// (`truncated` beyond). A symlink is listed as itself, never followed.
#[utoipa::path(
    get,
    path = "/sessions/{id}/files",
    operation_id = "listFiles",
    tag = "sessions",
    params(SessionPath),
    responses(
        (status = 200, description = "The listing", body = FileList),
        answers::ListErrors,
    ),
    security(("bearer" = []))
)]
async fn list<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SessionPath { id }): Path<SessionPath>,
) -> Result<Json<FileList>, ApiError> {
    let request = FileRequest::List {
        limit: LIST_LIMIT,
        max_bytes: LIST_BYTES,
    };
    match state.sessions.file(&id, request).await? {
        AgentMessage::Files { files, truncated } => Ok(Json(FileList { files, truncated })),
        _ => Err(ApiError::out_of_turn(&id, "a file operation")),
    }
}

/// Opens a session: a sandbox that keeps its home folder, `/tmp`, the processes a
/// program leaves in the background and a resident interpreter's state across runs;
/// frozen between calls. It ends at its idle timeout or TTL, on `DELETE`, or when the
/// runner stops.
#[utoipa::path(
    post,
    path = "/sessions",
    operation_id = "createSession",
    tag = "sessions",
    request_body(
        content = Option<CreateSession>,
        description = "`{}`, an empty body, or the durations asked for (the runner's defaults \
                       otherwise)"
    ),
    responses(
        (status = 201, description = "The session", body = SessionInfo),
        answers::CreateErrors,
    ),
    security(("bearer" = []))
)]
async fn create<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<SessionInfo>), ApiError> {
    let body = body_bytes(body, code_limit(&state.config))?;
    let request = decode_create(&body)?;
    let grant = state
        .config
        .sandbox
        .egress
        .grant(request.egress.as_deref())?;
    refuse_when_draining(&state.base.lifecycle)?;
    let info = state.sessions.open(request, grant).await?;
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
        r#"{"idleTimeoutMs"?: integer, "ttlMs"?: integer, "fromSnapshot"?: string, "egress"?: [string]} (or an empty body)"#,
    )
}

/// Sets the hosts a session's programs may reach through the runner's proxy: within the
/// operator's list (`GET /health`'s `limits.networkHosts`), `[]` for none. It takes
/// effect at once, for the session's running processes' next connections too (a
/// connection already open goes on), and for its later sandboxes (a paused session's
/// wake, by this runner or one restarted on its data folder: a paused session's record
/// is rewritten, and where it cannot be, 500 `storage_error` and nothing changes). So a
/// session can install what it needs, then lock the network.
#[utoipa::path(
    patch,
    path = "/sessions/{id}",
    operation_id = "updateSession",
    tag = "sessions",
    params(SessionPath),
    request_body = UpdateSession,
    responses(
        (status = 200, description = "The session, with its `egress`", body = SessionInfo),
        answers::UpdateSessionErrors,
    ),
    security(("bearer" = []))
)]
async fn update<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SessionPath { id }): Path<SessionPath>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<SessionInfo>, ApiError> {
    let body = body_bytes(body, code_limit(&state.config))?;
    let request: UpdateSession = decode_object(&body, r#"{"egress": [string]}"#)?;
    let egress = &state.config.sandbox.egress;
    let Some(grant) = egress.grant(Some(&request.egress))? else {
        // The runner opens no host: an empty list changes nothing.
        return Ok(Json(state.sessions.info(&id)?));
    };
    let info = state.sessions.set_egress(&id, grant)?;
    tracing::info!(session = %id, egress = ?info.egress, "session's egress set");
    Ok(Json(info))
}

/// How a session is.
#[utoipa::path(
    get,
    path = "/sessions/{id}",
    operation_id = "getSession",
    tag = "sessions",
    params(SessionPath),
    responses(
        (status = 200, description = "The session", body = SessionInfo),
        answers::SessionErrors,
    ),
    security(("bearer" = []))
)]
async fn info<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SessionPath { id }): Path<SessionPath>,
) -> Result<Json<SessionInfo>, ApiError> {
    Ok(Json(state.sessions.info(&id)?))
}

/// Ends a session: a run in flight stops, and its sandbox is destroyed before the answer.
#[utoipa::path(
    delete,
    path = "/sessions/{id}",
    operation_id = "deleteSession",
    tag = "sessions",
    params(SessionPath),
    responses((status = 204, description = "Ended"), answers::SessionErrors),
    security(("bearer" = []))
)]
async fn close<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SessionPath { id }): Path<SessionPath>,
) -> Result<StatusCode, ApiError> {
    state.sessions.close(&id).await?;
    tracing::info!(session = %id, "session closed");
    Ok(StatusCode::NO_CONTENT)
}

/// Runs a program in the session's sandbox: the body and the answer of `POST /run`, with
/// `stateLost`; `outputs` lists the files of `outputs/` new or changed since the
/// session's previous answer. One run at a time.
///
/// With `Accept: application/x-ndjson` the answer is streamed as for `POST /run` (200
/// once the session is held for the run: an unknown or busy session keeps its 404 or
/// 409). A client that goes away leaves the run to go on to its end, as for a plain
/// answer.
#[utoipa::path(
    post,
    path = "/sessions/{id}/run",
    operation_id = "runInSession",
    tag = "sessions",
    params(
        SessionPath,
        (
            "Accept" = Option<String>,
            Header,
            description = "`application/x-ndjson` for the answer streamed as the program runs"
        )
    ),
    request_body = RunRequest,
    responses(
        (
            status = 200,
            description = "The program ran, as for `POST /run` (streamed likewise)",
            content(
                (RunResponse = "application/json"),
                (StreamLine<RunResponse> = "application/x-ndjson")
            )
        ),
        answers::SessionRunErrors,
    ),
    security(("bearer" = []))
)]
async fn run<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SessionPath { id }): Path<SessionPath>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(body, code_limit(&state.config))?;
    let (job, _) = parse_run(&body, &state.config, Place::Session)?;
    let lang = job.lang.clone();
    let started = Instant::now();
    let tools = ToolRun::of(&state, &job, &headers)?;
    let deps = state.base.deps.resolve(&job).await?;
    if !ndjson::wanted(&headers) {
        let result = state.sessions.run(&id, job, deps).await;
        return Ok(Json(conclude(&state, &lang, started, result)?).into_response());
    }
    let (live, chunks, registered) = ToolRun::live(tools);
    let run = state.sessions.start_run(&id, job, deps, Some(live)).await?;
    let (writer, response) = ndjson::answer(state.base.lifecycle.enter());
    let ended = async move {
        let result = run.outcome().await;
        drop(registered);
        conclude(&state, &lang, started, result)
    };
    tokio::spawn(writer.relay(chunks, ended));
    Ok(response)
}

/// The answer for a session's run's end: counted.
fn conclude<B: SandboxFactory>(
    state: &AppState<B>,
    lang: &Lang,
    started: Instant,
    result: Result<RunOutcome, SessionError>,
) -> Result<RunResponse, ApiError> {
    let seconds = Some(started.elapsed().as_secs_f64());
    let metrics = &state.base.metrics;
    match result {
        Ok(outcome) => {
            metrics.program_started(lang);
            metrics.record(lang, Outcome::of(&outcome), seconds);
            Ok(job::answer(outcome, Place::Session))
        }
        Err(e) => {
            if matches!(e, SessionError::Sandbox(_)) {
                metrics.program_started(lang);
                metrics.record(lang, Outcome::Error, seconds);
            }
            Err(e.into())
        }
    }
}
