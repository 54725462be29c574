//! The calls of `pause_sandbox`, `snapshot_sandbox` and `fork_sandbox`: each opens its
//! `sandboxId` as the sandbox tools do (checked against the caller's credential before
//! anything is sent anywhere) and asks that sandbox's runner. A snapshot id and the
//! forks' sandbox ids name the same runner as the sandbox, and are bound to the same
//! credential; what a cancelled call made is deleted, as no client holds an id for it.

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandbox_protocol::snapshot::{ForkedSession, SnapshotInfo};

use super::sandboxes::{cancellable, close_unheld, lost_if_unreachable, made_or_undone, Refused};
use super::SandboxServer;
use crate::handle::{SandboxHandle, SnapshotHandle};
use crate::runner_client::{RunnerClient, RunnerError, Runners};
use crate::sandbox_args;
use crate::sandbox_report;
use crate::snapshot_report;
use crate::snapshot_tools::SnapshotTool;

impl SandboxServer {
    /// One call of `pause_sandbox`, `snapshot_sandbox` or `fork_sandbox`.
    pub(super) async fn call_snapshot_tool(
        &self,
        tool: SnapshotTool,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let Some(runners) = &self.shared.runner else {
            tracing::info!("call refused: no runner configured");
            return sandbox_report::from_runner_error(tool, &RunnerError::NotConfigured);
        };
        let arguments = params.arguments.as_ref();
        let outcome = match tool {
            SnapshotTool::Pause => self.pause(runners, arguments, &ctx).await,
            SnapshotTool::Snapshot => self.snapshot(runners, arguments, &ctx).await,
            SnapshotTool::Fork => self.fork(runners, arguments, &ctx).await,
        };
        outcome.unwrap_or_else(|refused| refused.into_result(tool))
    }

    async fn pause(
        &self,
        runners: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session) = self.session_of(runners, arguments, ctx)?;
        let info = cancellable(runner.pause_session(&session), ctx).await?;
        tracing::info!(bytes = info.bytes, "sandbox paused");
        Ok(snapshot_report::paused(&info))
    }

    async fn snapshot(
        &self,
        runners: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let holder = self.holder(ctx).map_err(Refused::SandboxId)?;
        let (runner, session) = self.session_of(runners, arguments, ctx)?;
        let taking = {
            let runner = runner.clone();
            async move { runner.snapshot_session(&session).await }
        };
        let undo = {
            let runner = runner.clone();
            move |info: SnapshotInfo| async move { delete_unheld(&runner, &info).await }
        };
        let info = made_or_undone(taking, undo, ctx)
            .await
            .map_err(lost_if_unreachable)?;
        let handle = SnapshotHandle {
            runner: runner.id(),
            snapshot: info.snapshot_id.clone(),
        };
        match handle.seal(&self.shared.handle_key, &holder) {
            Ok(snapshot_id) => {
                tracing::info!(bytes = info.bytes, expires_at = %info.expires_at, "snapshot taken");
                Ok(snapshot_report::snapshotted(&snapshot_id, &info))
            }
            Err(error) => {
                delete_unheld(&runner, &info).await;
                Err(RunnerError::Malformed(error.to_string()).into())
            }
        }
    }

    async fn fork(
        &self,
        runners: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let holder = self.holder(ctx).map_err(Refused::SandboxId)?;
        let (runner, session) = self.session_of(runners, arguments, ctx)?;
        let args = sandbox_args::parse_fork(arguments)?;
        let forking = {
            let runner = runner.clone();
            async move { runner.fork_session(&session, args.count).await }
        };
        let undo = {
            let runners = runners.clone();
            let runner_id = runner.id();
            move |forked: Vec<ForkedSession>| async move {
                for copy in &forked {
                    close_unheld(&runners, runner_id, &copy.id).await;
                }
            }
        };
        let forked = made_or_undone(forking, undo, ctx)
            .await
            .map_err(lost_if_unreachable)?;
        let sealed: Result<Vec<String>, _> = forked
            .iter()
            .map(|copy| {
                let handle = SandboxHandle {
                    runner: runner.id(),
                    session: copy.id.clone(),
                };
                handle.seal(&self.shared.handle_key, &holder)
            })
            .collect();
        match sealed {
            Ok(sandbox_ids) => {
                tracing::info!(count = forked.len(), "sandbox forked");
                Ok(snapshot_report::forked(&sandbox_ids, &forked))
            }
            Err(error) => {
                for copy in &forked {
                    close_unheld(runners, runner.id(), &copy.id).await;
                }
                Err(RunnerError::Malformed(error.to_string()).into())
            }
        }
    }
}

/// Deletes a snapshot no client holds an id for, logging what fails.
async fn delete_unheld(runner: &RunnerClient, info: &SnapshotInfo) {
    if let Err(error) = runner.delete_snapshot(&info.snapshot_id).await {
        tracing::warn!(%error, "deleting a snapshot no client holds an id for failed");
    }
}
