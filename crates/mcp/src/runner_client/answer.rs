//! How the runner's answers become results or errors: a transport failure is
//! [`RunnerError::Unreachable`] or [`RunnerError::ConnectionLost`] (whether the request got
//! there), an answer with another status than expected is classified by its status and
//! the runner's error code, and an answer that is not the runner's API is malformed.

use std::time::Duration;

use reqwest::{header, RequestBuilder, StatusCode};
use sandbox_protocol::api::ErrorBody;

use super::wait::bounded;
use super::RunnerError;

/// Sends `request` and reads the JSON body of an answer with status `expected`, all
/// within `deadline`.
pub(super) async fn json_within<T: serde::de::DeserializeOwned>(
    deadline: Duration,
    request: RequestBuilder,
    expected: StatusCode,
) -> Result<T, RunnerError> {
    bounded(deadline, async {
        let response = request.send().await.map_err(transport_error)?;
        read_json(response, expected).await
    })
    .await
}

/// Sends `request` and expects an answer without a body, within `deadline`.
pub(super) async fn empty_within(
    deadline: Duration,
    request: RequestBuilder,
) -> Result<(), RunnerError> {
    bounded(deadline, async {
        let response = request.send().await.map_err(transport_error)?;
        read_empty(response).await
    })
    .await
}

/// A failure to exchange with the runner: [`RunnerError::Unreachable`] when no connection
/// was made (nothing reached the runner), else [`RunnerError::ConnectionLost`].
pub(super) fn transport_error(error: reqwest::Error) -> RunnerError {
    // The chain's last cause ("Connection refused") is the part people can act on.
    let mut cause: &dyn std::error::Error = &error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if error.is_connect() {
        RunnerError::Unreachable(cause.to_string())
    } else {
        RunnerError::ConnectionLost(cause.to_string())
    }
}

/// The JSON body of an answer with status `expected`, or the error the answer says.
pub(super) async fn read_json<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
    expected: StatusCode,
) -> Result<T, RunnerError> {
    if response.status() != expected {
        return Err(error_from(response).await);
    }
    let body = response.bytes().await.map_err(transport_error)?;
    serde_json::from_slice(&body).map_err(|e| RunnerError::Malformed(e.to_string()))
}

/// `Ok` for an answer without a body (204, or 200), or the error the answer says.
async fn read_empty(response: reqwest::Response) -> Result<(), RunnerError> {
    match response.status() {
        StatusCode::NO_CONTENT | StatusCode::OK => Ok(()),
        _ => Err(error_from(response).await),
    }
}

/// The error an answer other than the one expected says: its status, the runner's error
/// code and message from its body (when it is the runner's), and its `Retry-After`.
pub(super) async fn error_from(response: reqwest::Response) -> RunnerError {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let body = response.bytes().await.unwrap_or_default();
    let (code, message) = match serde_json::from_slice::<ErrorBody>(&body) {
        Ok(parsed) => (parsed.error.code, parsed.error.message),
        Err(_) => (
            String::new(),
            status.canonical_reason().unwrap_or("error").to_owned(),
        ),
    };
    classify(status, code, message, retry_after)
}

/// The runner's codes for refused inline dependencies, passed on as they are.
pub const DEPENDENCY_CODES: &[&str] = &[
    "bad_script_metadata",
    "dependency_denied",
    "dependency_not_found",
    "dependency_too_large",
    "dependency_timeout",
    "dependency_conflict",
    "python_version_unsupported",
    "index_unreachable",
    "dependencies_disabled",
    "dependencies_unsupported",
    "dependencies_unavailable",
];

