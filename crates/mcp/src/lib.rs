//! sandbox-mcp: the MCP server that gives agents sandboxed code execution.
//!
//! It offers `run_code`, which runs a program of any language its runner offers
//! ([`run_code`]), and a `run_<language>` tool for each of those the operator lists
//! ([`language_tools`]; by default `run_bash`, `run_python`, `run_node`, `run_c`, ...)
//! over MCP's Streamable HTTP transport
//! ([`serve`]) and over stdio ([`serve_stdio`]), and runs each call in a fresh sandbox by
//! calling a sandbox runner's `POST /run` ([`runner_client`]); sandboxes that live
//! across calls ([`sandbox_tools`]): runner sessions behind an opaque, authenticated
//! `sandboxId` ([`handle`]) that any replica can serve, which can be paused, snapshotted
//! and forked ([`snapshot_tools`]); and processes in them
//! ([`process_tools`]): commands that keep running between calls, whose output is read
//! as it comes, which can be fed input and signalled. Where the operator names upstream
//! MCP servers (`MCP_UPSTREAMS`, [`upstreams`]), Python, TypeScript and Node programs call
//! their allowed tools through a `tools` module: this crate is those servers' client, and
//! answers each call a run's streamed answer carries ([`upstreams::run_calls`]);
//! `search_tools` ([`search_tool`]) shows their signatures.
//!
//! It is not the sandbox: isolation, limits and the pool live in `sandbox-runner`, which
//! this crate does not depend on (it speaks to a runner over HTTP, with the types of
//! `sandbox-protocol`). Without a runner it still starts, lists its tools and answers every
//! call with an error that says which variable to set. Nor is it the `sandbox-mcp`
//! program: its commands, and `up` and `stdio --embedded`, which start a runner in the
//! same process, are `sandbox-mcp-bin`'s.
//!
//! To embed it (as `sandbox-mcp up` does), build a [`McpConfig`] and call [`serve`] with a
//! bound listener and a shutdown future:
//!
//! ```no_run
//! # async fn embed() -> Result<(), Box<dyn std::error::Error>> {
//! use sandbox_mcp::{AuthToken, McpConfig, RunnerTarget, ToolConfig};
//!
//! let tools = ToolConfig {
//!     runner: Some(RunnerTarget::new("http://127.0.0.1:8081", Some("runner-token".into()))?),
//!     ..ToolConfig::default()
//! };
//! let config = McpConfig::new(AuthToken::new("a-long-random-client-token")?, tools);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! let shutdown = async {
//!     let _ = tokio::signal::ctrl_c().await;
//! };
//! sandbox_mcp::serve(config, listener, shutdown).await?;
//! # Ok(())
//! # }
//! ```

pub mod catalog;
pub mod code_tools;
pub mod config;
pub mod egress_args;
pub mod handle;
pub mod health;
pub mod installed;
pub mod language_tools;
pub mod listen;
pub mod output_tail;
pub mod outputs;
pub mod process_args;
pub mod process_report;
pub mod process_tools;
pub mod report;
pub mod run_code;
pub mod run_schema;
pub mod runner_client;
pub mod runner_target;
pub mod sandbox_args;
pub mod sandbox_call;
pub mod sandbox_report;
pub mod sandbox_tools;
pub mod search_tool;
pub mod server;
pub mod snapshot_report;
pub mod snapshot_tools;
pub mod stdio;
pub mod tools;
pub mod upstreams;
pub mod wording;

mod accept;
mod args_error;
mod auth;
mod http;
mod limits;
mod origin;
mod schema;
#[cfg(test)]
mod test_support;

pub use config::{AuthToken, ConfigError, McpConfig, ToolConfig};
pub use http::{app, serve, ServeError};
pub use runner_target::RunnerTarget;
pub use stdio::{serve_stdio, StdioError};
