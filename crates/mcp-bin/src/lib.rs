//! The `sandbox-mcp` program: where the MCP adapter (the `sandbox-mcp` library) and the
//! isolation service (`sandbox-runner`) are joined.
//!
//! `sandbox-mcp serve` and `sandbox-mcp stdio` are the adapter alone, calling a runner
//! elsewhere. `sandbox-mcp up` ([`up`]) and `sandbox-mcp stdio --embedded` ([`stdio`])
//! also start a runner inside this process ([`embedded`]); `up` keeps its bearer token
//! across starts ([`token_store`]) and prints the settings clients need ([`banner`]).
//!
//! This crate is the only one that links both halves: the adapter's crate depends on the
//! protocol and HTTP crates only; the runner, and with it the jail, seccomp, the agent and
//! the embedded interpreter, come in here.

pub mod banner;
pub mod embedded;
pub mod stdio;
pub mod token_store;
pub mod up;
