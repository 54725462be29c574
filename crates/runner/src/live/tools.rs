//! The tool calls of runs whose caller offered tools ([`sandbox_protocol::tools`]): the
//! runner passes each call the agent sends on to the run's caller (a `toolCall` line of
//! the streamed answer), and each answer the caller posts
//! (`POST /runs/{runId}/tool-results/{id}`) back to the agent.
//!
//! A run with tools is registered in [`ToolRuns`] under an id of its own for as long as
//! its answer streams ([`Registered`] removes it); the agent channel's exchange holds its
//! [`ToolLink`]: it [`admits`](ToolLink::admit) each call (the runner's own bounds, which
//! hold whatever the caller allows) and takes the answers from
//! [`replies`](ToolLink::replies) to write them to the agent.

use sandbox_protocol::tools::{
    ToolAnswer, ToolCall, ToolCallLine, ToolReply, ToolsOffer, MAX_CALLS_PER_RUN,
    MAX_CALLS_WAITING, MAX_RESULT_BYTES,
};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::mpsc;

/// The longest call id the runner takes from an agent.
const MAX_ID_LEN: usize = 64;

/// The runs with tools, by run id.
#[derive(Debug, Default)]
pub struct ToolRuns {
    runs: Mutex<HashMap<String, Arc<RunTools>>>,
}

/// Why an answer was not passed on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// No run of that id is streaming (it ended, or never was).
    #[error("no run {0} is waiting for tool results (it ended, or never was)")]
    RunNotFound(String),
    /// The run has no call of that id waiting (answered already, or never made).
    #[error("run {run} has no tool call {call} waiting for its result")]
    CallNotFound {
        /// The run's id.
        run: String,
        /// The call's id.
        call: String,
    },
}

/// One run's calls: those waiting for an answer, and where answers go.
#[derive(Debug)]
struct RunTools {
    run_id: String,
    offer: ToolsOffer,
    state: Mutex<CallState>,
    replies: mpsc::UnboundedSender<ToolReply>,
}

#[derive(Debug, Default)]
struct CallState {
    made: usize,
    seen: HashSet<String>,
    waiting: HashSet<String>,
}

/// The exchange's end of a run's tool calls. Cheap to clone; the answers are taken by
/// one exchange at a time.
#[derive(Debug, Clone)]
pub struct ToolLink {
    run: Arc<RunTools>,
    replies: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ToolReply>>>,
}

/// A run's place in [`ToolRuns`], given up when dropped (answers posted after are
/// refused with [`AnswerError::RunNotFound`]).
#[derive(Debug)]
pub struct Registered {
    runs: Arc<ToolRuns>,
    run_id: String,
}

impl ToolRuns {
    /// Registers a run offering `offer`: its place (to hold while its answer streams)
    /// and its link (for the exchange).
    pub fn register(
        self: &Arc<Self>,
        offer: ToolsOffer,
    ) -> std::io::Result<(Registered, ToolLink)> {
        let run_id = format!("run_{}", crate::lifecycle::random_id()?);
        let (tx, rx) = mpsc::unbounded_channel();
        let run = Arc::new(RunTools {
            run_id: run_id.clone(),
            offer,
            state: Mutex::default(),
            replies: tx,
        });
        lock(&self.runs).insert(run_id.clone(), run.clone());
        let link = ToolLink {
            run,
            replies: Arc::new(tokio::sync::Mutex::new(rx)),
        };
        let registered = Registered {
            runs: self.clone(),
            run_id,
        };
        Ok((registered, link))
    }

    /// Passes the caller's answer to call `call` of run `run` on to its agent.
    pub fn answer(&self, run: &str, call: &str, answer: ToolAnswer) -> Result<(), AnswerError> {
        let tools = lock(&self.runs)
            .get(run)
            .cloned()
            .ok_or_else(|| AnswerError::RunNotFound(run.to_owned()))?;
        if !lock(&tools.state).waiting.remove(call) {
            return Err(AnswerError::CallNotFound {
                run: run.to_owned(),
                call: call.to_owned(),
            });
        }
        tools.reply(call, answer);
        Ok(())
    }

    /// Whether no run with tools is streaming.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        lock(&self.runs).is_empty()
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.runs.runs).remove(&self.run_id);
    }
}

impl Registered {
    /// The run's id.
    #[cfg(test)]
    pub fn run_id(&self) -> &str {
        &self.run_id
    }
}

impl RunTools {
    fn reply(&self, call: &str, answer: ToolAnswer) {
        let reply = ToolReply {
            tool_result: call.to_owned(),
            answer,
        };
        // The exchange is gone once the run ended: nobody waits for the answer then.
        let _ = self.replies.send(reply);
    }
}

impl ToolLink {
    /// The line for a call the agent sent, if the runner lets it through to the caller;
    /// else the call is answered with an error at once (its reply queued for the agent):
    /// an id given before or too long, a server or tool the offer does not name,
    /// arguments over [`MAX_RESULT_BYTES`], more than [`MAX_CALLS_PER_RUN`] calls or
    /// [`MAX_CALLS_WAITING`] waiting.
    pub fn admit(&self, call: ToolCall) -> Option<ToolCallLine> {
        match self.refusal(&call) {
            Some(reason) => {
                if call.id.len() <= MAX_ID_LEN {
                    self.run.reply(&call.id, ToolAnswer::error(reason));
                }
                None
            }
            None => Some(ToolCallLine {
                run_id: self.run.run_id.clone(),
                call,
            }),
        }
    }

    /// Why `call` is not passed on, if it is not (and, when it is, it is counted and
    /// waits for its answer).
    fn refusal(&self, call: &ToolCall) -> Option<String> {
        let offered = self
            .run
            .offer
            .servers
            .iter()
            .find(|s| s.name == call.server)
            .is_some_and(|s| s.tools.iter().any(|t| t.name == call.tool));
        if !offered {
            return Some(format!(
                "tool {:?} of server {:?} is not offered to this program",
                call.tool, call.server
            ));
        }
        let bytes = serde_json::to_vec(&call.arguments).map_or(usize::MAX, |b| b.len());
        if bytes > MAX_RESULT_BYTES {
            return Some(format!(
                "a call's arguments take at most {MAX_RESULT_BYTES} bytes of JSON"
            ));
        }
        let mut state = lock(&self.run.state);
        if call.id.is_empty() || call.id.len() > MAX_ID_LEN || state.seen.contains(&call.id) {
            return Some("a call's id must be new and at most 64 bytes".into());
        }
        if state.made >= MAX_CALLS_PER_RUN {
            return Some(format!(
                "a run makes at most {MAX_CALLS_PER_RUN} tool calls"
            ));
        }
        if state.waiting.len() >= MAX_CALLS_WAITING {
            return Some(format!(
                "at most {MAX_CALLS_WAITING} tool calls of a run wait at once"
            ));
        }
        state.made += 1;
        state.seen.insert(call.id.clone());
        state.waiting.insert(call.id.clone());
        None
    }

    /// The answers to write to the agent, in the order they came; held by one exchange
    /// at a time.
    pub async fn replies(&self) -> tokio::sync::MutexGuard<'_, mpsc::UnboundedReceiver<ToolReply>> {
        self.replies.lock().await
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
