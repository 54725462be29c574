//! The three ways a one-liner is run and checked: (a) spawning the interpreter
//! directly, (b) `POST /run` on the runner, (c) `tools/call` through sandbox-mcp.

use crate::cases::{Case, EXPECTED_STDOUT};
use anyhow::{bail, ensure, Context};
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use sandbox_protocol::api::{Health, RunRequest, RunResponse};
use sandbox_protocol::Lang;
use serde::Serialize;
use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// The longest one run may take on any path before the bench gives up.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the pool's state is polled while waiting for it to refill.
const POLL_EVERY: Duration = Duration::from_millis(2);

/// A path a run takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Via {
    /// (a) the interpreter spawned directly, clean environment.
    Direct,
    /// (b) `POST /run` on sandbox-runner.
    Run,
    /// (c) `tools/call` on sandbox-mcp over Streamable HTTP.
    ToolsCall,
}

impl Via {
    /// Every path, in report order.
    pub const ALL: [Via; 3] = [Via::Direct, Via::Run, Via::ToolsCall];

    /// The column heading in the tables.
    pub fn label(self) -> &'static str {
        match self {
            Via::Direct => "direct spawn",
            Via::Run => "POST /run",
            Via::ToolsCall => "tools/call",
        }
    }
}

/// Everything needed to run a one-liner on any path; cheap to clone into tasks.
#[derive(Clone)]
pub struct Clients {
    /// The runner's API.
    pub runner: RunnerApi,
    /// The initialized MCP session, shared by every call.
    pub mcp: Peer<RoleClient>,
}

impl Clients {
    /// Runs `case` once on `via`, checks its output, and returns how long it took.
    pub async fn once(&self, via: Via, case: &Case) -> anyhow::Result<Duration> {
        let run = async {
            match via {
                Via::Direct => {
                    let interpreter = case.interpreter()?;
                    timed(direct(case, &interpreter)).await
                }
                Via::Run => timed(self.runner.run(case)).await,
                Via::ToolsCall => timed(tools_call(&self.mcp, case)).await,
            }
        };
        tokio::time::timeout(RUN_TIMEOUT, run)
            .await
            .with_context(|| format!("{} {:?} took over {RUN_TIMEOUT:?}", via.label(), case.lang))?
            .with_context(|| format!("{} of {:?}", via.label(), case.code))
    }
}

/// How long `run` takes to succeed.
pub async fn timed(run: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<Duration> {
    let begun = Instant::now();
    run.await?;
    Ok(begun.elapsed())
}

/// (a): the interpreter with the one-liner, a clean environment and piped output.
pub(crate) async fn direct(case: &Case, interpreter: &std::path::Path) -> anyhow::Result<()> {
    let output = Command::new(interpreter)
        .arg(case.inline_flag)
        .arg(case.code)
        .env_clear()
        .envs(Case::clean_env())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("spawning {}", interpreter.display()))?;
    ensure!(output.status.success(), "exited with {}", output.status);
    ensure!(
        output.stdout == EXPECTED_STDOUT.as_bytes(),
        "printed {:?}",
        String::from_utf8_lossy(&output.stdout)
    );
    Ok(())
}

/// (c): one `tools/call` on the shared session.
async fn tools_call(mcp: &Peer<RoleClient>, case: &Case) -> anyhow::Result<()> {
    let result = call_tool(mcp, case.tool, case.code).await?;
    let structured = result
        .structured_content
        .as_ref()
        .context("the result has no structuredContent")?;
    ensure!(result.is_error != Some(true), "isError: {structured}");
    ensure!(
        structured["stdout"] == EXPECTED_STDOUT && structured["exitCode"] == 0,
        "unexpected result {structured}"
    );
    Ok(())
}

/// One `tools/call` of `tool` (`run_python`, ...) with `{code}`: the result, whatever
/// the program did (an error only when the call itself fails).
pub async fn call_tool(
    mcp: &Peer<RoleClient>,
    tool: &str,
    code: &str,
) -> anyhow::Result<CallToolResult> {
    let mut arguments = JsonObject::new();
    arguments.insert("code".into(), code.into());
    call_with(mcp, tool, arguments).await
}

