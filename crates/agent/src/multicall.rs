//! The hidden entry points of every binary that makes sandboxes: the runner's (which
//! embeds this crate) and the agent's own, which a VM's init runs again inside the
//! guest.
//!
//! A sandbox is made by executing the binary again: first as the jail
//! ([`sandbox_jail::JAIL_ARG`]), which then executes it once more as the agent
//! ([`sandbox_jail::AGENT_ARG`]); the owner probe ([`sandbox_jail::owner::PROBE_ARG`])
//! runs once at start; a template ([`crate::template`]) makes sandboxes from forks of
//! itself, each of which executes the binary as its agent
//! ([`FORKED_AGENT_ARG`](crate::template::agent::FORKED_AGENT_ARG)). So every such
//! `main` calls [`dispatch`] before anything else (before a runtime starts threads).

use crate::template::agent::FORKED_AGENT_ARG;
use crate::template::TEMPLATE_ARG;
use sandbox_jail::owner::{self, PROBE_ARG};
use sandbox_jail::{AGENT_ARG, CHANNEL_FD, JAIL_ARG};

/// Runs the jail, the agent or the probe when the first argument selects one, and
/// returns the exit code; returns `None` for an ordinary start.
pub fn dispatch() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    let first = args.next()?;
    let mut next = || args.next().and_then(|s| s.into_string().ok());
    match first.to_str()? {
        JAIL_ARG => Some(sandbox_jail::main(&next().unwrap_or_default())),
        AGENT_ARG => Some(jailed_agent()),
        PROBE_ARG => Some(owner::probe_main(&next().unwrap_or_default())),
        TEMPLATE_ARG => Some(crate::template::main()),
        FORKED_AGENT_ARG => {
            let rest: Vec<String> = args.filter_map(|s| s.into_string().ok()).collect();
            Some(crate::template::agent::main(&rest))
        }
        _ => None,
    }
}

/// The agent as the jail (or a forked sandbox's first process) executes it: sandbox
/// root, running each program as the sandbox user, on the channel handed over.
pub(crate) fn jailed_agent() -> i32 {
    crate::run_programs_as(crate::SANDBOX_UID, crate::SANDBOX_UID);
    // SAFETY: the jail hands the channel over as this descriptor, and nothing else in
    // this freshly executed process owns it.
    unsafe { crate::serve_inherited(CHANNEL_FD) }
}
