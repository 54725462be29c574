//! The endpoints that keep sessions past their sandbox: `POST /sessions/{id}/pause` and
//! `/resume`, `POST /sessions/{id}/snapshots`, `POST /sessions/{id}/fork`, and the
//! snapshots: `GET /snapshots`, `DELETE /snapshots/{id}`, `GET /snapshots/{id}/export`
//! (the snapshot as a tar archive) and `POST /snapshots/import` (such an archive, checked
//! entry by entry). The router puts them behind the runner's bearer token.

use super::answers;
use super::body::{body_bytes, decode_object};
use super::error::ApiError;
use super::sessions::SessionPath;
use super::state::AppState;
use crate::pool::SandboxFactory;
use crate::session::SessionError;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use futures::StreamExt;
use sandbox_protocol::api::SessionInfo;
use sandbox_protocol::snapshot::{
    ForkAnswer, ForkRequest, ImportAnswer, PauseInfo, SnapshotInfo, SnapshotList,
};
use serde::Deserialize;
use std::sync::Arc;
use utoipa::IntoParams;

/// The routes, for the runner's router.
pub(super) fn routes<B: SandboxFactory>() -> Router<Arc<AppState<B>>> {
    Router::new()
        .route("/sessions/{id}/pause", post(pause::<B>))
        .route("/sessions/{id}/resume", post(resume::<B>))
        .route("/sessions/{id}/snapshots", post(snapshot::<B>))
        .route("/sessions/{id}/fork", post(fork::<B>))
        .route("/snapshots", get(list::<B>))
        .route("/snapshots/import", post(import::<B>))
        .route("/snapshots/{id}", delete(remove::<B>))
        .route("/snapshots/{id}/export", get(export::<B>))
}

/// A snapshot's path: `/snapshots/{id}...`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct SnapshotPath {
    /// The snapshot's id, as `POST /sessions/{id}/snapshots` (or an import) answered it.
    id: String,
}

/// Pauses a session: its files (home folder and `/tmp`, with modes, empty folders and
/// symbolic links) go to the runner's disk, and its sandbox (memory, processes, host
/// ids) is released. Any later call on it wakes it in a fresh sandbox; a session
/// already paused answers as it is.
#[utoipa::path(
    post,
    path = "/sessions/{id}/pause",
    operation_id = "pauseSession",
    tag = "sessions",
    params(SessionPath),
    responses(
        (status = 200, description = "Paused", body = PauseInfo),
        answers::PauseErrors,
    ),
    security(("bearer" = []))
)]
async fn pause<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SessionPath { id }): Path<SessionPath>,
) -> Result<Json<PauseInfo>, ApiError> {
    let paused = state.sessions.pause(&id).await?;
    tracing::info!(session = %id, bytes = paused.bytes, "session paused");
    Ok(Json(paused))
}

/// Wakes a paused session now, in a fresh sandbox with its files (any call would);
/// an active session answers as it is.
#[utoipa::path(
    post,
    path = "/sessions/{id}/resume",
    operation_id = "resumeSession",
    tag = "sessions",
    params(SessionPath),
    responses(
        (status = 200, description = "The session, active", body = SessionInfo),
        answers::WakeErrors,
    ),
    security(("bearer" = []))
)]
async fn resume<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SessionPath { id }): Path<SessionPath>,
) -> Result<Json<SessionInfo>, ApiError> {
    Ok(Json(state.sessions.resume(&id).await?))
}

/// Takes a snapshot of a session's files (between its calls; the session goes on):
/// `POST /sessions` with `fromSnapshot` starts new sessions from it.
#[utoipa::path(
    post,
    path = "/sessions/{id}/snapshots",
    operation_id = "snapshotSession",
    tag = "snapshots",
    params(SessionPath),
    responses(
        (status = 201, description = "The snapshot", body = SnapshotInfo),
        answers::PauseErrors,
    ),
    security(("bearer" = []))
)]
async fn snapshot<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SessionPath { id }): Path<SessionPath>,
) -> Result<(StatusCode, Json<SnapshotInfo>), ApiError> {
    let taken = state.sessions.snapshot(&id).await?;
    tracing::info!(session = %id, snapshot = %taken.snapshot_id, bytes = taken.bytes, "snapshot taken");
    Ok((StatusCode::CREATED, Json(taken)))
}