/// One `tools/call` of `run_code` with `{language, code}`: the result, whatever the
/// program did (an error only when the call itself fails).
pub async fn call_run_code(
    mcp: &Peer<RoleClient>,
    language: &str,
    code: &str,
) -> anyhow::Result<CallToolResult> {
    let mut arguments = JsonObject::new();
    arguments.insert("language".into(), language.into());
    arguments.insert("code".into(), code.into());
    call_with(mcp, "run_code", arguments).await
}

async fn call_with(
    mcp: &Peer<RoleClient>,
    tool: &str,
    arguments: JsonObject,
) -> anyhow::Result<CallToolResult> {
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    mcp.call_tool(params).await.context("tools/call")
}

/// The runner's HTTP API, over one keep-alive connection pool.
#[derive(Clone)]
pub struct RunnerApi {
    http: reqwest::Client,
    base: Arc<str>,
    token: Arc<str>,
}

impl RunnerApi {
    /// A client of the runner at `base` (`http://ADDR`).
    pub fn new(base: &str, token: &str) -> anyhow::Result<RunnerApi> {
        RunnerApi::with_timeout(base, token, RUN_TIMEOUT)
    }

    /// A client whose requests may take up to `timeout` (a VM runner under TCG boots
    /// for seconds).
    pub fn with_timeout(base: &str, token: &str, timeout: Duration) -> anyhow::Result<RunnerApi> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .context("building the HTTP client")?;
        Ok(RunnerApi {
            http,
            base: base.into(),
            token: token.into(),
        })
    }

    /// A request to `path` (`/sessions`, ...) with the runner's bearer token.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&*self.token)
    }

    /// (b): `POST /run` with the one-liner; the answer must be a clean `1`.
    pub async fn run(&self, case: &Case) -> anyhow::Result<()> {
        let answer = self.run_code(&case.lang, case.code).await?;
        ensure!(
            answer.stdout == EXPECTED_STDOUT && answer.exit_code == 0,
            "unexpected answer {answer:?}"
        );
        Ok(())
    }

    /// `POST /run` with `code`: the answer, whatever the program did (an error only when
    /// the runner does not answer 200).
    pub async fn run_code(&self, lang: &Lang, code: &str) -> anyhow::Result<RunResponse> {
        let request = RunRequest {
            lang: lang.to_string(),
            code: code.into(),
            timeout_ms: None,
            tools: None,
            egress: None,
        };
        self.run_request(&request).await
    }

    /// `POST /run` with `request` (a timeout, a grant of hosts): the answer, whatever the
    /// program did (an error only when the runner does not answer 200).
    pub async fn run_request(&self, request: &RunRequest) -> anyhow::Result<RunResponse> {
        let response = self
            .http
            .post(format!("{}/run", self.base))
            .bearer_auth(&*self.token)
            .json(request)
            .send()
            .await
            .context("POST /run")?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            bail!("POST /run answered {status}: {body}");
        }
        response.json().await.context("reading the answer")
    }

    /// `GET /health`: 200 when ready, 503 with the same body when starting, degraded or
    /// draining (its `status` says which).
    pub async fn health(&self) -> anyhow::Result<Health> {
        let response = self
            .http
            .get(format!("{}/health", self.base))
            .send()
            .await
            .context("GET /health")?;
        let response = if response.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE {
            response
        } else {
            response.error_for_status().context("GET /health")?
        };
        response.json().await.context("reading /health")
    }

    /// Waits until every sandbox of the pool is warm: the state a request meets when
    /// the previous ones are long done.
    pub async fn wait_until_full(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let health = self.health().await?;
            if health.available >= health.pool_size {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the pool did not refill within {timeout:?} ({} of {} warm)",
                    health.available,
                    health.pool_size
                );
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }
}

/// An initialized MCP session over Streamable HTTP.
pub struct McpSession {
    service: RunningService<RoleClient, ()>,
}

impl McpSession {
    /// Connects to `url` (`http://ADDR/mcp`) with the bearer `token` and initializes.
    pub async fn connect(url: &str, token: &str) -> anyhow::Result<McpSession> {
        let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
        let service =
            ().serve(StreamableHttpClientTransport::from_config(config))
                .await
                .context("initializing the MCP session")?;
        Ok(McpSession { service })
    }

    /// A handle for calls; every clone uses this same session.
    pub fn peer(&self) -> Peer<RoleClient> {
        self.service.peer().clone()
    }

    /// Ends the session.
    pub async fn close(self) -> anyhow::Result<()> {
        self.service
            .cancel()
            .await
            .context("closing the MCP session")?;
        Ok(())
    }
}
