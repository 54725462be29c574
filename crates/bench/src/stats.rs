//! Percentiles, throughput and ratios: the arithmetic of the report, kept apart so it
//! can be tested on its own.

use serde::Serialize;
use std::time::{Duration, Instant};

/// The latency of one series of runs, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    /// Runs measured.
    pub runs: usize,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Arithmetic mean.
    pub mean_ms: f64,
}

/// The nearest-rank percentile `p` (0-100) of values sorted in ascending order;
/// `None` for an empty slice.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    sorted.get(index).copied()
}

/// Summarizes a series of run times; `None` when there are none.
pub fn latency(samples: &[Duration]) -> Option<Latency> {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    Some(Latency {
        runs: ms.len(),
        p50_ms: percentile(&ms, 50.0)?,
        p95_ms: percentile(&ms, 95.0)?,
        p99_ms: percentile(&ms, 99.0)?,
        mean_ms: ms.iter().sum::<f64>() / ms.len() as f64,
    })
}

/// Runs per second: `runs` finished in `elapsed`.
pub fn per_second(runs: usize, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        runs as f64 / secs
    } else {
        f64::INFINITY
    }
}

/// The steady rate of a burst: runs per second between the `skip`-th completion and
/// the last, so that a head start (sandboxes made before the burst) is not counted.
/// `completions` are the runs' end times, in any order; `None` when fewer than
/// `skip + 1` runs completed, or `skip` is zero.
pub fn steady_per_second(completions: &mut [Instant], skip: usize) -> Option<f64> {
    if skip == 0 || completions.len() <= skip {
        return None;
    }
    completions.sort();
    let first = completions.get(skip - 1)?;
    let last = completions.last()?;
    Some(per_second(
        completions.len() - skip,
        last.duration_since(*first),
    ))
}

/// `value / base`, the figure the targets are stated in; `None` when the base is zero
/// or not finite.
pub fn ratio(value: f64, base: f64) -> Option<f64> {
    (base.is_finite() && base > 0.0 && value.is_finite()).then(|| value / base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(50.0));
        assert_eq!(percentile(&values, 95.0), Some(95.0));
        assert_eq!(percentile(&values, 99.0), Some(99.0));
        assert_eq!(percentile(&values, 100.0), Some(100.0));
        assert_eq!(percentile(&values, 0.0), Some(1.0));
    }

    #[test]
    fn percentiles_of_small_series() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 95.0), Some(4.0));
    }

    #[test]
    fn latency_sorts_and_averages() {
        let samples = [3, 1, 2].map(Duration::from_millis);
        let l = latency(&samples).unwrap();
        assert_eq!(l.runs, 3);
        assert_eq!(l.p50_ms, 2.0);
        assert_eq!(l.p99_ms, 3.0);
        assert!((l.mean_ms - 2.0).abs() < 1e-9);
        assert!(latency(&[]).is_none());
    }

    #[test]
    fn steady_rate_skips_the_head_start() {
        let t0 = Instant::now();
        // Four runs at once (a warm pool), then one every 100 ms.
        let mut done: Vec<Instant> = [0, 0, 0, 0, 100, 200, 300, 400]
            .iter()
            .rev()
            .map(|ms| t0 + Duration::from_millis(*ms))
            .collect();
        let rate = steady_per_second(&mut done, 4).unwrap();
        assert!((rate - 10.0).abs() < 1e-9, "{rate}");
        assert_eq!(steady_per_second(&mut done, 8), None);
        assert_eq!(steady_per_second(&mut done, 0), None);
    }

    #[test]
    fn ratios_and_rates() {
        assert_eq!(ratio(1.0, 4.0), Some(0.25));
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(1.0, f64::INFINITY), None);
        assert_eq!(ratio(f64::NAN, 1.0), None);
        assert_eq!(per_second(10, Duration::from_millis(500)), 20.0);
        assert!(per_second(1, Duration::ZERO).is_infinite());
    }
}
