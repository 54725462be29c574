//! A session's processes: `POST` and `GET /sessions/{id}/processes`, and under
//! `/sessions/{id}/processes/{pid}`: `GET output` (`output.rs`), `POST stdin` (raw
//! bytes), `POST signal`. Behind the runner's bearer token, as the other session routes.

use super::answers;
use super::body::{body_bytes, decode_object};
use super::error::ApiError;
use super::output;
use super::process_call::{ask, ProcessPath};
use super::state::AppState;
use crate::config::EgressConfig;
use crate::pool::SandboxFactory;
use crate::session::check_path;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use sandbox_protocol::agent::encode_bytes;
use sandbox_protocol::process::{
    ProcessAnswer, ProcessEntry, ProcessInfo, ProcessList, ProcessRequest, ProcessSignal,
    ProcessStarted, SignalProcess, StartProcess,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use utoipa::IntoParams;

/// A process's variables: where the operator opened hosts, the proxy's first (the
/// caller's win: a process may ask for none with empty values).
fn with_proxy(egress: &EgressConfig, asked: BTreeMap<String, String>) -> BTreeMap<String, String> {
    if !egress.is_on() {
        return asked;
    }
    let proxy = sandbox_egress::proxy_env()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v));
    proxy.chain(asked).collect()
}

/// The most bytes written to a process's standard input in one request (what the agent
/// queues for it at most).
const STDIN_CAP: usize = 4 << 20;
/// The most variables a process is given, and the most bytes of them all.
const ENV_MAX: usize = 256;
const ENV_BYTES: usize = 64 << 10;

/// The processes' routes, for the runner's router.
pub(super) fn routes<B: SandboxFactory>() -> Router<Arc<AppState<B>>> {
    Router::new()
        .route("/sessions/{id}/processes", post(start::<B>).get(list::<B>))
        .route(
            "/sessions/{id}/processes/{pid}/output",
            get(output::output::<B>),
        )
        .route(
            "/sessions/{id}/processes/{pid}/stdin",
            post(stdin::<B>).layer(DefaultBodyLimit::max(STDIN_CAP)),
        )
        .route("/sessions/{id}/processes/{pid}/signal", post(signal::<B>))
}

/// A session's processes: `/sessions/{id}/processes`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct ProcessesPath {
    /// The session's id, as `POST /sessions` answered it.
    id: String,
}

/// Starts a command in the session's sandbox, at once (it does not wait): `bash -c
/// <command>` as the program's user, in `/home/sandbox` or `cwd` (relative to it), with
/// `env` added to the sandbox's environment. It keeps running between calls (the session
/// is not frozen while one runs), counts against the session's limits, and is killed
/// when the session ends. The newest `RUNNER_PROCESS_OUTPUT_BYTES` of each of its streams
/// are kept.
#[utoipa::path(
    post,
    path = "/sessions/{id}/processes",
    operation_id = "startProcess",
    tag = "processes",
    params(ProcessesPath),
    request_body = StartProcess,
    responses(
        (status = 201, description = "Started", body = ProcessStarted),
        answers::StartProcessErrors,
    ),
    security(("bearer" = []))
)]
async fn start<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(ProcessesPath { id }): Path<ProcessesPath>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<ProcessStarted>), ApiError> {
    let cap = state.config.code_cap_bytes;
    let body = body_bytes(body, || format!("the body is over the limit ({cap} bytes)"))?;
    let request: StartProcess = decode_object(
        &body,
        r#"{"command": string, "cwd"?: string, "env"?: {string: string}}"#,
    )?;
    check_start(&request, cap)?;
    let config = state.sessions.config();
    let request = ProcessRequest::Start {
        command: request.command,
        cwd: request.cwd,
        env: with_proxy(&state.config.sandbox.egress, request.env),
        keep_bytes: config.process_output_bytes,
        max_running: config.max_processes,
    };
    match ask(&state.sessions, &id, request).await? {
        ProcessAnswer::Started(entry) => {
            tracing::info!(session = %id, pid = entry.pid, "process started");
            let info = info(entry);
            let started = ProcessStarted {
                pid: info.pid,
                command: info.command,
                started_at: info.started_at,
            };
            Ok((StatusCode::CREATED, Json(started)))
        }
        _ => Err(ApiError::out_of_turn(&id, "a process operation")),
    }
}

/// A start request by its words: a command, a working folder inside the home folder,
/// variables that can be set.
fn check_start(request: &StartProcess, cap: usize) -> Result<(), ApiError> {
    let bad = |m: String| Err(ApiError::BadRequest(m));
    if request.command.trim().is_empty() || request.command.contains('\0') {
        return bad("command must be a command line: not empty, without NUL".into());
    }
    if request.command.len() > cap {
        return Err(ApiError::TooLarge(format!(
            "command may be at most {cap} bytes"
        )));
    }
    if let Some(cwd) = &request.cwd {
        check_path(cwd)?;
    }
    check_env(&request.env)
}

fn check_env(env: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let bytes: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if env.len() > ENV_MAX || bytes > ENV_BYTES {
        return Err(ApiError::BadRequest(format!(
            "env may hold at most {ENV_MAX} variables and {ENV_BYTES} bytes"
        )));
    }
    for (name, value) in env {
        let mut chars = name.chars();
        let named = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !named || value.contains('\0') {
            return Err(ApiError::BadRequest(format!(
                "env: {name:?} is not a variable's name ([A-Za-z_][A-Za-z0-9_]*) or its \
                 value holds a NUL"
            )));
        }
    }
    Ok(())
}

