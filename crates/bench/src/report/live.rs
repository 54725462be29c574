//! The "Live output" section: from a program's write to the line reaching a client that
//! streams the run, next to a pipe read directly.

use super::cells::with_ratio;
use crate::live_output::{LiveFigures, LivePath};
use std::fmt::Write;

/// The "Live output" section.
pub fn markdown(f: &LiveFigures, md: &mut String) {
    md.push_str(
        "### Live output: from a write to its line at the client, ms (ratio to the pipe)\n\n",
    );
    let _ = writeln!(
        md,
        "A Python program prints its `time.time_ns()` every 100 ms, {} lines a run, {} runs \
         a path, on a runner of its own (pool size {}); each line's sample is the reader's \
         clock on arrival less the time it carries.\n",
        f.lines, f.runs, f.pool_size
    );
    md.push_str("| path | lines | p50 | p95 | p99 | mean |\n|---|---|---|---|---|---|\n");
    let base = f
        .rows
        .iter()
        .find(|row| row.path == LivePath::Direct)
        .map(|row| row.latency);
    for row in &f.rows {
        let l = &row.latency;
        let cell = |value: f64, of: fn(&crate::stats::Latency) -> f64| match &base {
            Some(base) if row.path != LivePath::Direct => with_ratio(value, of(base), 2),
            _ => format!("{value:.2}"),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            row.path.label(),
            l.runs,
            cell(l.p50_ms, |b| b.p50_ms),
            cell(l.p95_ms, |b| b.p95_ms),
            cell(l.p99_ms, |b| b.p99_ms),
            cell(l.mean_ms, |b| b.mean_ms),
        );
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live_output::LiveRow;
    use crate::report::cells::latency;

    #[test]
    fn live_section_shows_ratios_to_the_pipe() {
        let figures = LiveFigures {
            lines: 50,
            runs: 4,
            pool_size: 2,
            rows: vec![
                LiveRow {
                    path: LivePath::Direct,
                    latency: latency(200, 0.1, 2.0),
                },
                LiveRow {
                    path: LivePath::Run,
                    latency: latency(200, 0.5, 2.0),
                },
            ],
        };
        let mut md = String::new();
        markdown(&figures, &mut md);
        assert!(
            md.contains("| direct spawn (a pipe) | 200 | 0.10 | 0.20 |"),
            "{md}"
        );
        assert!(
            md.contains("| POST /run, streamed | 200 | 0.50 (5.00x) | 1.00 (5.00x) |"),
            "{md}"
        );
        assert!(md.contains("50 lines a run, 4 runs a path"), "{md}");
    }
}
