//! Waiting for a free sandbox: asking one runner again while it answers that every
//! sandbox is busy (the program has not started), within the call's deadline.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::RunnerError;

/// The longest pause between two asks for a sandbox when the runner's queue is full.
const BUSY_PAUSE: Duration = Duration::from_secs(1);

/// Asks with `exchange` until it gives something other than "no sandbox free yet", or
/// `deadline` (from now) would pass while waiting to ask again.
pub(super) async fn ask_until_free<T, F, Fut>(
    deadline: Duration,
    mut exchange: F,
) -> Result<T, RunnerError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RunnerError>>,
{
    let wait_until = Instant::now() + deadline;
    loop {
        let error = match exchange().await {
            Err(error) => error,
            done => return done,
        };
        let Some(pause) = pause_before_asking_again(&error) else {
            return Err(error);
        };
        if Instant::now() + pause >= wait_until {
            return Err(error);
        }
        tracing::debug!(%error, ?pause, "no sandbox free yet: asking the runner again");
        tokio::time::sleep(pause).await;
    }
}

/// `exchange`, or [`RunnerError::TimedOut`] once `deadline` has passed.
pub(super) async fn bounded<T>(
    deadline: Duration,
    exchange: impl Future<Output = Result<T, RunnerError>>,
) -> Result<T, RunnerError> {
    match tokio::time::timeout(deadline, exchange).await {
        Ok(result) => result,
        Err(_) => Err(RunnerError::TimedOut(deadline.as_millis())),
    }
}

/// How long to wait before asking again for a sandbox after `error`; `None` when asking
/// again cannot help (the program may have started, or the runner is going away).
fn pause_before_asking_again(error: &RunnerError) -> Option<Duration> {
    match error {
        // The runner's own queue was the wait: ask again at once.
        RunnerError::Busy { code, .. } if code == "queue_timeout" => Some(Duration::ZERO),
        // The queue was full: give running programs a moment.
        RunnerError::Busy {
            code, retry_after, ..
        } if code == "pool_exhausted" => Some(
            retry_after
                .map(Duration::from_secs)
                .unwrap_or(BUSY_PAUSE)
                .min(BUSY_PAUSE),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use reqwest::StatusCode;

    use super::*;
    use crate::runner_client::answer::classify;

    #[test]
    fn only_a_busy_pool_is_asked_again() {
        let busy = |status, code: &str, retry_after| {
            classify(status, code.into(), String::new(), retry_after)
        };
        let queue_full = busy(StatusCode::TOO_MANY_REQUESTS, "pool_exhausted", Some(30));
        assert_eq!(pause_before_asking_again(&queue_full), Some(BUSY_PAUSE));
        let waited = busy(StatusCode::SERVICE_UNAVAILABLE, "queue_timeout", Some(1));
        assert_eq!(pause_before_asking_again(&waited), Some(Duration::ZERO));
        let leaving = busy(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", Some(1));
        assert_eq!(pause_before_asking_again(&leaving), None);
        assert_eq!(pause_before_asking_again(&RunnerError::TimedOut(1)), None);
        let full = busy(StatusCode::TOO_MANY_REQUESTS, "too_many_sessions", None);
        assert_eq!(pause_before_asking_again(&full), None);
    }
}
