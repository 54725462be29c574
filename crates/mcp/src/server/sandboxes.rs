//! The sandbox tools' calls, and how a sandboxId leads to its sandbox: the id is opened
//! (its tag checked against the caller's credential) before anything is sent anywhere,
//! and the runner it names is the one its calls go to (from any replica: the runner is
//! named in the id); when that runner is gone, the call says the session is lost.

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandbox_protocol::api::CreateSession;
use std::future::Future;

use super::{Callers, SandboxServer};
use crate::handle::{Holder, RunnerId, SandboxHandle};
use crate::runner_client::{RunnerClient, RunnerError, Runners};
use crate::sandbox_args;
use crate::sandbox_call::SandboxCall;
use crate::sandbox_report::{self, SandboxIdError};
use crate::sandbox_tools::{SandboxTool, DOWNLOAD_CAP_BYTES};

impl SandboxServer {
    /// The holder of the sandbox ids this call may use: a digest of the bearer token the
    /// request presents, or this stdio process.
    fn holder(&self, ctx: &RequestContext<RoleServer>) -> Result<Holder, SandboxIdError> {
        match &self.shared.callers {
            Callers::Process(holder) => Ok(holder.clone()),
            Callers::Bearer => ctx
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| http_bearer::presented_token(&parts.headers))
                .map(Holder::bearer)
                .ok_or(SandboxIdError::NoCredential),
        }
    }

    /// The runner and session `sandbox_id` stands for, if it was made for this caller
    /// under this server's key. Contacts nothing.
    pub(super) fn open_sandbox(
        &self,
        sandbox_id: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(RunnerId, String), SandboxIdError> {
        let holder = self.holder(ctx)?;
        let handle = SandboxHandle::open(sandbox_id, &self.shared.handle_key, &holder)?;
        Ok((handle.runner, handle.session))
    }

    /// One call of a sandbox tool.
    pub(super) async fn call_sandbox_tool(
        &self,
        tool: SandboxTool,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let Some(runner) = &self.shared.runner else {
            tracing::info!("call refused: no runner configured");
            return sandbox_report::from_runner_error(tool, &RunnerError::NotConfigured);
        };
        let arguments = params.arguments.as_ref();
        let outcome = match tool {
            SandboxTool::Create => return self.create(runner, arguments, &ctx).await,
            SandboxTool::Upload => self.upload(runner, arguments, &ctx).await,
            SandboxTool::Download => self.download(runner, arguments, &ctx).await,
            SandboxTool::List => self.list(runner, arguments, &ctx).await,
            SandboxTool::Close => self.close(runner, arguments, &ctx).await,
        };
        outcome.unwrap_or_else(|refused| refused.into_result(tool))
    }

    async fn create(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let tool = SandboxTool::Create;
        let args = match sandbox_args::parse_create(arguments) {
            Ok(args) => args,
            Err(error) => return sandbox_report::from_args_error(tool, &error),
        };
        let holder = match self.holder(ctx) {
            Ok(holder) => holder,
            Err(error) => return sandbox_report::from_sandbox_id_error(tool, &error),
        };
        let request = CreateSession {
            idle_timeout_ms: args.idle_timeout_ms,
            ttl_ms: args.ttl_ms,
            from_snapshot: None,
        };
        let limits = self.catalog().limits().clone();
        // In a task of its own: a client that gives up mid-way must not leave a session
        // nobody holds an id for.
        let creating = {
            let runner = runner.clone();
            tokio::spawn(async move { runner.create_session(&request, &limits).await })
        };
        let joined = tokio::select! {
            joined = creating => joined,
            () = ctx.ct.cancelled() => {
                tracing::info!("create_sandbox cancelled by the client");
                return sandbox_report::from_runner_error(tool, &RunnerError::Cancelled);
            }
        };
        let (runner_id, info) = match joined {
            Ok(Ok(created)) => created,
            Ok(Err(error)) => {
                tracing::warn!(code = error.code(), %error, "create_sandbox failed");
                return sandbox_report::from_runner_error(tool, &error);
            }
            Err(error) => {
                let error = RunnerError::Internal {
                    status: 500,
                    message: format!("the creation's task failed: {error}"),
                };
                return sandbox_report::from_runner_error(tool, &error);
            }
        };
        let handle = SandboxHandle {
            runner: runner_id,
            session: info.id.clone(),
        };
        match handle.seal(&self.shared.handle_key, &holder) {
            Ok(sandbox_id) => {
                tracing::info!(idle_timeout_ms = info.idle_timeout_ms, expires_at = %info.expires_at, "sandbox created");
                sandbox_report::created(&sandbox_id, &info)
            }
            Err(error) => {
                let closed = match runner.holder(runner_id) {
                    Ok(holder) => holder.close_session(&info.id).await,
                    Err(error) => Err(error),
                };
                if let Err(close) = closed {
                    tracing::warn!(%close, "closing a session whose id does not fit a handle failed");
                }
                let error = RunnerError::Malformed(error.to_string());
                sandbox_report::from_runner_error(tool, &error)
            }
        }
    }

    /// The runner and session of a call's `sandboxId`.
    pub(super) fn session_of(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(RunnerClient, String), Refused> {
        let id = sandbox_args::parse_sandbox_id(arguments).map_err(Refused::Args)?;
        let (runner_id, session) = self.open_sandbox(&id, ctx).map_err(|error| {
            tracing::info!(
                code = error.code(),
                "call refused: its sandboxId does not open"
            );
            Refused::SandboxId(error)
        })?;
        let holder = runner.holder(runner_id).map_err(Refused::Runner)?;
        Ok((holder, session))
    }

    async fn upload(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session) = self.session_of(runner, arguments, ctx)?;
        let args = sandbox_args::parse_upload(arguments).map_err(Refused::Args)?;
        let size = args.bytes.len();
        cancellable(runner.put_file(&session, &args.path, args.bytes), ctx).await?;
        tracing::info!(bytes = size, "file uploaded");
        Ok(sandbox_report::uploaded(&args.path, size))
    }

    async fn download(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session) = self.session_of(runner, arguments, ctx)?;
        let args = sandbox_args::parse_file(arguments).map_err(Refused::Args)?;
        let fetch = runner.get_file(&session, &args.path, DOWNLOAD_CAP_BYTES);
        let bytes = cancellable(fetch, ctx).await?;
        tracing::info!(bytes = bytes.len(), "file downloaded");
        Ok(sandbox_report::downloaded(&args.path, bytes))
    }

    async fn list(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session) = self.session_of(runner, arguments, ctx)?;
        let list = cancellable(runner.list_files(&session), ctx).await?;
        Ok(sandbox_report::listed(list))
    }

    async fn close(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session) = self.session_of(runner, arguments, ctx)?;
        cancellable(runner.close_session(&session), ctx).await?;
        tracing::info!("sandbox closed");
        Ok(sandbox_report::closed())
    }
}

