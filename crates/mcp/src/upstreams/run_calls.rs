//! The tool calls of one run: each `toolCall` line of the run's streamed answer is
//! handled in a task of its own, which decides the answer and posts it to the runner the
//! answer streams from (`POST /runs/{runId}/tool-results/{id}`).
//!
//! A call is refused (answered with an error, never reaching the upstream) when the MCP
//! call that started the run was cancelled by its client, when the run has already made
//! its server's `max_calls_per_run` calls, or when [`Upstreams::call`] refuses it (a
//! server or tool not allowed, arguments that do not match the input schema). Otherwise
//! it is made within the server's timeout and what is left of the run's own time. Every
//! call is recorded, in the order the calls came, for the run's `toolCalls`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sandbox_protocol::tools::{ToolAnswer, ToolCallLine, MAX_CALLS_PER_RUN};
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::listed::cut;
use super::{Answered, Upstreams};
use crate::runner_client::{Delivery, RunnerClient, ToolCallSink};

/// How long posting one answer to the runner may take.
const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest server or tool name kept in a record or a log line, in bytes.
const MAX_NAME_BYTES: usize = 256;

/// One call of a run, as its result's `toolCalls` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    /// The server, as the program named it.
    pub server: String,
    /// The tool, as the program named it.
    pub tool: String,
    /// From the call's arrival to its answer, in milliseconds.
    pub duration_ms: u64,
    /// Whether the program got an error.
    pub is_error: bool,
}

/// The calls of one run.
#[derive(Debug)]
pub struct RunCalls {
    shared: Arc<Shared>,
    /// Ends the calls still in flight when the run's MCP call is over.
    _stop: DropGuard,
}

#[derive(Debug)]
struct Shared {
    upstreams: Upstreams,
    /// The MCP call's own token: cancelled when its client cancels it.
    client: CancellationToken,
    /// Cancelled with `client`, or when the run's call is over.
    stop: CancellationToken,
    /// When the run's own time is up.
    ends: Instant,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Calls made so far, by server.
    made: HashMap<String, usize>,
    /// Every call, in arrival order.
    slots: Vec<Slot>,
}

#[derive(Debug)]
struct Slot {
    server: String,
    tool: String,
    arrived: Instant,
    /// How long it took and whether it failed, once answered.
    ended: Option<(Duration, bool)>,
}

