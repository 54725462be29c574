//! The scale-out section of `bench.md`.

use super::failover::WINDOW;
use super::{Failover, ScaleOutFigures};
use crate::stats;
use std::fmt::Write as _;

/// The section: calls per second per workload and number of runners (ratio to one
/// runner), then the failover figure.
pub fn markdown(f: &ScaleOutFigures, md: &mut String) {
    md.push_str("### Scale-out: calls/s through one sandbox-mcp (ratio to one runner)\n\n");
    let _ = writeln!(
        md,
        "`tools/call` of `run_python` through one sandbox-mcp given a comma list of 1, 2 \
         or 3 runners (each its own `sandbox-runner serve`, pool size {}, on this host); \
         {} calls in flight; {} counted calls per row. Calls per runner from each \
         runner's `sandbox_runner_programs_started_total`.\n",
        f.pool_size, f.concurrency, f.calls
    );
    md.push_str("| program | runners | calls/s | p50 ms | p95 ms | calls per runner |\n");
    md.push_str("|---|---|---|---|---|---|\n");
    for row in &f.rates {
        let one = f
            .rates
            .iter()
            .find(|r| r.workload == row.workload && r.runners == 1)
            .map(|r| r.per_second);
        let rate = match one.and_then(|base| stats::ratio(row.per_second, base)) {
            Some(r) => format!("{:.1} ({r:.2}x)", row.per_second),
            None => format!("{:.1}", row.per_second),
        };
        let spread: Vec<String> = row.per_runner.iter().map(u64::to_string).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {rate} | {:.1} | {:.1} | {} |",
            row.workload,
            row.runners,
            row.latency.p50_ms,
            row.latency.p95_ms,
            spread.join(" / ")
        );
    }
    md.push('\n');
    failover_md(&f.failover, md);
}

fn failover_md(f: &Failover, md: &mut String) {
    let opt = |v: Option<f64>| v.map_or_else(|| "not seen".to_owned(), |v| format!("{v:.0} ms"));
    let _ = writeln!(
        md,
        "#### Failover: one of {} runners SIGKILLed under load, then started again\n\n\
         {} calls in flight (the sleeping program) throughout; sandbox-mcp polls each \
         runner's /health every 2 s (its default).\n",
        f.runners, f.concurrency
    );
    md.push_str("| figure | value |\n|---|---|\n");
    let window = format!(
        "p50 / max of calls sent in the {} s after",
        WINDOW.as_secs()
    );
    let rows = [
        (
            "calls made / answered",
            format!("{} / {}", f.calls, f.answered),
        ),
        (
            "calls at the killed runner at the kill",
            f.in_flight_at_kill.to_string(),
        ),
        ("p50 before the kill", format!("{:.0} ms", f.p50_before_ms)),
        (
            "first answer to a call sent after the kill",
            format!("{} after the kill", opt(f.first_answer_ms)),
        ),
        (
            window.as_str(),
            format!(
                "{} / {}",
                opt(f.p50_after_kill_ms),
                opt(f.max_after_kill_ms)
            ),
        ),
        ("marked down by sandbox-mcp", opt(f.marked_down_ms)),
        (
            "restarted runner listening (pool warm)",
            format!("{:.0} ms after its start", f.listening_ms),
        ),
        (
            "marked up again",
            format!("{} after its start", opt(f.marked_up_ms)),
        ),
        (
            "its first program",
            format!("{} after its start", opt(f.first_program_ms)),
        ),
    ];
    for (figure, value) in rows {
        let _ = writeln!(md, "| {figure} | {value} |");
    }
    md.push('\n');
    if !f.failures.is_empty() {
        let _ = writeln!(md, "Failures seen: {}\n", f.failures.join("; "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale_out::ScaleRate;
    use crate::stats::Latency;

    fn rate(workload: &'static str, runners: usize, per_second: f64) -> ScaleRate {
        let latency = Latency {
            runs: 10,
            p50_ms: 300.0,
            p95_ms: 400.0,
            p99_ms: 500.0,
            mean_ms: 310.0,
        };
        ScaleRate {
            workload,
            runners,
            per_second,
            latency,
            per_runner: vec![5; runners],
        }
    }

    #[test]
    fn rows_show_ratios_to_one_runner_and_failover_gaps() {
        let figures = ScaleOutFigures {
            pool_size: 4,
            concurrency: 12,
            calls: 10,
            rates: vec![rate("a", 1, 10.0), rate("a", 3, 25.0), rate("b", 2, 7.0)],
            failover: Failover {
                runners: 3,
                concurrency: 12,
                calls: 100,
                answered: 96,
                in_flight_at_kill: 4,
                failures: vec!["runner_connection_lost".into()],
                p50_before_ms: 300.0,
                p50_after_kill_ms: Some(320.0),
                max_after_kill_ms: Some(900.0),
                first_answer_ms: Some(250.0),
                marked_down_ms: None,
                listening_ms: 400.0,
                marked_up_ms: Some(2000.0),
                first_program_ms: Some(2100.0),
            },
        };
        let mut md = String::new();
        markdown(&figures, &mut md);
        assert!(md.contains("| a | 1 | 10.0 (1.00x) |"), "{md}");
        assert!(
            md.contains("| a | 3 | 25.0 (2.50x) | 300.0 | 400.0 | 5 / 5 / 5 |"),
            "{md}"
        );
        assert!(
            md.contains("| b | 2 | 7.0 |"),
            "no one-runner row, no ratio: {md}"
        );
        assert!(md.contains("| calls made / answered | 100 / 96 |"), "{md}");
        assert!(
            md.contains("| marked down by sandbox-mcp | not seen |"),
            "{md}"
        );
        assert!(md.contains("Failures seen: runner_connection_lost"), "{md}");
    }
}
