//! sandbox-runner: the isolation service.
//!
//! `POST /run {lang, code, timeoutMs}` runs a program in any language of its table
//! ([`languages`]: bash, Python, Node.js, TypeScript, C, C++, Go, Java built in) in a
//! fresh sandbox that is never reused: no network (but, where the operator opens named
//! hosts, a way to the runner's proxy, `sandbox-egress`), 256 MiB, half a CPU, a process cap, a
//! read-only system and a small writable /tmp and home; sessions ([`session`]) are
//! sandboxes that live across runs, with files, frozen between their calls. Sandboxes are
//! made ahead of time in a warm pool ([`pool`]) by a backend ([`backend`]): the process
//! backend uses Linux namespaces, cgroups (v1 and v2) and seccomp, and forks sandboxes
//! from templates; the vm backend boots a microVM per sandbox with the same jail inside.
//! Every request becomes a job in one place ([`job`]); a Python program's inline
//! dependencies are resolved on the host, confined ([`deps`]); a run's output can be
//! streamed to its caller as the program writes ([`live`]); the HTTP API ([`http`])
//! describes itself in the OpenAPI document it serves at `GET /openapi.json`.
//!
//! Binaries that embed the runner must call [`multicall::dispatch`] first thing in
//! `main`: sandboxes are started by executing the binary itself again.
//!
//! This crate is not the MCP server (see `sandbox-mcp`), nor the agent that runs
//! inside a sandbox (see `sandbox-agent`).

pub mod backend;
pub mod config;
pub mod container;
pub mod data_stack;
pub mod deps;
pub mod helper;
pub mod http;
#[cfg(feature = "image-builder")]
pub mod image_cli;
pub mod job;
pub mod languages;
pub mod lifecycle;
pub mod live;
pub mod metrics;
pub mod multicall;
pub mod oneshot;
pub mod packages_cli;
pub mod pool;
pub mod server;
pub mod session;
pub mod store;
