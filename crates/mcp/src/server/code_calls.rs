//! Tools called from code, on the server's side: what a run of Python, TypeScript or
//! Node offers its program (the allowed tools of every upstream, by server), the run's
//! calls ([`RunCalls`]), their record in the result, and `search_tools`. Where no
//! upstream is configured, none of this happens.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandbox_protocol::tools::ToolsOffer;
use sandbox_protocol::Lang;

use super::SandboxServer;
use crate::upstreams::run_calls::RunCalls;
use crate::upstreams::{Keepers, Upstreams};
use crate::{code_tools, report, search_tool};

/// What a run offers its program, and where its calls go.
pub(super) struct CodeCalls {
    /// The tools, by server.
    pub(super) offer: ToolsOffer,
    /// The run's calls.
    pub(super) calls: RunCalls,
}

impl SandboxServer {
    /// The upstreams, if any is configured.
    pub fn upstreams(&self) -> Option<&Upstreams> {
        self.shared.upstreams.as_ref()
    }

    /// Connects the upstreams (see [`Upstreams::start`]); they stay connected until the
    /// returned keepers are dropped. `None` where none is configured.
    pub async fn start_upstreams(&self) -> Option<Keepers> {
        match &self.shared.upstreams {
            Some(upstreams) => Some(upstreams.start().await),
            None => None,
        }
    }

    /// The configured servers' names (none without upstreams).
    pub(super) fn code_servers(&self) -> Vec<String> {
        self.shared
            .upstreams
            .as_ref()
            .map(Upstreams::names)
            .unwrap_or_default()
    }

    /// The offer and calls of a run of `lang` that may take `run_time`, started by the
    /// call of `ctx`: `None` without upstreams, or for a language without a `tools`
    /// module.
    pub(super) fn code_calls(
        &self,
        lang: &Lang,
        ctx: &RequestContext<RoleServer>,
        run_time: Duration,
    ) -> Option<CodeCalls> {
        let upstreams = self.shared.upstreams.as_ref()?;
        if !code_tools::offered_to(lang.as_str()) {
            return None;
        }
        Some(CodeCalls {
            offer: upstreams.offer(),
            calls: RunCalls::new(upstreams.clone(), ctx.ct.clone(), run_time),
        })
    }

    /// Adds the run's `toolCalls` to its result, where upstreams are configured.
    pub(super) fn record_code_calls(&self, result: &mut CallToolResult, code: Option<&CodeCalls>) {
        if self.shared.upstreams.is_none() {
            return;
        }
        let records = code.map(|c| c.calls.records()).unwrap_or_default();
        report::with_tool_calls(result, &records);
    }

    /// One call of `search_tools`.
    pub(super) fn search_tools(&self, params: &CallToolRequestParams) -> CallToolResult {
        let Some(upstreams) = &self.shared.upstreams else {
            return report::failure(
                "invalid_arguments",
                "no upstream is configured".into(),
                false,
            );
        };
        match search_tool::parse_query(params.arguments.as_ref()) {
            Ok(query) => search_tool::answer(&upstreams.tools(), query.as_deref()),
            Err(error) => report::from_args_error(&error),
        }
    }
}