impl RunCalls {
    /// The calls of a run started by an MCP call whose cancellation `client` says, and
    /// which may take `run_time` from now.
    pub fn new(upstreams: Upstreams, client: CancellationToken, run_time: Duration) -> Self {
        let stop = client.child_token();
        RunCalls {
            _stop: stop.clone().drop_guard(),
            shared: Arc::new(Shared {
                upstreams,
                client,
                stop,
                ends: Instant::now() + run_time,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Every call so far, in the order they came; one still unanswered counts as an
    /// error of the time it has taken.
    pub fn records(&self) -> Vec<ToolCallRecord> {
        let state = self.shared.lock();
        state
            .slots
            .iter()
            .map(|slot| {
                let (took, is_error) = slot.ended.unwrap_or((slot.arrived.elapsed(), true));
                ToolCallRecord {
                    server: slot.server.clone(),
                    tool: slot.tool.clone(),
                    duration_ms: took.as_millis() as u64,
                    is_error,
                }
            })
            .collect()
    }
}

impl RunCalls {
    /// How many calls have their answer.
    #[cfg(test)]
    pub(crate) fn answered(&self) -> usize {
        self.shared
            .lock()
            .slots
            .iter()
            .filter(|s| s.ended.is_some())
            .count()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the call's arrival; its slot, and its refusal when it must not be made.
    fn arrive(&self, server: &str, tool: &str) -> (Option<usize>, Option<Answered>) {
        let mut state = self.lock();
        if state.slots.len() >= MAX_CALLS_PER_RUN {
            let refusal = format!("a run makes at most {MAX_CALLS_PER_RUN} tool calls");
            return (None, Some(Answered::refused(refusal)));
        }
        let slot = state.slots.len();
        state.slots.push(Slot {
            server: cut(server, MAX_NAME_BYTES),
            tool: cut(tool, MAX_NAME_BYTES),
            arrived: Instant::now(),
            ended: None,
        });
        if self.client.is_cancelled() {
            let refusal = "the MCP call that started this run was cancelled by its client";
            return (Some(slot), Some(Answered::refused(refusal)));
        }
        let Some(max) = self.upstreams.max_calls_per_run(server) else {
            return (Some(slot), None); // not a server: the upstreams refuse it
        };
        let made = state.made.entry(server.to_owned()).or_default();
        *made += 1;
        if *made > max {
            let refusal = format!(
                "this run has made the {max} calls of server {server:?} it may make (max_calls_per_run)"
            );
            return (Some(slot), Some(Answered::refused(refusal)));
        }
        (Some(slot), None)
    }

    /// Makes the call (unless refused), bounded by the run's time and cancellation.
    async fn answer(&self, line: &ToolCallLine, refusal: Option<Answered>) -> Answered {
        if let Some(refusal) = refusal {
            return refusal;
        }
        let left = self.ends.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Answered::refused("the run's time is up");
        }
        let call = &line.call;
        let made = self
            .upstreams
            .call(&call.server, &call.tool, call.arguments.clone(), left);
        tokio::select! {
            answered = made => answered,
            () = self.stop.cancelled() => Answered::refused(if self.client.is_cancelled() {
                "the MCP call that started this run was cancelled by its client"
            } else {
                "the run has ended"
            }),
        }
    }

    fn record(&self, slot: Option<usize>, took: Duration, answered: &Answered) {
        let Some(slot) = slot else {
            return;
        };
        if let Some(slot) = self.lock().slots.get_mut(slot) {
            slot.ended = Some((took, answered.is_error()));
        }
    }
}

impl ToolCallSink for RunCalls {
    fn take(&self, runner: &RunnerClient, line: ToolCallLine) {
        let shared = self.shared.clone();
        let runner = runner.clone();
        let (slot, refusal) = shared.arrive(&line.call.server, &line.call.tool);
        tokio::spawn(async move {
            let started = Instant::now();
            let answered = shared.answer(&line, refusal).await;
            let took = started.elapsed();
            shared.record(slot, took, &answered);
            let call = &line.call;
            shared
                .upstreams
                .count(&call.server, &call.tool, answered.outcome);
            tracing::info!(
                run = %cut(&line.run_id, MAX_NAME_BYTES),
                server = %cut(&call.server, MAX_NAME_BYTES),
                tool = %cut(&call.tool, MAX_NAME_BYTES),
                duration_ms = took.as_millis() as u64,
                outcome = answered.outcome.as_str(),
                "tool call"
            );
            post(&runner, &line, &answered.answer).await;
        });
    }
}

/// Posts `answer` to the runner; a run that has ended drops it.
async fn post(runner: &RunnerClient, line: &ToolCallLine, answer: &ToolAnswer) {
    let posted = tokio::time::timeout(
        POST_TIMEOUT,
        runner.post_tool_result(&line.run_id, &line.call.id, answer),
    )
    .await;
    match posted {
        Ok(Ok(Delivery::Delivered)) => {}
        Ok(Ok(Delivery::RunEnded)) => {
            tracing::debug!(run = %cut(&line.run_id, MAX_NAME_BYTES), "tool result dropped: the run has ended")
        }
        Ok(Err(error)) => {
            tracing::warn!(run = %cut(&line.run_id, MAX_NAME_BYTES), code = error.code(), %error, "tool result not delivered")
        }
        Err(_) => tracing::warn!(
            run = %cut(&line.run_id, MAX_NAME_BYTES),
            timeout_s = POST_TIMEOUT.as_secs(),
            "tool result not delivered: the runner did not answer in time"
        ),
    }
}
