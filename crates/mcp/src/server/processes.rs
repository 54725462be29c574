//! The process tools' calls: each opens its `sandboxId` as the sandbox tools do (checked
//! against the caller's credential before anything is sent anywhere), reads its
//! arguments, then asks that sandbox's runner; a client that gives up stops the wait.

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandbox_protocol::process::StartProcess;

use super::sandboxes::{cancellable, Refused};
use super::SandboxServer;
use crate::process_args;
use crate::process_report;
use crate::process_tools::ProcessTool;
use crate::runner_client::RunnerClient;

impl SandboxServer {
    /// One call of a process tool.
    pub(super) async fn call_process_tool(
        &self,
        tool: ProcessTool,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let arguments = params.arguments.as_ref();
        let ctx = &ctx;
        self.in_sandbox(tool, arguments, ctx, |_, runner, session| async move {
            let call = Call {
                runner: &runner,
                session: &session,
                ctx,
            };
            call.answer(tool, arguments).await
        })
        .await
    }
}

/// A call's sandbox, opened: its runner and session.
struct Call<'a> {
    runner: &'a RunnerClient,
    session: &'a str,
    ctx: &'a RequestContext<RoleServer>,
}

impl Call<'_> {
    /// Reads the arguments of `tool` and asks the runner.
    async fn answer(
        &self,
        tool: ProcessTool,
        arguments: Option<&JsonObject>,
    ) -> Result<CallToolResult, Refused> {
        let (runner, session, ctx) = (self.runner, self.session, self.ctx);
        Ok(match tool {
            ProcessTool::Start => {
                let args = process_args::parse_start(arguments)?;
                tracing::debug!(command = %args.command, "process command");
                let request = StartProcess {
                    command: args.command,
                    cwd: args.cwd,
                    env: Default::default(),
                };
                let started = cancellable(runner.start_process(session, &request), ctx).await?;
                tracing::info!(pid = started.pid, "process started");
                process_report::started(&started)
            }
            ProcessTool::Output => {
                let args = process_args::parse_output(arguments)?;
                let read = runner.process_output(session, args.pid, args.from, args.wait);
                process_report::output(args.pid, &cancellable(read, ctx).await?)
            }
            ProcessTool::Stdin => {
                let args = process_args::parse_stdin(arguments)?;
                let written = args.data.len();
                let write = runner.write_stdin(session, args.pid, args.data, args.eof);
                cancellable(write, ctx).await?;
                process_report::written(args.pid, written, args.eof)
            }
            ProcessTool::Kill => {
                let args = process_args::parse_kill(arguments)?;
                let signal = runner.signal_process(session, args.pid, args.signal);
                cancellable(signal, ctx).await?;
                tracing::info!(
                    pid = args.pid,
                    signal = args.signal.name(),
                    "process signalled"
                );
                process_report::signalled(args.pid, args.signal)
            }
            ProcessTool::List => {
                let list = cancellable(runner.list_processes(session), ctx).await?;
                process_report::listed(&list)
            }
        })
    }
}
