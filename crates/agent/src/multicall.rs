//! The multicall entry: the hidden first arguments that select a program in every binary
//! that makes sandboxes: the runner's (which embeds this crate) and the agent's own,
//! which a VM's init runs again inside the guest.
//!
//! A sandbox is made by executing the binary again: first as the jail
//! ([`sandbox_jail::JAIL_ARG`]), which then executes it once more as the agent
//! ([`sandbox_jail::AGENT_ARG`]); the owner probe ([`sandbox_jail::owner::PROBE_ARG`])
//! runs once at start, the build's probe ([`BUILD_ARG`]) too; a template
//! ([`TEMPLATE_ARG`]) makes sandboxes from clones of itself, each of which executes the
//! binary, or a `sandbox-agent` of the same build, as its agent ([`FORKED_AGENT_ARG`]). So
//! every such `main` calls [`dispatch`] before anything else (before a runtime starts
//! threads). Not for the init of a VM (`--init`), which only the agent's own binary
//! serves, before it calls [`dispatch`].

use crate::agent::start::{self, FORKED_AGENT_ARG};
use crate::template::{self, TEMPLATE_ARG};
use sandbox_jail::owner::{self, PROBE_ARG};
use sandbox_jail::{AGENT_ARG, JAIL_ARG};

/// The first argument that makes a binary print its build ([`crate::BUILD`]) and exit:
/// how a runner checks that a `sandbox-agent` it would execute in its sandboxes is of its
/// own build.
pub const BUILD_ARG: &str = "__sandbox-agent-build";

/// Runs the jail, the agent, the probe or the template when the first argument selects
/// one, and returns the exit code; returns `None` for an ordinary start.
pub fn dispatch() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    let first = args.next()?;
    let mut next = || args.next().and_then(|s| s.into_string().ok());
    match first.to_str()? {
        JAIL_ARG => Some(sandbox_jail::main(&next().unwrap_or_default())),
        AGENT_ARG => Some(start::jailed()),
        PROBE_ARG => Some(owner::probe_main(&next().unwrap_or_default())),
        TEMPLATE_ARG => Some(template::main()),
        BUILD_ARG => {
            println!("{}", crate::BUILD);
            Some(0)
        }
        FORKED_AGENT_ARG => {
            let rest: Vec<String> = args.filter_map(|s| s.into_string().ok()).collect();
            Some(start::forked(&rest))
        }
        _ => None,
    }
}
