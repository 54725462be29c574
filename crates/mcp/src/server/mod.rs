//! The MCP server handler: lists the tools and runs a call through the runner, with progress
//! notifications while it runs (`progress.rs`: the newest output lines when the client
//! asked for progress) and cancellation when the client gives up. The sandbox tools'
//! calls, and how a sandboxId leads to its runner and session, are in `sandboxes.rs`;
//! pausing, snapshotting and forking a sandbox in `snapshots.rs`; the process tools'
//! calls in `processes.rs`; tools called from code (a run's offer and calls, and
//! `search_tools`) in `code_calls.rs`.

mod code_calls;
mod processes;
mod progress;
mod sandboxes;
mod snapshots;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use sandbox_protocol::api::{Limits, RunRequest, RunResponse};
use sandbox_protocol::language;
use sandbox_protocol::Lang;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::catalog::{self, Catalog, Offer, ToolChoice};
use crate::config::{ToolConfig, DEFAULT_MAX_CALLS_PER_SESSION};
use crate::egress_args;
use crate::handle::{HandleKey, Holder};
use crate::report::{self, RunIn};
use crate::run_code;
use crate::runner_client::{Listeners, RunnerError, Runners, ToolCallSink};
use crate::runner_target::RunnerTarget;
use crate::tools::{self, ToolKind};
use crate::upstreams::Upstreams;
use progress::{while_reporting, Progress};

/// Numbers calls, so that the log lines of one call can be found together.
static CALL_IDS: AtomicU64 = AtomicU64::new(1);

