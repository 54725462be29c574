//! How many rounds a figure takes (a count, bounded by a time budget), and the quiet
//! runner each timed step starts on.

use crate::clients::RunnerApi;
use crate::measure::{REFILL_TIMEOUT, SETTLE};
use std::time::Duration;

/// The fewest measured rounds a figure takes, even past its budget (a median of fewer
/// says little); fewer only when fewer are asked for.
pub const MIN_ROUNDS: usize = 3;

/// The rounds of one figure.
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    /// Unmeasured rounds first.
    pub warmup: usize,
    /// Measured rounds at most.
    pub rounds: usize,
    /// Past this time the figure stops after its round, once it has [`MIN_ROUNDS`].
    pub budget: Duration,
}

impl Rounds {
    /// Whether another round is made: `measured` rounds measured so far, `elapsed`
    /// since the first (warm-up included). Every warm-up round is made.
    pub fn go_on(&self, measured: usize, elapsed: Duration) -> bool {
        let enough = measured >= self.rounds.min(MIN_ROUNDS);
        measured < self.rounds && !(enough && elapsed >= self.budget)
    }

    /// Whether round `round` (from 0, warm-up included) is measured.
    pub fn counts(&self, round: usize) -> bool {
        round >= self.warmup
    }

    /// The rounds made for `measured` measured ones: the warm-up and those.
    pub fn made(&self, measured: usize) -> usize {
        self.warmup + measured
    }
}

/// The runner of the section: each timed step waits until its pool is full, then
/// [`SETTLE`], so that it meets a quiet runner as a caller does whose previous call is
/// long done.
pub struct Quiet<'a> {
    /// The runner's API.
    pub api: &'a RunnerApi,
}

impl Quiet<'_> {
    /// Waits until the pool is full, then [`SETTLE`].
    pub async fn wait(&self) -> anyhow::Result<()> {
        self.api.wait_until_full(REFILL_TIMEOUT).await?;
        tokio::time::sleep(SETTLE).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn rounds_stop_at_their_count_or_past_the_budget_with_enough_measured() {
        let rounds = Rounds {
            warmup: 1,
            rounds: 20,
            budget: 60 * S,
        };
        assert!(rounds.go_on(0, Duration::ZERO));
        assert!(rounds.go_on(0, 600 * S), "the warm-up is always made");
        assert!(rounds.go_on(19, 59 * S));
        assert!(!rounds.go_on(20, S), "the count reached");
        assert!(!rounds.go_on(3, 60 * S), "past the budget");
        assert!(rounds.go_on(2, 600 * S), "never fewer than MIN_ROUNDS");
        let few = Rounds {
            rounds: 2,
            ..rounds
        };
        assert!(few.go_on(1, 600 * S));
        assert!(!few.go_on(2, Duration::ZERO));
    }

    #[test]
    fn the_warm_up_is_not_counted() {
        let rounds = Rounds {
            warmup: 1,
            rounds: 5,
            budget: S,
        };
        assert!(!rounds.counts(0));
        assert!(rounds.counts(1));
        assert!(Rounds {
            warmup: 0,
            ..rounds
        }
        .counts(0));
        assert_eq!(rounds.made(5), 6);
    }
}
