//! The hidden entry points of every binary that embeds the runner.
//!
//! The process backend starts sandboxes by executing its own binary again: first as
//! the jail, which then executes it once more as the agent. So every `main` that
//! embeds the runner must call [`dispatch`] before anything else (before a runtime
//! starts threads).

use crate::backend::process::jail::{self, AGENT_ARG, CHANNEL_FD, JAIL_ARG, SANDBOX_UID};
use crate::backend::process::owner::{self, PROBE_ARG};

/// Runs the jail or the agent when the first argument selects one, and returns the
/// exit code; returns `None` for an ordinary start.
pub fn dispatch() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    let first = args.next()?;
    match first.to_str()? {
        JAIL_ARG => {
            let spec = args
                .next()
                .and_then(|s| s.into_string().ok())
                .unwrap_or_default();
            Some(jail::main(&spec))
        }
        AGENT_ARG => Some(agent()),
        PROBE_ARG => {
            let uid = args.next().and_then(|s| s.into_string().ok());
            Some(owner::probe_main(uid.as_deref().unwrap_or_default()))
        }
        _ => None,
    }
}

fn agent() -> i32 {
    // The agent stays sandbox root; each program runs as the sandbox user.
    sandbox_agent::run_programs_as(SANDBOX_UID, SANDBOX_UID);
    // SAFETY: the jail hands the channel over as this descriptor, and nothing else in
    // this freshly executed process owns it.
    unsafe { sandbox_agent::serve_inherited(CHANNEL_FD) }
}
