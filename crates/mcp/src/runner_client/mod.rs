//! The HTTP client for the sandbox runner: `POST /run` and `GET /health`, and the sessions
//! that back sandboxes (`sessions.rs`).

mod pool;
mod sessions;

pub use pool::{Cadence, Member, MemberReport, MemberState, Runners, Seen};

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

use reqwest::{header, StatusCode};
use sandbox_protocol::api::{ErrorBody, Health, Limits, RunRequest, RunResponse};

use crate::config::RunnerTarget;
use crate::handle::RunnerId;

/// Time allowed beyond a run's own timeout and the runner's queue wait for the sandbox
/// to report and the network (the process backend's report grace).
pub const RUN_MARGIN: Duration = Duration::from_secs(5);
/// The longest pause between two asks for a sandbox when the runner's queue is full.
const BUSY_PAUSE: Duration = Duration::from_secs(1);
/// How long `GET /health` may take before the runner counts as unreachable.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a run did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// No runner is configured.
    #[error(
        "503 sandbox runner not configured: this server has no runner to run code; \
         set SANDBOX_RUNNER_URL (and SANDBOX_RUNNER_TOKEN) and restart it"
    )]
    NotConfigured,
    /// The runner could not be reached: the request never got there, so nothing ran.
    #[error("the sandbox runner is unreachable ({0}); retrying later may help once it is back")]
    Unreachable(String),
    /// The connection broke after the request was sent: the program may have run, so
    /// it is not sent anywhere again.
    #[error(
        "the connection to the sandbox runner broke after the call was sent ({0}); the \
         program may have run, so this server did not run it again; retry only if running \
         it twice is harmless"
    )]
    ConnectionLost(String),
    /// The runner that holds a sandbox's session is gone.
    #[error(
        "session lost: the runner that held this sandbox is gone ({0}), and the sandbox's \
         files and variables with it; create a new sandbox with create_sandbox (or run \
         without sandboxId)"
    )]
    SessionLost(String),
    /// The runner gave no answer within the run's timeout, its queue wait and [`RUN_MARGIN`].
    #[error("the sandbox runner did not answer within {0} ms; retrying may help")]
    TimedOut(u128),
    /// The runner refused this server's token.
    #[error(
        "the sandbox runner refused this server's credentials (401); \
         fix SANDBOX_RUNNER_TOKEN, retrying will not help"
    )]
    Unauthorized,
    /// The runner has no free sandbox now.
    #[error("the sandbox runner is busy ({status}: {message}); retry{}", retry_hint(*.retry_after))]
    Busy {
        /// 429 or 503.
        status: u16,
        /// The runner's error code (`pool_exhausted`, `queue_timeout`, `shutting_down`).
        code: String,
        /// The runner's explanation.
        message: String,
        /// Seconds the runner asked to wait, from `Retry-After`.
        retry_after: Option<u64>,
    },
    /// The runner has no such session: the sandbox was closed or expired, or its runner
    /// restarted.
    #[error(
        "this sandbox no longer exists: it was closed, or it expired (idle too long, or past \
         its expiresAt), or its runner restarted, and its files are gone; create a new sandbox \
         with create_sandbox (or run without sandboxId)"
    )]
    SandboxNotFound,
    /// The sandbox is in the middle of another call.
    #[error(
        "this sandbox is busy with another call (one call at a time per sandbox); wait for \
         that call to finish, then retry"
    )]
    SandboxBusy,
    /// The runner holds as many sandboxes as it may.
    #[error(
        "the runner already holds as many sandboxes as it allows (RUNNER_MAX_SESSIONS); close \
         one you no longer need with close_sandbox, wait for one to expire, or run without \
         sandboxId in a one-shot sandbox"
    )]
    TooManySandboxes,
    /// A path that leaves the sandbox's home folder.
    #[error(
        "the path is not inside the sandbox's home folder /home/sandbox ({0}); give a path \
         relative to it, without '..', that does not go through a symlink out of it"
    )]
    BadPath(String),
    /// No such file in the sandbox.
    #[error("no such file in the sandbox ({0}); list_files shows the sandbox's files")]
    FileNotFound(String),
    /// A file over a cap, or a full home folder.
    #[error("the file is too large: {0}")]
    FileTooLarge(String),
    /// The sandbox could not read or write a file.
    #[error("the sandbox could not read or write the file ({0})")]
    FileFailed(String),
    /// The runner refused the request itself (400, 413): the same call will fail again.
    #[error("the sandbox runner refused the program ({status}: {message}); retrying the same call will not help")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The runner's explanation.
        message: String,
    },
    /// The program's inline dependencies (its PEP 723 block) were refused: nothing ran.
    #[error(
        "the program's inline dependencies (its `# /// script` block) were refused, and \
         nothing ran: {message}. Use the installed packages (this tool's description lists \
         them), or change the block"
    )]
    Dependencies {
        /// The runner's code (one of [`DEPENDENCY_CODES`]).
        code: &'static str,
        /// The runner's explanation, naming the package.
        message: String,
    },
    /// The runner failed internally.
    #[error("the sandbox runner failed ({status}: {message}); retrying may help")]
    Internal {
        /// The HTTP status.
        status: u16,
        /// The runner's explanation.
        message: String,
    },
    /// The client cancelled the call before the run ended.
    #[error("the call was cancelled before the program finished")]
    Cancelled,
    /// The runner answered something that is not its API.
    #[error(
        "the sandbox runner sent an answer this server cannot read ({0}); retrying will not help"
    )]
    Malformed(String),
}

