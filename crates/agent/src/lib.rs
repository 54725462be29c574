//! The programs that run inside and beside a sandbox, each in a module tree of its own:
//!
//! - [`agent`]: the agent, the first process inside a sandbox (PID 1 of its PID
//!   namespace). It serves the runner's exchange on its channel: one job, or a session's
//!   jobs and file operations, each program run as the sandbox user, its output and
//!   `outputs/` files handed back.
//! - [`template`]: a template, the long-lived fork server the runner starts once per
//!   kind of sandbox (process backend), which makes each sandbox from a clone of itself;
//!   with the feature `embedded-python`, Python's holds the host's interpreter, from which
//!   a sandbox's Python loader is forked (the *keeper*) instead of executed.
//! - [`init`]: the init (PID 1) of a microVM guest (vm backend), which boots the guest,
//!   makes the sandbox there as the process backend would (a cgroup, the jail, the agent)
//!   and relays the runner's exchange to that agent.
//! - [`multicall`]: the entry that selects one of them (or the jail, or the owner probe)
//!   by the first argument, in every binary that makes sandboxes: the runner's, and this
//!   crate's own `sandbox-agent` (statically linkable, without the embedded interpreter),
//!   which a VM's initramfs starts as `sandbox-agent --init`.
//!
//! The trees import downwards only: the multicall entry names the programs; the template
//! and the init build on the agent (a template's sandboxes execute it, and its keeper
//! becomes a loader the way the agent starts one; the init serves the agent's exchange
//! with a [`Worker`](agent::Worker) of its own); the agent names neither.
//!
//! One crate rather than one per program: both binaries that run these programs hold all
//! of them (each is a multicall binary), and the template runs the agent's own code for
//! starting a program's process (its descriptors, its user, its environment), which
//! would otherwise have to become a public interface of the agent's.

/// The build of this crate: a digest of the sources it is compiled from (`build.rs`).
/// A binary holding it says it with [`multicall::BUILD_ARG`]; a runner executes a
/// separate `sandbox-agent` as its sandboxes' agent only when it says the runner's own.
pub const BUILD: &str = env!("SANDBOX_AGENT_BUILD");

pub mod agent;
pub mod init;
pub mod multicall;
pub mod template;
