//! The HTTP client for the sandbox runner: `POST /run` and `GET /health`, the sessions
//! that back sandboxes and their processes, and the pool of several runners behind one server.
//!
//! - `client`: the client of one runner ([`RunnerClient`]): its URLs, requests and health.
//! - `run`: a run on one runner, one ask or asking again while it is busy.
//! - `streamed`: a run's answer streamed as it runs, its output to an
//!   [`OutputTail`](crate::output_tail::OutputTail) and its tool calls to a
//!   [`ToolCallSink`] ([`Listeners`]).
//! - `tool_results`: the answers to a run's tool calls, posted back to its runner.
//! - `sessions`: the runner's sessions (sandboxes) and their files.
//! - `processes`: a session's processes: start, list, output, stdin, signal.
//! - `snapshots`: a session's pause, snapshots and forks.
//! - `wait`: asking one runner again while it has no free sandbox, within a deadline.
//! - `answer`: how the runner's answers become results or [`RunnerError`]s.
//! - `error`: [`RunnerError`], with its code and whether retrying may help.
//! - `pool`: many runners behind one server ([`Runners`]).

mod answer;
mod client;
mod error;
mod pool;
mod processes;
mod run;
mod sessions;
mod snapshots;
mod streamed;
mod tool_results;
mod wait;

pub use answer::DEPENDENCY_CODES;
pub use client::RunnerClient;
pub use error::RunnerError;
pub use pool::{Cadence, Member, MemberReport, MemberState, Runners, Seen};
pub use processes::{Offsets, MAX_OUTPUT_WAIT};
pub use streamed::{Listeners, ToolCallSink};
pub use tool_results::Delivery;