fn retry_hint(retry_after: Option<u64>) -> String {
    match retry_after {
        Some(secs) => format!(" in {secs} s"),
        None => " in a few seconds".to_owned(),
    }
}

impl RunnerError {
    /// A stable machine-readable code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            RunnerError::NotConfigured => "not_configured",
            RunnerError::Unreachable(_) => "runner_unreachable",
            RunnerError::ConnectionLost(_) => "runner_connection_lost",
            RunnerError::SessionLost(_) => "session_lost",
            RunnerError::TimedOut(_) => "runner_timeout",
            RunnerError::Unauthorized => "runner_unauthorized",
            RunnerError::Busy { .. } => "runner_busy",
            RunnerError::Refused { .. } => "runner_refused",
            RunnerError::Dependencies { code, .. } => code,
            RunnerError::Internal { .. } => "runner_error",
            RunnerError::Cancelled => "cancelled",
            RunnerError::Malformed(_) => "runner_malformed",
            RunnerError::SandboxNotFound => "sandbox_not_found",
            RunnerError::SandboxBusy => "sandbox_busy",
            RunnerError::TooManySandboxes => "too_many_sandboxes",
            RunnerError::BadPath(_) => "bad_path",
            RunnerError::FileNotFound(_) => "file_not_found",
            RunnerError::FileTooLarge(_) => "too_large",
            RunnerError::FileFailed(_) => "file_error",
        }
    }

    /// Whether the same call may succeed later.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            RunnerError::Unreachable(_)
                | RunnerError::TimedOut(_)
                | RunnerError::Busy { .. }
                | RunnerError::Internal { .. }
                | RunnerError::SandboxBusy
                | RunnerError::TooManySandboxes
                | RunnerError::Dependencies {
                    code: "index_unreachable" | "dependency_timeout",
                    ..
                }
        )
    }
}

/// A client of one runner.
#[derive(Clone, Debug)]
pub struct RunnerClient {
    http: reqwest::Client,
    target: RunnerTarget,
    id: RunnerId,
}

impl RunnerClient {
    /// A client for the given runner.
    pub fn new(target: RunnerTarget) -> Result<Self, reqwest::Error> {
        if target.token.is_none() {
            tracing::warn!(
                runner = target.url.as_str(),
                "SANDBOX_RUNNER_TOKEN is not set: calls go to the runner without a token"
            );
        }
        let http = reqwest::Client::builder()
            // The runner sits on loopback or a private network: never through a proxy.
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()?;
        let id = RunnerId::of_url(target.url.as_str());
        Ok(RunnerClient { http, target, id })
    }

    /// The runner's name in sandbox ids: a digest of its URL.
    pub fn id(&self) -> RunnerId {
        self.id
    }

    /// The runner's base URL.
    pub fn url(&self) -> &reqwest::Url {
        &self.target.url
    }

    /// Where and how this client calls.
    pub fn target(&self) -> &RunnerTarget {
        &self.target
    }

    /// Whether this client is `target`, or one of the addresses of its host name.
    pub fn came_from(&self, target: &RunnerTarget) -> bool {
        let (a, b) = (&self.target.url, &target.url);
        a == b
            || (a.scheme() == b.scheme()
                && a.port_or_known_default() == b.port_or_known_default()
                && a.path() == b.path())
    }

