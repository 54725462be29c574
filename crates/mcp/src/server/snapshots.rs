//! The calls of `pause_sandbox`, `snapshot_sandbox` and `fork_sandbox`: each opens its
//! `sandboxId` as the sandbox tools do (checked against the caller's credential before
//! anything is sent anywhere) and asks that sandbox's runner. A snapshot id and the
//! forks' sandbox ids name the same runner as the sandbox, and are bound to the same
//! credential; what a cancelled call made is deleted, as no client holds an id for it.

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandbox_protocol::snapshot::{ForkedSession, SnapshotInfo};

use super::sandboxes::{cancellable, close_unheld, lost_if_unreachable, made_or_undone, Refused};
use super::SandboxServer;
use crate::handle::{SandboxHandle, SnapshotHandle};
use crate::runner_client::{RunnerClient, RunnerError, Runners};
use crate::sandbox_args;
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
        let arguments = params.arguments.as_ref();
        let ctx = &ctx;
        self.in_sandbox(
            tool,
            arguments,
            ctx,
            |runners, runner, session| async move {
                let opened = Opened {
                    server: self,
                    runners,
                    runner,
                    session,
                    ctx,
                };
                match tool {
                    SnapshotTool::Pause => opened.pause().await,
                    SnapshotTool::Snapshot => opened.snapshot().await,
                    SnapshotTool::Fork => {
                        let args = sandbox_args::parse_fork(arguments)?;
                        opened.fork(args.count).await
                    }
                }
            },
        )
        .await
    }
}

/// A call's sandbox, opened: its runner and session, and the call it came with.
struct Opened<'a> {
    server: &'a SandboxServer,
    runners: Runners,
    runner: RunnerClient,
    session: String,
    ctx: &'a RequestContext<RoleServer>,
}

impl Opened<'_> {
    async fn pause(self) -> Result<CallToolResult, Refused> {
        let info = cancellable(self.runner.pause_session(&self.session), self.ctx).await?;
        tracing::info!(bytes = info.bytes, "sandbox paused");
        Ok(snapshot_report::paused(&info))
    }

    async fn snapshot(self) -> Result<CallToolResult, Refused> {
        let holder = self.server.holder(self.ctx).map_err(Refused::SandboxId)?;
        let Opened {
            server,
            runner,
            session,
            ctx,
            ..
        } = self;
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
        match handle.seal(&server.shared.handle_key, &holder) {
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

    async fn fork(self, count: u64) -> Result<CallToolResult, Refused> {
        let holder = self.server.holder(self.ctx).map_err(Refused::SandboxId)?;
        let Opened {
            server,
            runners,
            runner,
            session,
            ctx,
        } = self;
        let runner_id = runner.id();
        let forking = {
            let runner = runner.clone();
            async move { runner.fork_session(&session, count).await }
        };
        let undo = {
            let runners = runners.clone();
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
                    runner: runner_id,
                    session: copy.id.clone(),
                };
                handle.seal(&server.shared.handle_key, &holder)
            })
            .collect();
        match sealed {
            Ok(sandbox_ids) => {
                tracing::info!(count = forked.len(), "sandbox forked");
                Ok(snapshot_report::forked(&sandbox_ids, &forked))
            }
            Err(error) => {
                for copy in &forked {
                    close_unheld(&runners, runner_id, &copy.id).await;
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
