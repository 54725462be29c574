//! How a figure is written in a table: beside its ratio to a baseline, in MiB, a count
//! with its thousands grouped, and the distinct values of a column.

use crate::stats::ratio;
#[cfg(test)]
use crate::stats::Latency;

/// Bytes in a MiB, for figures shown in MiB.
pub const MIB: f64 = (1u64 << 20) as f64;

/// `value (ratio x)` with `decimals` digits for the value.
pub fn with_ratio(value: f64, base: f64, decimals: usize) -> String {
    match ratio(value, base) {
        Some(r) => format!("{value:.decimals$} ({r:.2}x)"),
        None => format!("{value:.decimals$}"),
    }
}

/// `n` with a comma between each group of three digits (`72,770`).
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The distinct values, in the order they first appear.
pub fn dedup<T: PartialEq>(values: impl Iterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// A latency of `runs` runs whose p95 and p99 are `tail` times its p50: the sections'
/// tests' figures.
#[cfg(test)]
pub fn latency(runs: usize, p50_ms: f64, tail: f64) -> Latency {
    Latency {
        runs,
        p50_ms,
        p95_ms: tail * p50_ms,
        p99_ms: tail * p50_ms,
        mean_ms: p50_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_show_value_and_ratio() {
        assert_eq!(with_ratio(1.0, 4.0, 2), "1.00 (0.25x)");
        assert_eq!(with_ratio(3.0, 0.0, 1), "3.0");
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(72_770), "72,770");
        assert_eq!(grouped(52_439_040), "52,439,040");
    }

    #[test]
    fn dedup_keeps_first_order() {
        assert_eq!(dedup([2, 1, 2, 8, 1].into_iter()), vec![2, 1, 8]);
    }
}