/// The error of an answer with `status` and the runner's `runner_code`: the runner's code
/// first (it is finer), then the status.
pub(super) fn classify(
    status: StatusCode,
    runner_code: String,
    message: String,
    retry_after: Option<u64>,
) -> RunnerError {
    if let Some(code) = DEPENDENCY_CODES.iter().find(|c| **c == runner_code) {
        return RunnerError::Dependencies { code, message };
    }
    match runner_code.as_str() {
        "session_not_found" => return RunnerError::SandboxNotFound,
        "session_busy" => return RunnerError::SandboxBusy,
        "too_many_sessions" => return RunnerError::TooManySandboxes,
        "bad_path" => return RunnerError::BadPath(message),
        "file_not_found" => return RunnerError::FileNotFound(message),
        "not_a_file" => return RunnerError::NotAFile(message),
        "file_error" => return RunnerError::FileFailed(message),
        "process_not_found" => return RunnerError::ProcessNotFound,
        "process_ended" => return RunnerError::ProcessEnded,
        "too_many_processes" => return RunnerError::TooManyProcesses,
        "stdin_full" => return RunnerError::StdinFull(message),
        "process_error" => return RunnerError::ProcessFailed(message),
        "snapshot_not_found" => return RunnerError::SnapshotNotFound,
        "storage_full" => return RunnerError::StorageFull(message),
        "storage_error" => return RunnerError::StorageFailed(message),
        "egress_not_allowed" => {
            return RunnerError::EgressNotAllowed {
                message,
                allowed: Vec::new(),
            }
        }
        _ => {}
    }
    let code = status.as_u16();
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => RunnerError::Unauthorized,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => RunnerError::Busy {
            status: code,
            code: runner_code,
            message,
            retry_after,
        },
        s if s.is_client_error() => RunnerError::Refused {
            status: code,
            message,
        },
        s if s.is_server_error() => RunnerError::Internal {
            status: code,
            message,
        },
        _ => RunnerError::Malformed(format!("unexpected status {code}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_errors_that_say_whether_to_retry() {
        let busy = classify(
            StatusCode::TOO_MANY_REQUESTS,
            "pool_exhausted".into(),
            "pool".into(),
            Some(2),
        );
        assert!(busy.retryable());
        assert!(busy.to_string().contains("retry in 2 s"));
        let refused = |status| classify(status, String::new(), "x".into(), None);
        assert!(!refused(StatusCode::UNAUTHORIZED).retryable());
        assert!(!refused(StatusCode::PAYLOAD_TOO_LARGE).retryable());
        assert!(refused(StatusCode::BAD_GATEWAY).retryable());
        assert!(RunnerError::NotConfigured
            .to_string()
            .contains("SANDBOX_RUNNER_URL"));
        assert!(RunnerError::NotConfigured.to_string().contains("503"));
    }

    #[test]
    fn a_host_outside_the_runners_list_has_its_own_code_naming_what_is_open() {
        let refused = || {
            classify(
                StatusCode::BAD_REQUEST,
                "egress_not_allowed".into(),
                "egress: not within the operator's policy: elsewhere.test".into(),
                None,
            )
        };
        assert_eq!(refused().code(), "egress_not_allowed");
        assert!(!refused().retryable());
        let open = ["pypi.org".to_owned(), "*.pythonhosted.org".to_owned()];
        let named = refused().naming_open_hosts(&open).to_string();
        assert!(named.contains("elsewhere.test"), "{named}");
        assert!(
            named.contains("the hosts it opens are: pypi.org, *.pythonhosted.org"),
            "{named}"
        );
        let none = refused().naming_open_hosts(&[]).to_string();
        assert!(none.contains("opens no host"), "{none}");
        let other = RunnerError::SandboxBusy.naming_open_hosts(&open);
        assert_eq!(
            other.code(),
            "sandbox_busy",
            "other errors pass as they are"
        );
    }

    #[test]
    fn the_runners_session_errors_say_what_to_do() {
        let error = |status, code: &str| classify(status, code.into(), "m".into(), None);
        let gone = error(StatusCode::NOT_FOUND, "session_not_found");
        assert_eq!(gone.code(), "sandbox_not_found");
        assert!(!gone.retryable());
        assert!(gone.to_string().contains("create_sandbox"), "{gone}");
        let busy = error(StatusCode::CONFLICT, "session_busy");
        assert!(
            busy.retryable() && busy.to_string().contains("wait"),
            "{busy}"
        );
        let full = error(StatusCode::TOO_MANY_REQUESTS, "too_many_sessions");
        assert!(full.to_string().contains("close_sandbox"), "{full}");
        assert_eq!(
            error(StatusCode::BAD_REQUEST, "bad_path").code(),
            "bad_path"
        );
        let missing = error(StatusCode::NOT_FOUND, "file_not_found");
        assert!(missing.to_string().contains("list_files"), "{missing}");
        let fifo = error(StatusCode::BAD_REQUEST, "not_a_file");
        assert_eq!(fifo.code(), "not_a_file");
        assert!(!fifo.retryable());
        assert!(fifo.to_string().contains("list_files"), "{fifo}");
        let refused = error(StatusCode::UNPROCESSABLE_ENTITY, "dependency_denied");
        assert_eq!(refused.code(), "dependency_denied");
        assert!(!refused.retryable());
        assert!(refused.to_string().contains("nothing ran"), "{refused}");
        assert!(error(StatusCode::UNPROCESSABLE_ENTITY, "index_unreachable").retryable());
        let unknown = error(StatusCode::NOT_FOUND, "process_not_found");
        assert_eq!(unknown.code(), "process_not_found");
        assert!(unknown.to_string().contains("list_processes"), "{unknown}");
        let ended = error(StatusCode::CONFLICT, "process_ended");
        assert_eq!(ended.code(), "process_ended");
        assert!(!ended.retryable());
        assert!(ended.to_string().contains("process_output"), "{ended}");
        let crowded = error(StatusCode::TOO_MANY_REQUESTS, "too_many_processes");
        assert_eq!(crowded.code(), "too_many_processes");
        assert!(crowded.to_string().contains("kill_process"), "{crowded}");
        let full = error(StatusCode::CONFLICT, "stdin_full");
        assert!(
            full.retryable() && full.to_string().contains("wait"),
            "{full}"
        );
        let failed = error(StatusCode::BAD_REQUEST, "process_error");
        assert_eq!(failed.code(), "process_error");
        assert!(!failed.retryable());
        let snapshot = error(StatusCode::NOT_FOUND, "snapshot_not_found");
        assert_eq!(snapshot.code(), "snapshot_not_found");
        assert!(!snapshot.retryable());
        assert!(
            snapshot.to_string().contains("snapshot_sandbox"),
            "{snapshot}"
        );
        let full = error(StatusCode::INSUFFICIENT_STORAGE, "storage_full");
        assert_eq!(full.code(), "storage_full");
        assert!(full.retryable());
        assert!(full.to_string().contains("nothing changed"), "{full}");
        let disk = error(StatusCode::INTERNAL_SERVER_ERROR, "storage_error");
        assert_eq!(disk.code(), "storage_error");
        // A 404 that is not a session's is not mistaken for one.
        assert_eq!(
            error(StatusCode::NOT_FOUND, "not_found").code(),
            "runner_refused"
        );
    }
}