/// Copies a session into `count` new sessions (1 to 16, default 1), each with its own
/// copy of the files, independent of each other and of the original. Each starts
/// paused and wakes at its first call.
#[utoipa::path(
    post,
    path = "/sessions/{id}/fork",
    operation_id = "forkSession",
    tag = "sessions",
    params(SessionPath),
    request_body(content = Option<ForkRequest>, description = "`{}`, an empty body, or `{count}`"),
    responses(
        (status = 201, description = "The new sessions", body = ForkAnswer),
        answers::ForkErrors,
    ),
    security(("bearer" = []))
)]
async fn fork<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SessionPath { id }): Path<SessionPath>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<ForkAnswer>), ApiError> {
    let body = body_bytes(body, || "a fork's body is `{\"count\": n}`".to_owned())?;
    let request: ForkRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ForkRequest::default()
    } else {
        decode_object(&body, r#"{"count"?: integer} (or an empty body)"#)?
    };
    // The count is checked by `Sessions::fork` (400 `bad_request` outside 1..=16).
    let count = request.count.unwrap_or(1);
    let sessions = state.sessions.fork(&id, count).await?;
    tracing::info!(session = %id, count, "session forked");
    Ok((StatusCode::CREATED, Json(ForkAnswer { sessions })))
}

/// The runner's snapshots, oldest first.
#[utoipa::path(
    get,
    path = "/snapshots",
    operation_id = "listSnapshots",
    tag = "snapshots",
    responses(
        (status = 200, description = "The snapshots", body = SnapshotList),
        answers::ProtectedErrors,
    ),
    security(("bearer" = []))
)]
async fn list<B: SandboxFactory>(State(state): State<Arc<AppState<B>>>) -> Json<SnapshotList> {
    Json(SnapshotList {
        snapshots: state.sessions.snapshots(),
    })
}

/// Deletes a snapshot (the sessions started from it keep their files).
#[utoipa::path(
    delete,
    path = "/snapshots/{id}",
    operation_id = "deleteSnapshot",
    tag = "snapshots",
    params(SnapshotPath),
    responses((status = 204, description = "Deleted"), answers::SnapshotErrors),
    security(("bearer" = []))
)]
async fn remove<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SnapshotPath { id }): Path<SnapshotPath>,
) -> Result<StatusCode, ApiError> {
    state.sessions.delete_snapshot(&id)?;
    tracing::info!(snapshot = %id, "snapshot deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// The snapshot as a tar archive (`application/x-tar`): its entries `home/...` and
/// `tmp/...`, folders, regular files and symbolic links, each with its mode.
/// `POST /snapshots/import` takes it, here or on another runner.
#[utoipa::path(
    get,
    path = "/snapshots/{id}/export",
    operation_id = "exportSnapshot",
    tag = "snapshots",
    params(SnapshotPath),
    responses(
        (status = 200, description = "The archive", content_type = "application/x-tar", body = answers::FileBytes),
        answers::SnapshotErrors,
    ),
    security(("bearer" = []))
)]
async fn export<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(SnapshotPath { id }): Path<SnapshotPath>,
) -> Result<Response, ApiError> {
    let record = state.sessions.snapshot_record(&id)?;
    let path = state.sessions.store().snapshot_archive(&id);
    let file = tokio::fs::File::open(&path)
        .await
        .map_err(|_| SessionError::SnapshotNotFound(id.clone()))?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-tar".to_owned()),
            (header::CONTENT_LENGTH, record.bytes.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"snapshot-{id}.tar\""),
            ),
        ],
        body,
    )
        .into_response())
}

/// Imports a snapshot from a tar archive (as `GET /snapshots/{id}/export` gives): each
/// entry's path, type and size is checked (relative paths under `home/` or `tmp/`, no
/// `..`, nothing through a symbolic link, folders, regular files and symbolic links
/// only), and its size and number of entries are bounded; the first refused entry is
/// named in a 400 `bad_archive`, and nothing is kept.
#[utoipa::path(
    post,
    path = "/snapshots/import",
    operation_id = "importSnapshot",
    tag = "snapshots",
    request_body(content = answers::FileBytes, content_type = "application/x-tar", description = "The archive"),
    responses(
        (status = 201, description = "The new snapshot", body = ImportAnswer),
        answers::ImportErrors,
    ),
    security(("bearer" = []))
)]
async fn import<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    body: Body,
) -> Result<(StatusCode, Json<ImportAnswer>), ApiError> {
    let stream = body
        .into_data_stream()
        .map(|chunk| chunk.map_err(std::io::Error::other));
    let imported = state
        .sessions
        .import(tokio_util::io::StreamReader::new(stream))
        .await?;
    tracing::info!(snapshot = %imported.snapshot_id, bytes = imported.bytes, "snapshot imported");
    Ok((StatusCode::CREATED, Json(imported)))
}