/// Why a sandbox or process tool's call stopped before it was done.
pub(super) enum Refused {
    Args(crate::tools::ArgsError),
    SandboxId(SandboxIdError),
    Runner(RunnerError),
}

impl From<RunnerError> for Refused {
    fn from(error: RunnerError) -> Self {
        Refused::Runner(error)
    }
}

impl From<crate::tools::ArgsError> for Refused {
    fn from(error: crate::tools::ArgsError) -> Self {
        Refused::Args(error)
    }
}

impl Refused {
    pub(super) fn into_result(self, tool: impl SandboxCall) -> CallToolResult {
        match self {
            Refused::Args(error) => sandbox_report::from_args_error(tool, &error),
            Refused::SandboxId(error) => sandbox_report::from_sandbox_id_error(tool, &error),
            Refused::Runner(error) => {
                if !matches!(error, RunnerError::Cancelled) {
                    tracing::warn!(code = error.code(), %error, "sandbox call failed");
                }
                sandbox_report::from_runner_error(tool, &error)
            }
        }
    }
}

/// `exchange`, or [`RunnerError::Cancelled`] once the client cancels the call.
pub(super) async fn cancellable<T>(
    exchange: impl Future<Output = Result<T, RunnerError>>,
    ctx: &RequestContext<RoleServer>,
) -> Result<T, RunnerError> {
    tokio::select! {
        outcome = exchange => outcome.map_err(lost_if_unreachable),
        () = ctx.ct.cancelled() => Err(RunnerError::Cancelled),
    }
}

/// A session's runner that cannot be reached holds the session no more, as far as a
/// client can tell: say the session is lost.
pub(super) fn lost_if_unreachable(error: RunnerError) -> RunnerError {
    match error {
        RunnerError::Unreachable(why) => RunnerError::SessionLost(why),
        other => other,
    }
}
