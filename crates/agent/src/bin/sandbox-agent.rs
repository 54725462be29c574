//! `sandbox-agent`: the agent as its own (statically linkable) binary, for sandboxes
//! that start it by path. It serves one job on the channel inherited as file
//! descriptor 3; with `--init` it is the init of a microVM instead (see
//! [`sandbox_agent::init`]).

use std::process::ExitCode;

/// The descriptor on which the channel is inherited.
const CHANNEL_FD: i32 = 3;

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(sandbox_agent::init::INIT_ARG) {
        sandbox_agent::init::main();
    }
    // SAFETY: descriptor 3 is the channel by this program's contract with its launcher,
    // and nothing else in this process owns it.
    match unsafe { sandbox_agent::serve_inherited(CHANNEL_FD) } {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}
