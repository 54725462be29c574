//! `sandbox-agent`: the crate's programs as their own (statically linkable) binary,
//! without the embedded interpreter. With `--init` it is the init of a microVM (see
//! [`sandbox_agent::init`]), which runs this same binary again as the jail and the jailed
//! agent ([`sandbox_agent::multicall`]); with no argument it is the agent, serving the
//! runner's exchange on the channel inherited as file descriptor 3, for sandboxes that
//! start it by path.

use std::process::ExitCode;

/// The descriptor on which the channel is inherited.
const CHANNEL_FD: i32 = 3;

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(sandbox_agent::init::INIT_ARG) {
        sandbox_agent::init::main();
    }
    let code = match sandbox_agent::multicall::dispatch() {
        Some(code) => code,
        // SAFETY: descriptor 3 is the channel by this program's contract with its
        // launcher, and nothing else in this process owns it.
        None => unsafe { sandbox_agent::agent::serve_inherited(CHANNEL_FD) },
    };
    match code {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}
