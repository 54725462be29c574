//! The HTTP client of one runner: where it is, its token, the URLs and requests of its
//! API, and its health.

use std::time::Duration;

use reqwest::StatusCode;
use sandbox_protocol::api::Health;

use super::answer::{error_from, transport_error};
use super::pool::Probe;
use super::RunnerError;
use crate::handle::RunnerId;
use crate::runner_target::RunnerTarget;

/// How long `GET /health` may take before the runner counts as unreachable.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// How long connecting to the runner may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

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
        if target.token().is_none() {
            tracing::warn!(
                runner = target.url().as_str(),
                "SANDBOX_RUNNER_TOKEN is not set: calls go to the runner without a token"
            );
        }
        let http = reqwest::Client::builder()
            // The runner sits on loopback or a private network: never through a proxy.
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()?;
        // The URL without credentials: a password never goes into the ids clients hold,
        // and changing it keeps the sandboxes reachable.
        let id = RunnerId::of_url(target.url().as_str());
        Ok(RunnerClient { http, target, id })
    }

    /// The runner's name in sandbox ids: a digest of its URL.
    pub fn id(&self) -> RunnerId {
        self.id
    }

    /// The runner's base URL, without user name or password.
    pub fn url(&self) -> &reqwest::Url {
        self.target.url()
    }

    /// Where and how this client calls.
    pub fn target(&self) -> &RunnerTarget {
        &self.target
    }

    /// Whether this client is `target`, or one of the addresses of its host name.
    pub fn came_from(&self, target: &RunnerTarget) -> bool {
        let (a, b) = (self.target.url(), target.url());
        a == b
            || (a.scheme() == b.scheme()
                && a.port_or_known_default() == b.port_or_known_default()
                && a.path() == b.path())
    }

    /// Asks `GET /health` once: whether it answered 200, and the body (read whatever
    /// the status, so that a draining runner's 503 says what it is doing).
    pub(crate) async fn probe(&self) -> Result<(bool, Probe), RunnerError> {
        let response = self.get_health().await?;
        let ok = response.status() == StatusCode::OK;
        let body = response.bytes().await.map_err(transport_error)?;
        let probe =
            serde_json::from_slice(&body).map_err(|e| RunnerError::Malformed(e.to_string()))?;
        Ok((ok, probe))
    }

    /// `GET /health` (no token: the route is open; the URL's credentials, if any, for a
    /// proxy in front), bounded by [`HEALTH_TIMEOUT`].
    async fn get_health(&self) -> Result<reqwest::Response, RunnerError> {
        self.target
            .basic_auth(self.http.get(self.endpoint(&["health"])))
            .timeout(HEALTH_TIMEOUT)
            .send()
            .await
            .map_err(transport_error)
    }

    /// The URL of `segments` below the runner's base URL, each one percent-encoded as a
    /// path segment. Callers never pass `.` or `..` (they are dropped, not followed).
    pub(super) fn endpoint(&self, segments: &[&str]) -> reqwest::Url {
        let mut url = self.target.url().clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// A request with the URL's credentials (if any) and this server's token, in that
    /// order, as before they were taken out of the URL.
    pub(super) fn request(
        &self,
        method: reqwest::Method,
        segments: &[&str],
    ) -> reqwest::RequestBuilder {
        let builder = self
            .target
            .basic_auth(self.http.request(method, self.endpoint(segments)));
        match self.target.token() {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// Asks the runner for its health; `Err` when it is unreachable or answers something
    /// else than its health. A runner that is starting, degraded or draining answers 503
    /// with the same body as 200: `Ok`, and `status` says which.
    pub async fn health(&self) -> Result<Health, RunnerError> {
        let response = self.get_health().await?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
