//! A template (issue 16): a long-lived process the runner's process backend starts once
//! (one plain, one holding Python's interpreter), which makes each sandbox from a clone
//! of itself instead of a fresh jail process, so that what every sandbox would repeat is
//! done once.
//!
//! Not for: running programs (a sandbox's agent, executed afresh in each, does that:
//! [`crate::agent`]), nor the steps that need host root once it has confined itself
//! (moving a sandbox into its cgroups, writing its id maps: the runner's side of
//! [`sandbox_jail::forked`]). What the runner tells it is in `spec.rs`.
//!
//! The runner starts it as host root, as `sandbox-agent __sandbox-template` (its binary),
//! with an empty environment and a `SOCK_SEQPACKET` socket as descriptor 3. The first
//! message on it is the template's [`TemplateSpec`]; the template opens the agent's
//! binary (the spec's `sandbox-agent` of the runner's build, else its own), then
//! confines itself (`confine.rs`) before it reads anything else: mount, network, IPC and
//! UTS namespaces of its own (made as host root, so it cannot change them), then
//! a host uid of its own (no capability on the host), then a user namespace of its own,
//! whose maps the runner writes: the template's uid is its root, and every sandbox's two
//! host ids are mapped to themselves. So the template can take a sandbox's host identity
//! (to make that sandbox's user namespace as it, which then owns it, as with a jail) and
//! no other host id: never host root.
//!
//! Each later message asks for one sandbox: the sandbox's [`JailSpec`](sandbox_jail::JailSpec) as
//! JSON, with three descriptors: the agent channel, the sandbox's standard error, and its
//! control socket. The template clones the sandbox's first process and announces it
//! ([`sandbox_jail::forked`]); the clone puts the channel on descriptor 3 and standard
//! error on 2, closes everything else the template held but the agent's binary, takes
//! the jail's steps once the runner has moved it into its cgroups, and then executes the agent
//! afresh (`first.rs`): the agent shares no address layout or stack canary with the
//! template, its other sandboxes or its own program. The template holds no secret (its
//! environment is empty and it reads nothing but its spec and the requests), so a fork
//! of it has none.
//!
//! With the feature `embedded-python`, a template whose spec names an interpreter starts
//! it once confined (`python/`), and each of its sandboxes forks a keeper from it, which
//! becomes the sandbox's Python loader.
//!
//! End of file on descriptor 3 ends the template; its forks end with their sandboxes.

mod confine;
mod error;
mod first;
#[cfg(feature = "embedded-python")]
mod python;
mod requests;
mod spec;

pub use confine::Ceilings;
pub use error::TemplateError;
/// The name the template is started under (its `argv[0]`), as every agent is.
pub use sandbox_jail::exec::AGENT_NAME;
pub use spec::{devices_of, PythonSpec, TemplateSpec, TEMPLATE_ARG};

use confine::confine;
use requests::{announce_ready, read_spec, readable, receive, Request};
use sandbox_jail::forked::{announce, clone_sandbox};
use sandbox_jail::rootfs::{HostView, ShownFolders};
use std::os::fd::OwnedFd;
use std::path::Path;

/// The template's life: reads its spec (the first message on descriptor 3), then serves
/// requests until end of file. Returns the process's exit code.
pub fn main() -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sandbox-template: {e}");
            1
        }
    }
}

fn serve() -> Result<(), TemplateError> {
    // Programs forked from what the template holds (its interpreter) inherit its
    // dispositions: each at its default, whatever started the runner.
    sandbox_jail::signals::reset();
    let spec = read_spec()?;
    // Opened as host root, before the confinement: every sandbox's agent is executed
    // from it (a file every user may execute, as the jail's is).
    let agent = spec.agent.as_deref().unwrap_or(Path::new("/proc/self/exe"));
    let exe = std::fs::File::open(agent).map_err(|source| TemplateError::Confine {
        step: "opening the agent's binary",
        source,
    })?;
    let exe = OwnedFd::from(exe);
    let host = HostView::read()?;
    let shown = confine(&spec, &host)?;
    if let Some(python) = &spec.python {
        start_python(python);
    }
    announce_ready(&Ceilings::now().message())?;
    loop {
        reap();
        if !readable()? {
            continue;
        }
        let Some(request) = receive()? else {
            return Ok(());
        };
        make(request, &host, &shown, &exe);
    }
}

/// Makes the sandbox `request` asks for: clones its first process, which becomes the
/// sandbox (never returns there); here, tells the runner. A failure is written on the
/// sandbox's standard error, where the runner reads why its setup failed.
fn make(request: Request, host: &HostView, shown: &ShownFolders, exe: &OwnedFd) {
    let spec = match &request.spec {
        Ok(spec) => spec,
        Err(e) => return request.refuse(&format!("sandbox-template: bad jail spec: {e}")),
    };
    match clone_sandbox(spec) {
        Ok(None) => first::run(&request, spec, host, shown, exe),
        Ok(Some(child)) => {
            if let Err(e) = announce(child, spec, &request.ctl) {
                let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
                request.refuse(&format!("sandbox-jail: {e}"));
            }
        }
        Err(e) => request.refuse(&format!("sandbox-jail: {e}")),
    }
}

/// Starts the interpreter; where it cannot be, the sandboxes' Python programs are
/// executed (said on standard error, which the runner logs).
fn start_python(spec: &PythonSpec) {
    #[cfg(feature = "embedded-python")]
    if let Err(e) = python::start(spec) {
        eprintln!("sandbox-template: no embedded Python ({e}): Python programs are executed");
    }
    #[cfg(not(feature = "embedded-python"))]
    eprintln!(
        "sandbox-template: this binary cannot embed {}: Python programs are executed",
        spec.program
    );
}

/// Reaps every fork whose sandbox has ended.
fn reap() {
    loop {
        // SAFETY: waitpid with WNOHANG only collects the status of ended children.
        let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}