/// Why a handler could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The runner client could not be built.
    #[error("cannot build the runner client: {0}")]
    RunnerClient(#[from] reqwest::Error),
    /// A secret of this process could not be drawn.
    #[error("cannot draw a random secret from /dev/urandom: {0}")]
    Random(#[from] std::io::Error),
}

/// Whose sandbox ids a handler's calls may use: the credential each id is bound to.
#[derive(Debug, Clone)]
pub enum Callers {
    /// Over HTTP: the bearer token each request presents (a digest of it).
    Bearer,
    /// Over stdio: the one client of this process.
    Process(Holder),
}

impl Callers {
    /// Callers of a stdio server: this process, with a secret drawn now.
    pub fn this_process() -> Result<Self, HandlerError> {
        Ok(Callers::Process(Holder::process()?))
    }
}

/// The part shared by every session.
#[derive(Debug)]
struct Shared {
    /// The tools as the runner's limits make them now.
    catalog: RwLock<Arc<Catalog>>,
    runner: Option<Runners>,
    /// Authenticates sandbox ids.
    handle_key: HandleKey,
    /// Whom sandbox ids are bound to.
    callers: Callers,
    /// How the tools are written: the default timeout, whether there are any, which
    /// languages have their own.
    choice: ToolChoice,
    failed_run_is_error: bool,
    max_calls: usize,
    /// The MCP servers whose tools programs call; `None` where none is configured.
    upstreams: Option<Upstreams>,
}

/// One MCP server handler; cheap to clone, one per session.
#[derive(Clone, Debug)]
pub struct SandboxServer {
    shared: Arc<Shared>,
    /// The calls this session may still start.
    calls: Arc<Semaphore>,
}

/// The key of sandbox ids: `SANDBOX_HANDLE_KEY`'s, else one drawn from the runner's token
/// (the same in every replica), else one of this process alone.
fn handle_key(config: &ToolConfig) -> Result<HandleKey, HandlerError> {
    if let Some(key) = &config.handle_key {
        return Ok(key.clone());
    }
    match config.runner.as_ref().and_then(RunnerTarget::token) {
        Some(token) => Ok(HandleKey::derive(token.as_bytes())),
        None => {
            if config.runner.is_some() {
                tracing::warn!(
                    "neither SANDBOX_HANDLE_KEY nor SANDBOX_RUNNER_TOKEN is set: sandbox ids \
                     work only in this process; set SANDBOX_HANDLE_KEY (the same on every \
                     replica) to share them"
                );
            }
            Ok(HandleKey::random()?)
        }
    }
}

impl SandboxServer {
    /// A handler for the given configuration, with the default cap on calls in flight.
    pub fn new(config: &ToolConfig, callers: Callers) -> Result<Self, HandlerError> {
        Self::with_max_calls(config, DEFAULT_MAX_CALLS_PER_SESSION, callers)
    }

    /// A handler that runs at most `max_calls` tool calls at once in each session, whose
    /// sandbox ids are bound to `callers`. Until
    /// [`refresh_limits`](Self::refresh_limits) hears from the runner, its tools
    /// describe the runner's defaults.
    pub fn with_max_calls(
        config: &ToolConfig,
        max_calls: usize,
        callers: Callers,
    ) -> Result<Self, HandlerError> {
        let upstreams = config.upstreams.as_ref().map(Upstreams::new);
        let servers = upstreams.as_ref().map(Upstreams::names).unwrap_or_default();
        let choice = ToolChoice {
            default_timeout: config.default_timeout,
            exec_enabled: config.exec_enabled,
            language_tools: config.language_tools.clone(),
        };
        let catalog = Catalog::new(Limits::default(), &choice).with_code_tools(&servers);
        let runner = match &config.runner {
            None => None,
            Some(first) => {
                let targets = std::iter::once(first.clone())
                    .chain(config.more_runners.iter().cloned())
                    .collect();
                Some(Runners::new(targets, config.cadence)?)
            }
        };
        Ok(SandboxServer {
            shared: Arc::new(Shared {
                catalog: RwLock::new(Arc::new(catalog)),
                runner,
                handle_key: handle_key(config)?,
                callers,
                choice,
                failed_run_is_error: config.failed_run_is_error,
                max_calls,
                upstreams,
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

    /// The tools and limits in force now.
    pub fn catalog(&self) -> Arc<Catalog> {
        let catalog = self.shared.catalog.read();
        // A panic while the lock was held left a whole Arc in place: use it.
        catalog.unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Asks the runner for its limits and rewrites the tools when they changed. Returns
    /// whether the runner answered with its limits.
    pub async fn refresh_limits(&self) -> bool {
        let Some(runner) = self.shared.runner.as_ref().and_then(Runners::any_healthy) else {
            return false;
        };
        let offer = match runner.health().await {
            Ok(health) => match health.limits {
                Some(limits) => Offer {
                    limits,
                    packages: health.packages.unwrap_or_default(),
                    languages: health.languages.unwrap_or_else(language::classic),
                },
                None => return false, // an older runner: its defaults stand
            },
            Err(error) => {
                tracing::debug!(%error, "the runner's limits are unknown for now");
                return false;
            }
        };
        if !self.catalog().describes(&offer) {
            let names: Vec<&str> = offer.languages.iter().map(|l| l.name.as_str()).collect();
            tracing::info!(limits = ?offer.limits, packages = ?offer.packages.key, languages = %names.join(","), "the runner's offer: the tools describe it");
            let missing = self
                .shared
                .choice
                .language_tools
                .not_offered(&offer.languages);
            if !missing.is_empty() {
                tracing::warn!(languages = %missing.join(","), "MCP_LANGUAGE_TOOLS names languages the runner does not offer: they get no tool");
            }
            let catalog =
                Catalog::of(offer, &self.shared.choice).with_code_tools(&self.code_servers());
            let mut current = self
                .shared
                .catalog
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            *current = Arc::new(catalog);
        }
        true
    }

    /// Looks at the runners (their names and health, see [`Runners::look`]) and asks one
    /// for its limits now, then follows both ([`Runners::follow`], and the limits every
    /// [`catalog::REFRESH`]) until the returned task is aborted. `/health` answers from
    /// these looks, so the first is done before this returns.
    pub async fn follow_runner_limits(&self) -> tokio::task::JoinHandle<()> {
        if let Some(runners) = &self.shared.runner {
            runners.look().await;
        }
        self.refresh_limits().await;
        let server = self.clone();
        tokio::spawn(async move {
            let following = server.shared.runner.clone().map(Runners::follow);
            let limits = async {
                let mut ticks = tokio::time::interval(catalog::REFRESH);
                ticks.tick().await; // the first tick is now: just done
                loop {
                    ticks.tick().await;
                    server.refresh_limits().await;
                }
            };
            match following {
                Some(following) => tokio::join!(following, limits).1,
                None => limits.await,
            }
        })
    }

    fn instructions(&self) -> String {
        let servers = self.code_servers();
        if !self.shared.choice.exec_enabled || servers.is_empty() {
            return self.run_instructions().to_owned();
        }
        format!(
            "{} Python, TypeScript and Node.js programs can call the operator's tools \
             (servers: {}) through a `tools` module: search_tools shows their signatures; \
             one program that calls several tools and prints only what matters saves \
             many direct calls.",
            self.run_instructions(),
            servers.join(", ")
        )
    }

    fn run_instructions(&self) -> &'static str {
        if !self.shared.choice.exec_enabled {
            "Code execution is turned off on this server (FEATURE_SANDBOX_EXEC=false)."
        } else {
            "Run code with run_code (any language the runner offers, its description lists \
             them) or the run_<language> tools of the main ones (run_bash, run_python, \
             run_node, and run_typescript, run_c, run_cpp, run_go, run_java where offered: \
             tools/list says). Without sandboxId each call runs in a \
             fresh sandbox with no network (but the hosts the run tools name, where the runner \
             opens any), and nothing is kept between calls. For \
             multi-step work, create_sandbox gives a sandboxId: runs with it keep their files, \
             and Python, Node.js and TypeScript variables, between calls; \
             upload_file, download_file and list_files move files in and out; close_sandbox \
             ends it. Before a long wait, pause_sandbox keeps a sandbox's files at no cost \
             until its next call wakes it; snapshot_sandbox keeps a known good state that \
             create_sandbox (snapshotId) starts new sandboxes from; fork_sandbox copies a \
             sandbox to try alternatives side by side. A run answers only once its program has ended: for a server, a long \
             job or anything to watch or feed, start_process starts it in a sandbox, \
             process_output reads its output as it comes, write_stdin feeds it, \
             kill_process stops it and list_processes lists them."
        }
    }

    /// The runners, if any is configured.
    pub fn runner(&self) -> Option<&Runners> {
        self.shared.runner.as_ref()
    }

    async fn call(
        &self,
        lang: Lang,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let catalog = self.catalog();
        let limits = catalog.limits();
        let arguments = params.arguments.as_ref();
        let args = match tools::parse_args(
            arguments,
            catalog.default_timeout_ms(),
            limits.max_timeout_ms,
        ) {
            Ok(args) => args,
            Err(e) => return report::from_args_error(&e),
        };
        let egress = match egress_args::parse(arguments) {
            Ok(egress) => egress,
            Err(e) => return report::from_args_error(&e),
        };
        let Some(runner) = &self.shared.runner else {
            tracing::info!(%lang, "call refused: no runner configured");
            return report::from_runner_error(&RunnerError::NotConfigured);
        };
        // The id is checked before anything is sent anywhere.
        let session = match &args.sandbox_id {
            None => None,
            Some(id) => match self.open_sandbox(id, &ctx) {
                Ok(session) => Some(session),
                Err(error) => {
                    tracing::info!(%lang, code = error.code(), "run refused: its sandboxId does not open");
                    return report::failure(error.code(), error.to_string(), false);
                }
            },
        };
        let place = if session.is_some() {
            RunIn::Sandbox
        } else {
            RunIn::OneShot
        };
        tracing::info!(%lang, code_bytes = args.code.len(), timeout_ms = args.timeout_ms, ?place, "run started");
        tracing::debug!(code = %args.code, "program");
        let run_time = catalog.run_time(&lang, args.timeout_ms);
        let deadline =
            limits.answer_within(run_time) + limits.code_allowance(lang.as_str(), &args.code);
        let code = self.code_calls(&lang, &ctx, run_time);
        let request = RunRequest {
            lang: lang.to_string(),
            code: args.code,
            timeout_ms: Some(args.timeout_ms),
            tools: code.as_ref().map(|c| c.offer.clone()),
            egress,
        };
        let started = Instant::now();
        let progress = Progress::asked(&ctx, run_time, place);
        let tail = progress.as_ref().map(Progress::tail);
        let listeners = Listeners {
            tail: tail.as_deref(),
            tool_calls: code.as_ref().map(|c| &c.calls as &dyn ToolCallSink),
        };
        let outcome = match &session {
            None => {
                let run = runner.run(&request, deadline, listeners);
                while_reporting(run, progress, &ctx).await
            }
            Some((id, session)) => {
                let run = async {
                    let holder = runner.holder(*id)?;
                    let outcome = holder
                        .run_in_session(session, &request, deadline, listeners)
                        .await
                        .map_err(sandboxes::lost_if_unreachable);
                    runner.count(*id, outcome.is_err());
                    outcome
                };
                while_reporting(run, progress, &ctx).await
            }
        };
        log_outcome(&outcome, started.elapsed());
        match outcome {
            Ok(response) => {
                let mut result = report::from_run(
                    response,
                    args.timeout_ms,
                    limits,
                    self.shared.failed_run_is_error,
                    place,
                );
                self.record_code_calls(&mut result, code.as_ref());
                result
            }
            Err(error) => {
                report::from_runner_error(&error.naming_open_hosts(&limits.network_hosts))
            }
        }
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
        Ok(ListToolsResult::with_all_items(
            self.catalog().tools().to_vec(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.catalog()
            .tools()
            .iter()
            .find(|t| t.name == name)
            .cloned()
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let catalog = self.catalog();
        let Some(kind) = self
            .get_tool(&params.name)
            .and_then(|t| ToolKind::of(&t.name, catalog.languages()))
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
        let result = match kind {
            ToolKind::Run(lang) => self.call(lang, params, ctx).instrument(span).await,
            ToolKind::RunCode => {
                match run_code::language(params.arguments.as_ref(), catalog.languages()) {
                    Ok(lang) => self.call(lang, params, ctx).instrument(span).await,
                    Err(error) => {
                        span.in_scope(|| tracing::info!(%error, "run_code refused"));
                        report::from_args_error(&error)
                    }
                }
            }
            ToolKind::Sandbox(tool) => {
                self.call_sandbox_tool(tool, params, ctx)
                    .instrument(span)
                    .await
            }
            ToolKind::Snapshot(tool) => {
                self.call_snapshot_tool(tool, params, ctx)
                    .instrument(span)
                    .await
            }
            ToolKind::Process(tool) => {
                self.call_process_tool(tool, params, ctx)
                    .instrument(span)
                    .await
            }
            ToolKind::SearchTools => span.in_scope(|| self.search_tools(&params)),
        };
        Ok(result.into())
    }
}
