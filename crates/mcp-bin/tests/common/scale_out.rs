//! What the scale-out tests (scale_out, scale_out_faults, scale_out_dns) share: the
//! environment of a `sandbox-mcp serve` in front of several runners, and numbered programs
//! whose output says which call ran. Included by those tests alone (`#[path]`), beside
//! `common`.

use rmcp::model::CallToolResult;

use crate::common::text;

/// The environment of a `sandbox-mcp serve` in front of runners: their URLs as one comma
/// list (or one name that resolves to several addresses), their token, and how often
/// their health is polled.
pub struct PoolEnv {
    url: String,
    token: String,
    health_ms: String,
}

impl PoolEnv {
    /// The environment for `runners` (base URLs) sharing `token`, polled every `health_ms`.
    pub fn new<S: AsRef<str>>(
        runners: impl IntoIterator<Item = S>,
        token: &str,
        health_ms: u64,
    ) -> PoolEnv {
        let url = runners
            .into_iter()
            .map(|runner| runner.as_ref().to_owned())
            .collect::<Vec<_>>()
            .join(",");
        PoolEnv {
            url,
            token: token.to_owned(),
            health_ms: health_ms.to_string(),
        }
    }

    /// The variables, to pass to `start_mcp` or `Command::envs`.
    pub fn vars(&self) -> [(&str, &str); 3] {
        [
            ("SANDBOX_RUNNER_URL", &self.url),
            ("SANDBOX_RUNNER_TOKEN", &self.token),
            ("SANDBOX_RUNNER_HEALTH_MS", &self.health_ms),
        ]
    }
}

/// A bash program that prints `n` times 7: its output tells calls apart.
pub fn seven_times(n: u64) -> String {
    format!("echo $(({n} * 7))")
}

/// What [`seven_times`] prints.
pub fn seven_times_output(n: u64) -> String {
    format!("{}\n", n * 7)
}

/// The stdout of a run that must have succeeded.
pub fn stdout_of(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(false), "{}", text(result));
    let structured = result.structured_content.clone().unwrap_or_default();
    structured["stdout"].as_str().unwrap_or_default().to_owned()
}
