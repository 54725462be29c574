//! The hidden entry points of every binary that embeds the runner.
//!
//! The process backend starts sandboxes by executing its own binary again: first as
//! the jail, which then executes it once more as the agent. So every `main` that
//! embeds the runner must call [`dispatch`] before anything else (before a runtime
//! starts threads). The entry points are the agent crate's, shared with the agent's
//! own binary, which a VM's init runs as the jail inside the guest.

pub use sandbox_agent::multicall::dispatch;
