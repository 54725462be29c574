//! Progress notifications while a run is in flight, for a client that sent a progress
//! token: "started", then about every second "running for N s", or once the program has
//! written output, the newest lines of it ([`OutputTail`]); and as soon as new output
//! comes, those lines at once, at most four times a second (the output that came in
//! between coalesced into one message, bounded in size). The progress value is the
//! seconds elapsed, and the total the run's time limit. The call's result is the same
//! either way.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use tokio::time::MissedTickBehavior;

use crate::output_tail::OutputTail;
use crate::report::RunIn;
use crate::runner_client::RunnerError;

/// How often new output is looked for: at most this often a notification carries it.
const OUTPUT_INTERVAL: Duration = Duration::from_millis(250);
/// Looks without new output before a notification says how long the run has gone on.
const QUIET_LOOKS: u32 = 4;

/// Where and how to report the progress of one call.
pub(super) struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    timeout: Duration,
    place: RunIn,
    tail: Arc<OutputTail>,
}

impl Progress {
    /// The progress of a call whose client asked for it (it sent a progress token);
    /// `None` when it did not.
    pub(super) fn asked(
        ctx: &RequestContext<RoleServer>,
        timeout: Duration,
        place: RunIn,
    ) -> Option<Progress> {
        ctx.meta.get_progress_token().map(|token| Progress {
            peer: ctx.peer.clone(),
            token,
            timeout,
            place,
            tail: Arc::default(),
        })
    }

    /// Where the run puts its output as it comes, for the notifications.
    pub(super) fn tail(&self) -> Arc<OutputTail> {
        self.tail.clone()
    }

    async fn notify(&self, elapsed: f64, message: String) {
        let mut param = ProgressNotificationParam::new(self.token.clone(), elapsed);
        param.total = Some(self.timeout.as_secs_f64());
        param.message = Some(message);
        if let Err(error) = self.peer.notify_progress(param).await {
            tracing::debug!(%error, "progress notification not delivered");
        }
    }
}

/// Awaits `exchange`, sending progress meanwhile; gives up when the client cancels.
pub(super) async fn while_reporting<T>(
    exchange: impl Future<Output = Result<T, RunnerError>>,
    progress: Option<Progress>,
    ctx: &RequestContext<RoleServer>,
) -> Result<T, RunnerError> {
    tokio::select! {
        outcome = exchange => outcome,
        () = report(progress) => unreachable!("progress reporting never ends"),
        () = ctx.ct.cancelled() => Err(RunnerError::Cancelled),
    }
}

/// Sends "started", then the newest output whenever some came, and about every second
/// the newest output again (the time gone by while there is none); never returns.
async fn report(progress: Option<Progress>) {
    let Some(progress) = progress else {
        return std::future::pending().await;
    };
    let started = Instant::now();
    let mut looks = tokio::time::interval(OUTPUT_INTERVAL);
    looks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut quiet = QUIET_LOOKS;
    loop {
        looks.tick().await;
        let elapsed = started.elapsed().as_secs_f64();
        let message = match progress.tail.take_new() {
            Some(lines) => lines,
            None if quiet + 1 >= QUIET_LOOKS => progress
                .tail
                .newest()
                .unwrap_or_else(|| status(elapsed, progress.place)),
            None => {
                quiet += 1;
                continue;
            }
        };
        quiet = 0;
        progress.notify(elapsed, message).await;
    }
}

/// What a notification says when no output came.
fn status(elapsed: f64, place: RunIn) -> String {
    if elapsed < 0.5 {
        match place {
            RunIn::OneShot => "started in a fresh sandbox".to_owned(),
            RunIn::Sandbox => "started in its sandbox".to_owned(),
        }
    } else {
        format!("running for {} s", elapsed.round())
    }
}