/// The session's processes: those running and the most recent 64 that ended, the
/// oldest first.
#[utoipa::path(
    get,
    path = "/sessions/{id}/processes",
    operation_id = "listProcesses",
    tag = "processes",
    params(ProcessesPath),
    responses(
        (status = 200, description = "The processes", body = ProcessList),
        answers::ProcessErrors,
    ),
    security(("bearer" = []))
)]
async fn list<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(ProcessesPath { id }): Path<ProcessesPath>,
) -> Result<Json<ProcessList>, ApiError> {
    match ask(&state.sessions, &id, ProcessRequest::List).await? {
        ProcessAnswer::Listed(entries) => Ok(Json(ProcessList {
            processes: entries.into_iter().map(info).collect(),
        })),
        _ => Err(ApiError::out_of_turn(&id, "a process operation")),
    }
}

/// Whether to close standard input after the bytes: `?eof=true`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct StdinQuery {
    /// Close the process's standard input after writing the bytes.
    #[serde(default)]
    eof: bool,
}

/// Writes the body's raw bytes to the process's standard input (at most 4 MiB; up to
/// 4 MiB wait for a process that reads slowly); `?eof=true` closes it after them.
#[utoipa::path(
    post,
    path = "/sessions/{id}/processes/{pid}/stdin",
    operation_id = "writeStdin",
    tag = "processes",
    params(ProcessPath, StdinQuery),
    request_body(
        content = answers::FileBytes,
        content_type = "application/octet-stream",
        description = "The bytes (possibly none)"
    ),
    responses((status = 204, description = "Queued for the process"), answers::StdinErrors),
    security(("bearer" = []))
)]
async fn stdin<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(path): Path<ProcessPath>,
    query: Result<Query<StdinQuery>, axum::extract::rejection::QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let Query(StdinQuery { eof }) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let body = body_bytes(body, || {
        format!("at most {STDIN_CAP} bytes may be written at once")
    })?;
    let request = ProcessRequest::Stdin {
        pid: path.pid()?,
        data: encode_bytes(&body),
        eof,
    };
    done(ask(&state.sessions, &path.id, request).await?, &path.id)
}

/// Sends a signal to the process's group: `INT`, `TERM`, `KILL`, `HUP`, `QUIT`, `USR1`
/// or `USR2`.
#[utoipa::path(
    post,
    path = "/sessions/{id}/processes/{pid}/signal",
    operation_id = "signalProcess",
    tag = "processes",
    params(ProcessPath),
    request_body = SignalProcess,
    responses((status = 204, description = "Sent"), answers::SignalErrors),
    security(("bearer" = []))
)]
async fn signal<B: SandboxFactory>(
    State(state): State<Arc<AppState<B>>>,
    Path(path): Path<ProcessPath>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let body = body_bytes(body, || "the body is over the limit".into())?;
    let names: Vec<&str> = ProcessSignal::ALL.iter().map(|s| s.name()).collect();
    let shape = format!(r#"{{"signal": one of {names:?}}}"#);
    let SignalProcess { signal } = decode_object(&body, &shape)?;
    let signal = ProcessSignal::from_name(&signal).ok_or_else(|| {
        ApiError::BadRequest(format!("signal must be one of {names:?}, not {signal:?}"))
    })?;
    let request = ProcessRequest::Signal {
        pid: path.pid()?,
        signal,
    };
    done(ask(&state.sessions, &path.id, request).await?, &path.id)
}

fn done(answer: ProcessAnswer, id: &str) -> Result<StatusCode, ApiError> {
    match answer {
        ProcessAnswer::Done => Ok(StatusCode::NO_CONTENT),
        _ => Err(ApiError::out_of_turn(id, "a process operation")),
    }
}

/// A process as the API shows it.
fn info(entry: ProcessEntry) -> ProcessInfo {
    ProcessInfo {
        pid: entry.pid,
        command: entry.command,
        running: entry.exit_code.is_none(),
        exit_code: entry.exit_code,
        started_at: rfc3339_ms(entry.started_at_ms),
        ended_at: entry.ended_at_ms.map(rfc3339_ms),
    }
}

/// Milliseconds since the Unix epoch as RFC 3339, UTC.
fn rfc3339_ms(ms: u64) -> String {
    crate::session::rfc3339(UNIX_EPOCH + Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_checked_by_their_names() {
        let env = |k: &str| BTreeMap::from([(k.to_owned(), "v".to_owned())]);
        assert!(check_env(&env("PORT")).is_ok());
        assert!(check_env(&env("_x1")).is_ok());
        for bad in ["", "1A", "A=B", "A B", "É"] {
            assert!(check_env(&env(bad)).is_err(), "{bad:?}");
        }
        let nul = BTreeMap::from([("A".to_owned(), "a\0b".to_owned())]);
        assert!(check_env(&nul).is_err());
        let many: BTreeMap<String, String> = (0..=ENV_MAX)
            .map(|i| (format!("V{i}"), String::new()))
            .collect();
        assert!(check_env(&many).is_err());
    }

    #[test]
    fn a_process_gets_the_proxy_variables_only_where_hosts_are_open() {
        let off = EgressConfig {
            policy: sandbox_egress::Policy::default(),
            default: crate::config::EgressDefault::None,
            max_bytes: 1,
            max_connections: 1,
        };
        let asked = BTreeMap::from([("A".to_owned(), "1".to_owned())]);
        assert_eq!(with_proxy(&off, asked.clone()), asked);
        let on = EgressConfig {
            policy: sandbox_egress::Policy::parse("pypi.org", "").expect("a policy"),
            ..off
        };
        let mine = BTreeMap::from([("HTTPS_PROXY".to_owned(), String::new())]);
        let env = with_proxy(&on, mine);
        assert_eq!(env["HTTP_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(env["HTTPS_PROXY"], "", "the caller's own value wins");
    }

    #[test]
    fn times_are_rfc3339_to_the_millisecond() {
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
