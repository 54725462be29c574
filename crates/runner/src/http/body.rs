//! Reading a request's body: its bytes within the route's limit, a JSON object of the
//! shape asked for, and a run's body made the job for the agent.

use super::error::ApiError;
use crate::config::RunnerConfig;
use crate::job::{Jobs, Place};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use sandbox_egress::Grant;
use sandbox_protocol::agent::Job;
use sandbox_protocol::api::RunRequest;

/// The body of a request, or why it is refused: over the limit, 413 saying what
/// `limit` says.
pub fn body_bytes(
    body: Result<Bytes, BytesRejection>,
    limit: impl FnOnce() -> String,
) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge(limit())
        } else {
            ApiError::BadRequest(rejection.body_text())
        }
    })
}

/// What a body over the limit of `/run` (and a session's run) is told.
pub fn code_limit(config: &RunnerConfig) -> impl FnOnce() -> String + '_ {
    move || {
        format!(
            "the request body is over the limit (code may be at most {} bytes)",
            config.code_cap_bytes
        )
    }
}

/// Decodes a run's body (`POST /run`, a session's run) and makes it the job for the
/// agent ([`Jobs`]), to run at `place`, with the hosts it is granted at the runner's
/// proxy (none: the runner opens none, or a session's run, which has its session's).
pub fn parse_run(
    body: &[u8],
    config: &RunnerConfig,
    place: Place,
) -> Result<(Job, Option<Grant>), ApiError> {
    let request = decode(body)?;
    if let Some(offer) = &request.tools {
        offer
            .check()
            .map_err(|e| ApiError::BadRequest(format!("`tools`: {e}")))?;
    }
    let grant = match place {
        Place::OneShot => config.sandbox.egress.grant(request.egress.as_deref())?,
        Place::Session if request.egress.is_some() => {
            return Err(ApiError::BadRequest(
                "`egress` is a session's, not a run's: set it with PATCH /sessions/{id}".into(),
            ))
        }
        Place::Session => None,
    };
    Ok((Jobs::api(config).job(request, place)?, grant))
}

fn decode(body: &[u8]) -> Result<RunRequest, ApiError> {
    decode_object(
        body,
        r#"{"lang": string, "code": string, "timeoutMs"?: integer, "tools"?: {"servers": [...]}, "egress"?: [string]}"#,
    )
}

/// Decodes a JSON object body into `T`; `shape` tells a client what was expected.
pub fn decode_object<T: serde::de::DeserializeOwned>(
    body: &[u8],
    shape: &str,
) -> Result<T, ApiError> {
    let refuse = |e: &dyn std::fmt::Display| {
        ApiError::BadRequest(format!("the body must be a JSON object {shape}: {e}"))
    };
    // Decoding through Value first refuses the array form serde would accept for a struct.
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| refuse(&e))?;
    if !value.is_object() {
        return Err(refuse(&"got something other than an object"));
    }
    serde_json::from_value(value).map_err(|e| refuse(&e))
}
