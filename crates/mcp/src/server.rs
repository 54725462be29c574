//! The MCP server handler: lists the tools and runs a call through the runner, with progress
//! notifications while it runs and cancellation when the client gives up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use sandbox_protocol::api::{RunRequest, RunResponse};
use sandbox_protocol::Lang;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::config::{ToolConfig, DEFAULT_MAX_CALLS_PER_SESSION};
use crate::report;
use crate::runner_client::{RunnerClient, RunnerError};
use crate::tools;

/// How often a progress notification is sent while a run is in flight.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// Numbers calls, so that the log lines of one call can be found together.
static CALL_IDS: AtomicU64 = AtomicU64::new(1);

/// The part shared by every session.
#[derive(Debug)]
struct Shared {
    tools: Vec<Tool>,
    runner: Option<RunnerClient>,
    default_timeout: Duration,
    max_calls: usize,
}

/// One MCP server handler; cheap to clone, one per session.
#[derive(Clone, Debug)]
pub struct SandboxServer {
    shared: Arc<Shared>,
    /// The calls this session may still start.
    calls: Arc<Semaphore>,
}

impl SandboxServer {
    /// A handler for the given configuration, with the default cap on calls in flight.
    pub fn new(config: &ToolConfig) -> Result<Self, reqwest::Error> {
        Self::with_max_calls(config, DEFAULT_MAX_CALLS_PER_SESSION)
    }

    /// A handler that runs at most `max_calls` tool calls at once in each session.
    pub fn with_max_calls(config: &ToolConfig, max_calls: usize) -> Result<Self, reqwest::Error> {
        let tools = if config.exec_enabled {
            Lang::ALL
                .into_iter()
                .map(|lang| tools::definition(lang, config.default_timeout))
                .collect()
        } else {
            Vec::new()
        };
        let runner = config.runner.clone().map(RunnerClient::new).transpose()?;
        Ok(SandboxServer {
            shared: Arc::new(Shared {
                tools,
                runner,
                default_timeout: config.default_timeout,
                max_calls,
            }),
            calls: Arc::new(Semaphore::new(max_calls)),
        })
    }

    /// A handler for a new session: the same tools and runner, its own calls in flight.
    pub fn for_new_session(&self) -> Self {
        SandboxServer {
            shared: self.shared.clone(),
            calls: Arc::new(Semaphore::new(self.shared.max_calls)),
        }
    }

    fn instructions(&self) -> &'static str {
        if self.shared.tools.is_empty() {
            "Code execution is turned off on this server (FEATURE_SANDBOX_EXEC=false)."
        } else {
            "Run bash, Python or Node.js code with run_bash, run_python and run_node. \
             Each call runs in a fresh sandbox with no network; nothing is kept between calls."
        }
    }

    /// The runner client, if a runner is configured.
    pub fn runner(&self) -> Option<&RunnerClient> {
        self.shared.runner.as_ref()
    }

    async fn call(
        &self,
        lang: Lang,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let args = match tools::parse_args(params.arguments.as_ref(), self.shared.default_timeout) {
            Ok(args) => args,
            Err(e) => return report::from_args_error(&e),
        };
        let Some(runner) = &self.shared.runner else {
            tracing::info!(%lang, "call refused: no runner configured");
            return report::from_runner_error(&RunnerError::NotConfigured);
        };
        tracing::info!(%lang, code_bytes = args.code.len(), timeout_ms = args.timeout_ms, "run started");
        tracing::debug!(code = %args.code, "program");
        let request = RunRequest {
            lang,
            code: args.code,
            timeout_ms: Some(args.timeout_ms),
        };
        let started = Instant::now();
        let outcome = run_while_reporting(runner, &request, &ctx).await;
        log_outcome(&outcome, started.elapsed());
        match outcome {
            Ok(response) => report::from_run(response, args.timeout_ms),
            Err(error) => report::from_runner_error(&error),
        }
    }
}

/// Runs the request, sending progress meanwhile; gives up when the client cancels.
async fn run_while_reporting(
    runner: &RunnerClient,
    request: &RunRequest,
    ctx: &RequestContext<RoleServer>,
) -> Result<RunResponse, RunnerError> {
    let progress = ctx.meta.get_progress_token().map(|token| Progress {
        peer: ctx.peer.clone(),
        token,
        timeout: Duration::from_millis(request.timeout_ms.unwrap_or_default()),
    });
    tokio::select! {
        outcome = runner.run(request) => outcome,
        () = report_progress(progress) => unreachable!("progress reporting never ends"),
        () = ctx.ct.cancelled() => Err(RunnerError::Cancelled),
    }
}

fn log_outcome(outcome: &Result<RunResponse, RunnerError>, elapsed: Duration) {
    let elapsed_ms = elapsed.as_millis() as u64;
    match outcome {
        Ok(response) => tracing::info!(
            exit_code = response.exit_code,
            timed_out = response.timed_out,
            oom_killed = response.oom_killed,
            duration_ms = response.duration_ms,
            elapsed_ms,
            "run finished"
        ),
        Err(RunnerError::Cancelled) => tracing::info!(elapsed_ms, "run cancelled by the client"),
        Err(error) => tracing::warn!(code = error.code(), %error, elapsed_ms, "run failed"),
    }
}

/// Where and how to report the progress of one call.
struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    timeout: Duration,
}

/// Sends "started", then a notification about every second; never returns.
async fn report_progress(progress: Option<Progress>) {
    let Some(progress) = progress else {
        return std::future::pending().await;
    };
    let total = progress.timeout.as_secs_f64();
    let started = Instant::now();
    let mut ticks = tokio::time::interval(PROGRESS_INTERVAL);
    loop {
        ticks.tick().await;
        let elapsed = started.elapsed().as_secs_f64();
        let message = if elapsed < 0.5 {
            "started in a fresh sandbox".to_owned()
        } else {
            format!("running for {} s", elapsed.round())
        };
        let mut param = ProgressNotificationParam::new(progress.token.clone(), elapsed);
        param.total = Some(total);
        param.message = Some(message);
        if let Err(error) = progress.peer.notify_progress(param).await {
            tracing::debug!(%error, "progress notification not delivered");
        }
    }
}

impl ServerHandler for SandboxServer {
    fn get_info(&self) -> ServerConfig {
        let implementation = Implementation::new("sandbox-mcp", env!("CARGO_PKG_VERSION"))
            .with_title("Sandboxed code execution");
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(implementation)
            .with_instructions(self.instructions())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.shared.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.shared.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(lang) = self
            .get_tool(&params.name)
            .and_then(|t| tools::lang_of(&t.name))
        else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {}", params.name),
                None,
            ));
        };
        let Ok(_in_flight) = self.calls.try_acquire() else {
            tracing::warn!(
                max = self.shared.max_calls,
                "call refused: too many in flight in its session"
            );
            return Ok(report::from_busy_session(self.shared.max_calls).into());
        };
        let call_id = CALL_IDS.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("tool_call", call_id, tool = %params.name);
        Ok(self.call(lang, params, ctx).instrument(span).await.into())
    }
}
