//! The process tools' calls: each opens its `sandboxId` as the sandbox tools do (checked
//! against the caller's credential before anything is sent anywhere), then asks that
//! sandbox's runner; a client that gives up stops the wait.

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandbox_protocol::process::StartProcess;

use super::sandboxes::{cancellable, Refused};
use super::SandboxServer;
use crate::process_args;
use crate::process_report;
use crate::process_tools::ProcessTool;
use crate::runner_client::{RunnerError, Runners};
use crate::sandbox_report;

impl SandboxServer {
    /// One call of a process tool.
    pub(super) async fn call_process_tool(
        &self,
        tool: ProcessTool,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let Some(runner) = &self.shared.runner else {
            tracing::info!("call refused: no runner configured");
            return sandbox_report::from_runner_error(tool, &RunnerError::NotConfigured);
        };
        let arguments = params.arguments.as_ref();
        let outcome = match tool {
            ProcessTool::Start => self.start(runner, arguments, &ctx).await,
            ProcessTool::Output => self.output(runner, arguments, &ctx).await,
            ProcessTool::Stdin => self.stdin(runner, arguments, &ctx).await,
            ProcessTool::Kill => self.kill(runner, arguments, &ctx).await,
            ProcessTool::List => self.processes(runner, arguments, &ctx).await,
        };
        outcome.unwrap_or_else(|refused| refused.into_result(tool))
    }

    async fn start(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session) = self.session_of(runner, arguments, ctx)?;
        let args = process_args::parse_start(arguments).map_err(Refused::Args)?;
        tracing::debug!(command = %args.command, "process command");
        let request = StartProcess {
            command: args.command,
            cwd: args.cwd,
            env: Default::default(),
        };
        let started = cancellable(runner.start_process(&session, &request), ctx).await?;
        tracing::info!(pid = started.pid, "process started");
        Ok(process_report::started(&started))
    }

    async fn output(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session) = self.session_of(runner, arguments, ctx)?;
        let args = process_args::parse_output(arguments).map_err(Refused::Args)?;
        let read = runner.process_output(&session, args.pid, args.from, args.wait);
        let output = cancellable(read, ctx).await?;
        Ok(process_report::output(args.pid, &output))
    }

    async fn stdin(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session) = self.session_of(runner, arguments, ctx)?;
        let args = process_args::parse_stdin(arguments).map_err(Refused::Args)?;
        let written = args.data.len();
        let write = runner.write_stdin(&session, args.pid, args.data, args.eof);
        cancellable(write, ctx).await?;
        Ok(process_report::written(args.pid, written, args.eof))
    }

    async fn kill(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session) = self.session_of(runner, arguments, ctx)?;
        let args = process_args::parse_kill(arguments).map_err(Refused::Args)?;
        let signal = runner.signal_process(&session, args.pid, args.signal);
        cancellable(signal, ctx).await?;
        tracing::info!(
            pid = args.pid,
            signal = args.signal.name(),
            "process signalled"
        );
        Ok(process_report::signalled(args.pid, args.signal))
    }

    async fn processes(
        &self,
        runner: &Runners,
        arguments: Option<&JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session) = self.session_of(runner, arguments, ctx)?;
        let list = cancellable(runner.list_processes(&session), ctx).await?;
        Ok(process_report::listed(&list))
    }
}
