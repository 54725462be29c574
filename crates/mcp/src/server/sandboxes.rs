//! The sandbox tools' calls, and how a sandboxId leads to its sandbox: the id is opened
//! (its tag checked against the caller's credential) before anything is sent anywhere,
//! and the runner it names is the one its calls go to (from any replica: the runner is
//! named in the id); when that runner is gone, the call says the session is lost.

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandbox_protocol::api::{CreateSession, Limits, SessionInfo};
use std::future::Future;

use super::{Callers, SandboxServer};
use crate::handle::{Holder, RunnerId, SandboxHandle, SnapshotHandle};
use crate::runner_client::{RunnerClient, RunnerError, Runners};
use crate::sandbox_args;
use crate::sandbox_call::SandboxCall;
use crate::sandbox_report::{self, SandboxIdError};
use crate::sandbox_tools::{SandboxTool, DOWNLOAD_CAP_BYTES};

impl SandboxServer {
    /// The holder of the sandbox ids this call may use: a digest of the bearer token the
    /// request presents, or this stdio process.
    pub(super) fn holder(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Holder, SandboxIdError> {
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

    /// The runners, or the result of `tool` that says none is configured.
    pub(super) fn runners_for(&self, tool: impl SandboxCall) -> Result<&Runners, CallToolResult> {
        self.shared.runner.as_ref().ok_or_else(|| {
            tracing::info!("call refused: no runner configured");
            sandbox_report::from_runner_error(tool, &RunnerError::NotConfigured)
        })
    }

    /// A call of `tool` on the sandbox its `sandboxId` names: `answer` is given the
    /// runners, the sandbox's runner and its session once the id opens; whatever stops
    /// the call becomes `tool`'s failed result.
    pub(super) async fn in_sandbox<F, Fut>(
        &self,
        tool: impl SandboxCall,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
        answer: F,
    ) -> CallToolResult
    where
        F: FnOnce(Runners, RunnerClient, String) -> Fut,
        Fut: Future<Output = Result<CallToolResult, Refused>>,
    {
        let runners = match self.runners_for(tool) {
            Ok(runners) => runners,
            Err(refused) => return refused,
        };
        let answered = async {
            let (runner, session) = self.session_of(runners, arguments, ctx)?;
            answer(runners.clone(), runner, session).await
        };
        answered
            .await
            .unwrap_or_else(|refused| refused.into_result(tool))
    }

    /// One call of a sandbox tool.
    pub(super) async fn call_sandbox_tool(
        &self,
        tool: SandboxTool,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let runner = match self.runners_for(tool) {
            Ok(runners) => runners,
            Err(refused) => return refused,
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
        runners: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let tool = SandboxTool::Create;
        let args = match sandbox_args::parse_create(arguments) {
            Ok(args) => args,
            Err(error) => return sandbox_report::from_args_error(tool, &error),
        };
        let egress = match crate::egress_args::parse(arguments) {
            Ok(egress) => egress,
            Err(error) => return sandbox_report::from_args_error(tool, &error),
        };
        let holder = match self.holder(ctx) {
            Ok(holder) => holder,
            Err(error) => return sandbox_report::from_sandbox_id_error(tool, &error),
        };
        // A snapshot is opened (its tag checked) before anything is sent anywhere.
        let snapshot = match &args.snapshot_id {
            None => None,
            Some(text) => match SnapshotHandle::open(text, &self.shared.handle_key, &holder) {
                Ok(snapshot) => Some(snapshot),
                Err(error) => {
                    tracing::info!("create_sandbox refused: its snapshotId does not open");
                    return sandbox_report::from_sandbox_id_error(tool, &error.into());
                }
            },
        };
        let limits = self.catalog().limits().clone();
        let request = CreateSession {
            idle_timeout_ms: args.idle_timeout_ms,
            ttl_ms: args.ttl_ms,
            from_snapshot: snapshot.as_ref().map(|s| s.snapshot.clone()),
            egress,
        };
        // Made in a task of its own, closed if the client gives up mid-way: no session is
        // left that nobody holds an id for.
        let creating = {
            let runners = runners.clone();
            async move {
                match snapshot {
                    None => runners.create_session(&request, &limits).await,
                    Some(snapshot) => {
                        create_from(&runners, snapshot.runner, &request, &limits).await
                    }
                }
            }
        };
        let undo = {
            let runners = runners.clone();
            move |(runner_id, info): (RunnerId, SessionInfo)| async move {
                close_unheld(&runners, runner_id, &info.id).await;
            }
        };
        let (runner_id, info) = match made_or_undone(creating, undo, ctx).await {
            Ok(created) => created,
            Err(error) => {
                if !matches!(error, RunnerError::Cancelled) {
                    tracing::warn!(code = error.code(), %error, "create_sandbox failed");
                }
                let error = error.naming_open_hosts(&self.catalog().limits().network_hosts);
                return sandbox_report::from_runner_error(tool, &error);
            }
        };
        let handle = SandboxHandle {
            runner: runner_id,
            session: info.id.clone(),
        };
        match handle.seal(&self.shared.handle_key, &holder) {
            Ok(sandbox_id) => {
                tracing::info!(idle_timeout_ms = info.idle_timeout_ms, expires_at = %info.expires_at, from_snapshot = args.snapshot_id.is_some(), "sandbox created");
                sandbox_report::created(&sandbox_id, &info)
            }
            Err(error) => {
                close_unheld(runners, runner_id, &info.id).await;
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

/// Opens a session from a snapshot on `runner`, the one that holds it (a snapshot lives
/// on one runner only); [`RunnerError::SnapshotLost`] when that runner is gone.
async fn create_from(
    runners: &Runners,
    runner: RunnerId,
    request: &CreateSession,
    limits: &Limits,
) -> Result<(RunnerId, SessionInfo), RunnerError> {
    let snapshot_lost = |error| match error {
        RunnerError::SessionLost(why) | RunnerError::Unreachable(why) => {
            RunnerError::SnapshotLost(why)
        }
        other => other,
    };
    let holder = runners.holder(runner).map_err(snapshot_lost)?;
    let info = holder
        .create_session(request, limits)
        .await
        .map_err(snapshot_lost)?;
    Ok((runner, info))
}

/// Closes a session no client holds an id for, logging what fails.
pub(super) async fn close_unheld(runners: &Runners, runner: RunnerId, session: &str) {
    let closed = match runners.holder(runner) {
        Ok(holder) => holder.close_session(session).await,
        Err(error) => Err(error),
    };
    if let Err(error) = closed {
        tracing::warn!(%error, "closing a session no client holds an id for failed");
    }
}

/// Runs `make` to its end in a task of its own and gives what it made; when the client
/// cancels first, what it makes goes to `undo` instead (whenever it is made), so nothing
/// is left behind that no client holds an id for.
pub(super) async fn made_or_undone<T, U, F>(
    make: impl Future<Output = Result<T, RunnerError>> + Send + 'static,
    undo: U,
    ctx: &RequestContext<RoleServer>,
) -> Result<T, RunnerError>
where
    T: Send + 'static,
    U: FnOnce(T) -> F + Clone + Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let (sender, mut receiver) = tokio::sync::oneshot::channel();
    let late = undo.clone();
    tokio::spawn(async move {
        // The receiver is gone (or closed) once the client cancelled.
        if let Err(Ok(unheld)) = sender.send(make.await) {
            late(unheld).await;
        }
    });
    tokio::select! {
        made = &mut receiver => made.unwrap_or_else(|_| {
            Err(RunnerError::Internal {
                status: 500,
                message: "the call's task ended without an answer".into(),
            })
        }),
        () = ctx.ct.cancelled() => {
            tracing::info!("call cancelled by the client: what it makes is undone");
            receiver.close();
            // Sent just before the close: undone here, as the task no longer can.
            if let Ok(Ok(unheld)) = receiver.try_recv() {
                tokio::spawn(undo(unheld));
            }
            Err(RunnerError::Cancelled)
        }
    }
}