    /// Asks `GET /health` once: whether it answered 200, and the body (read whatever
    /// the status, so that a draining runner's 503 says what it is doing).
    pub(crate) async fn probe(&self) -> Result<(bool, pool::Probe), RunnerError> {
        let response = self
            .http
            .get(self.endpoint(&["health"]))
            .timeout(HEALTH_TIMEOUT)
            .send()
            .await
            .map_err(transport_error)?;
        let ok = response.status() == StatusCode::OK;
        let body = response.bytes().await.map_err(transport_error)?;
        let probe =
            serde_json::from_slice(&body).map_err(|e| RunnerError::Malformed(e.to_string()))?;
        Ok((ok, probe))
    }

    /// One ask of a run at `segments`, without asking again when the runner is busy:
    /// the pool decides where to ask next.
    pub(crate) async fn run_once(
        &self,
        segments: &[&str],
        request: &RunRequest,
        limits: &Limits,
    ) -> Result<RunResponse, RunnerError> {
        let timeout_ms = request.timeout_ms.unwrap_or(limits.default_timeout_ms);
        let request = RunRequest {
            timeout_ms: Some(timeout_ms),
            ..request.clone()
        };
        let response = self
            .request(reqwest::Method::POST, segments)
            .json(&request)
            .send()
            .await
            .map_err(transport_error)?;
        read_json(response, StatusCode::OK).await
    }

