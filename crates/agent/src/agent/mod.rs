//! The agent: the first process inside a sandbox.
//!
//! It announces Ready on its channel and serves the runner's exchange ([`serve_with`]):
//! an optional Prepare (the language's loader started ahead of the job); then one
//! [`Job`](sandbox_protocol::agent::Job), or, in a session's sandbox, jobs and file
//! operations until the channel closes. For each job it writes the code to a file in the
//! home folder, runs the language's loader, interpreter or compiler on it as the sandbox
//! user with an empty, fixed environment (`launch.rs`, `environment.rs`), captures
//! standard output and error separately up to their caps (a streamed job's also sent to
//! the runner as it comes, `live.rs`; a job that offers tools gets the `tools` modules
//! and its program's calls relayed to the runner, `tools/`), enforces the timeout on the
//! whole process tree,
//! reaps every child, collects the files of `outputs/`, and answers with Done (or
//! Failed). A session's file operations (`files/`) and the outputs
//! (`outputs/`) are done from the home folder's descriptor (`home.rs`), never through a
//! path a program could redirect.
//!
//! How it is started ([`start`]): by the jail, as PID 1 of fresh namespaces, on a host
//! (the process backend) or inside a VM guest; by a sandbox forked from a template, which
//! executes it afresh and may hand it a keeper (a Python interpreter forked from the
//! template's, `keeper.rs`); or by path, with its channel on descriptor 3. What it relies
//! on is only this: it is PID 1 of its PID namespace (so that `kill(-1)` ends every other
//! process of the sandbox and orphans are reparented to it), `/tmp` and the home folder
//! are writable, and the interpreters are on [`PATH`](sandbox_jail::layout::PATH).
//! Outside a PID namespace of its own (`getpid() != 1`) it never signals `-1`; it falls
//! back to killing the program's process group.
//!
//! Not for: making the sandbox (the jail, [`sandbox_jail`]; a template's clone,
//! [`crate::template`]; a VM's init, [`crate::init`]), nor limiting it (its cgroup is the
//! runner's, or the init's): it knows nothing of how its sandbox was made, and serves one
//! sandbox for that sandbox's life.

mod capture;
pub(crate) mod child;
mod ended;
pub(crate) mod environment;
mod files;
#[cfg(test)]
mod fixtures;
mod hangup;
mod home;
mod identity;
mod job;
pub(crate) mod keeper;
mod launch;
pub(crate) mod live;
pub(crate) mod loader;
mod outputs;
mod process;
mod processes;
pub(crate) mod rehearsal;
mod resident;
mod serve;
mod sink;
pub mod start;
mod tools;
mod tree;
mod watch;

pub use identity::run_programs_as;
pub use job::{run_job, JobError, Kept};
pub use launch::{prepare, Prepared};
pub use live::{LiveOutput, Unstreamed};
pub use serve::{serve_restorable, serve_with, AgentError, Local, Restorable, Worker};
pub use start::{channel_from_fd, serve, serve_inherited};