    /// The URL of `segments` below the runner's base URL, each one percent-encoded as a
    /// path segment. Callers never pass `.` or `..` (they are dropped, not followed).
    fn endpoint(&self, segments: &[&str]) -> reqwest::Url {
        let mut url = self.target.url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// A request with this server's token.
    fn request(&self, method: reqwest::Method, segments: &[&str]) -> reqwest::RequestBuilder {
        let builder = self.http.request(method, self.endpoint(segments));
        match &self.target.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// Runs one program on a runner with `limits`. The request carries the timeout the
    /// caller means (the runner's default when it gives none, so that the wait here is
    /// bounded by what the runner will do).
    ///
    /// A call waits for a sandbox as long as its own deadline allows (its timeout, the
    /// runner's queue wait and [`RUN_MARGIN`]), not just the runner's queue wait: while
    /// the runner answers that every sandbox is busy (the program has not started), it
    /// asks again.
    pub async fn run(
        &self,
        request: &RunRequest,
        limits: &Limits,
        compile_ms: u64,
    ) -> Result<RunResponse, RunnerError> {
        self.run_at(&["run"], request, limits, compile_ms).await
    }

    /// [`run`](Self::run) at `segments`: `POST /run`, or a session's run.
    async fn run_at(
        &self,
        segments: &[&str],
        request: &RunRequest,
        limits: &Limits,
        compile_ms: u64,
    ) -> Result<RunResponse, RunnerError> {
        let timeout_ms = request.timeout_ms.unwrap_or(limits.default_timeout_ms);
        let request = RunRequest {
            timeout_ms: Some(timeout_ms),
            ..request.clone()
        };
        let deadline = Duration::from_millis(timeout_ms + compile_ms)
            + Duration::from_millis(limits.queue_timeout_ms)
            + RUN_MARGIN;
        ask_until_free(deadline, || {
            let builder = self.request(reqwest::Method::POST, segments).json(&request);
            bounded(deadline, async {
                let response = builder.send().await.map_err(transport_error)?;
                read_json(response, StatusCode::OK).await
            })
        })
        .await
    }

    /// Asks the runner for its health; `Err` when it is unreachable or answers something
    /// else than its health. A runner that is starting, degraded or draining answers 503
    /// with the same body as 200: `Ok`, and `status` says which.
    pub async fn health(&self) -> Result<Health, RunnerError> {
        let response = self
            .http
            .get(self.endpoint(&["health"]))
            .timeout(HEALTH_TIMEOUT)
            .send()
            .await
            .map_err(transport_error)?;
        let status = response.status();
        if !status.is_success() && status != StatusCode::SERVICE_UNAVAILABLE {
            return Err(error_from(response).await);
        }
        let body = response.bytes().await.map_err(transport_error)?;
        match serde_json::from_slice::<Health>(&body) {
            Ok(health) => Ok(health),
            Err(e) if status.is_success() => Err(RunnerError::Malformed(e.to_string())),
            // A 503 that is not a health body: a proxy's, or an older runner's error.
            Err(_) => Err(RunnerError::Unreachable(format!(
                "GET /health answered {status}"
            ))),
        }
    }
}

/// Asks with `exchange` until it gives something other than "no sandbox free yet", or
/// `deadline` (from now) would pass while waiting to ask again.
async fn ask_until_free<T, F, Fut>(deadline: Duration, mut exchange: F) -> Result<T, RunnerError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RunnerError>>,
{
    let wait_until = Instant::now() + deadline;
    loop {
        let error = match exchange().await {
            Err(error) => error,
            done => return done,
        };
        let Some(pause) = pause_before_asking_again(&error) else {
            return Err(error);
        };
        if Instant::now() + pause >= wait_until {
            return Err(error);
        }
        tracing::debug!(%error, ?pause, "no sandbox free yet: asking the runner again");
        tokio::time::sleep(pause).await;
    }
}

/// `exchange`, or [`RunnerError::TimedOut`] once `deadline` has passed.
async fn bounded<T>(
    deadline: Duration,
    exchange: impl Future<Output = Result<T, RunnerError>>,
) -> Result<T, RunnerError> {
    match tokio::time::timeout(deadline, exchange).await {
        Ok(result) => result,
        Err(_) => Err(RunnerError::TimedOut(deadline.as_millis())),
    }
}

/// How long to wait before asking again for a sandbox after `error`; `None` when asking
/// again cannot help (the program may have started, or the runner is going away).
fn pause_before_asking_again(error: &RunnerError) -> Option<Duration> {
    match error {
        // The runner's own queue was the wait: ask again at once.
        RunnerError::Busy { code, .. } if code == "queue_timeout" => Some(Duration::ZERO),
        // The queue was full: give running programs a moment.
        RunnerError::Busy {
            code, retry_after, ..
        } if code == "pool_exhausted" => Some(
            retry_after
                .map(Duration::from_secs)
                .unwrap_or(BUSY_PAUSE)
                .min(BUSY_PAUSE),
        ),
        _ => None,
    }
}

/// A failure to exchange with the runner: [`RunnerError::Unreachable`] when no connection
/// was made (nothing reached the runner), else [`RunnerError::ConnectionLost`].
fn transport_error(error: reqwest::Error) -> RunnerError {
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
async fn read_json<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
    expected: StatusCode,
) -> Result<T, RunnerError> {
    if response.status() != expected {
        return Err(error_from(response).await);
    }
    let body = response.bytes().await.map_err(transport_error)?;
    serde_json::from_slice(&body).map_err(|e| RunnerError::Malformed(e.to_string()))
}

async fn error_from(response: reqwest::Response) -> RunnerError {
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

fn classify(
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
        "file_error" => return RunnerError::FileFailed(message),
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
    fn only_a_busy_pool_is_asked_again() {
        let busy = |status, code: &str, retry_after| {
            classify(status, code.into(), String::new(), retry_after)
        };
        let queue_full = busy(StatusCode::TOO_MANY_REQUESTS, "pool_exhausted", Some(30));
        assert_eq!(pause_before_asking_again(&queue_full), Some(BUSY_PAUSE));
        let waited = busy(StatusCode::SERVICE_UNAVAILABLE, "queue_timeout", Some(1));
        assert_eq!(pause_before_asking_again(&waited), Some(Duration::ZERO));
        let leaving = busy(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", Some(1));
        assert_eq!(pause_before_asking_again(&leaving), None);
        assert_eq!(pause_before_asking_again(&RunnerError::TimedOut(1)), None);
    }

    #[test]
    fn endpoints_keep_a_base_path() {
        let target = RunnerTarget::new("http://127.0.0.1:9/runner/", None).unwrap();
        let client = RunnerClient::new(target).unwrap();
        assert_eq!(
            client.endpoint(&["run"]).as_str(),
            "http://127.0.0.1:9/runner/run"
        );
        let target = RunnerTarget::new("http://127.0.0.1:9", None).unwrap();
        let client = RunnerClient::new(target).unwrap();
        assert_eq!(
            client
                .endpoint(&["sessions", "ab", "files", "a b", "c%2F?#"])
                .as_str(),
            "http://127.0.0.1:9/sessions/ab/files/a%20b/c%252F%3F%23"
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
        assert_eq!(pause_before_asking_again(&full), None);
        assert_eq!(
            error(StatusCode::BAD_REQUEST, "bad_path").code(),
            "bad_path"
        );
        let missing = error(StatusCode::NOT_FOUND, "file_not_found");
        assert!(missing.to_string().contains("list_files"), "{missing}");
        let refused = error(StatusCode::UNPROCESSABLE_ENTITY, "dependency_denied");
        assert_eq!(refused.code(), "dependency_denied");
        assert!(!refused.retryable());
        assert!(refused.to_string().contains("nothing ran"), "{refused}");
        assert!(error(StatusCode::UNPROCESSABLE_ENTITY, "index_unreachable").retryable());
        // A 404 that is not a session's is not mistaken for one.
        assert_eq!(
            error(StatusCode::NOT_FOUND, "not_found").code(),
            "runner_refused"
        );
    }
}
