//! The "Tools called from code" section: the task done by the client tool call by tool
//! call against one run whose program calls the tools (bytes that reach the model, and
//! time), and the cost of one call from code next to the same call made directly.

use super::cells::{grouped, with_ratio};
use crate::stats::ratio;
use crate::tools_from_code::{PerCallFigures, TaskFigures, ToolsFigures, ToolsSection, Way};
use std::fmt::Write;

/// The section, or why it was skipped.
pub fn markdown(section: &ToolsSection, md: &mut String) {
    match section {
        ToolsSection::Measured(figures) => measured(figures, md),
        ToolsSection::Skipped { reason } => {
            let _ = writeln!(md, "### Tools called from code\n\n**Skipped**: {reason}.\n");
        }
    }
}

fn measured(f: &ToolsFigures, md: &mut String) {
    task(&f.task, f, md);
    per_call(&f.per_call, f.warmup, md);
}

fn task(t: &TaskFigures, f: &ToolsFigures, md: &mut String) {
    md.push_str("### Tools called from code: one task, two ways (ratio to the client's calls)\n\n");
    let ids: Vec<String> = t.answer.iter().map(u64::to_string).collect();
    let _ = writeln!(
        md,
        "\"Which crash issues are closed, with their titles\", over the tracker's 200 issues \
         (an MCP server on the official Python SDK, on loopback); {} rounds after {} \
         unmeasured, on a runner of its own (pool size {}, no warm imports). Bytes the model reads: the \
         UTF-8 bytes of the text of the results' content blocks, summed over the calls \
         (not `structuredContent`, not the JSON-RPC framing); bytes it writes: the JSON \
         arguments of its calls. Time: the calls' own (what the model spends between them \
         is not counted): (a) the sum of its {} calls, (b) the one `tools/call`. Both ways \
         found the same {} issues in every round: {}.\n",
        t.rounds,
        f.warmup,
        f.pool_size,
        t.direct.model_calls,
        ids.len(),
        ids.join(", ")
    );
    md.push_str(
        "| way | the model's tool calls | calls the tracker served | bytes the model reads | \
         bytes the model writes | time p50, ms | time p95, ms |\n\
         |---|---|---|---|---|---|---|\n",
    );
    way_row(
        "(a) `list_issues` page by page, by the client",
        &t.direct,
        None,
        md,
    );
    way_row(
        "(b) one `run_python` calling `tools.tracker.list_issues`",
        &t.from_code,
        Some(&t.direct),
        md,
    );
    md.push('\n');
}

fn way_row(label: &str, way: &Way, base: Option<&Way>, md: &mut String) {
    let bytes = |value: u64, of: fn(&Way) -> u64| {
        let shown = grouped(value);
        match base.and_then(|b| ratio(value as f64, of(b) as f64)) {
            Some(r) => format!("{shown} ({r:.3}x)"),
            None => shown,
        }
    };
    let time = |value: f64, of: fn(&Way) -> f64| match base {
        Some(b) => with_ratio(value, of(b), 2),
        None => format!("{value:.2}"),
    };
    let _ = writeln!(
        md,
        "| {label} | {} | {} | {} | {} | {} | {} |",
        way.model_calls,
        way.tracker_calls,
        bytes(way.model_bytes, |w| w.model_bytes),
        bytes(way.written_bytes, |w| w.written_bytes),
        time(way.latency.p50_ms, |w| w.latency.p50_ms),
        time(way.latency.p95_ms, |w| w.latency.p95_ms),
    );
}

fn per_call(p: &PerCallFigures, warmup: usize, md: &mut String) {
    md.push_str("### Tools called from code: the cost of one call, ms\n\n");
    let _ = writeln!(
        md,
        "`run_python` of a loop making {k} `get_issue` calls through `import tools`, against \
         the same loop making none (a dictionary in place of each call); {} rounds after \
         {} unmeasured. One call \
         from code: the difference of the p50s over {k}. Next to it, `get_issue` called \
         directly by the client on the tracker, {k} calls a round back to back, each \
         timed.\n",
        p.rounds,
        warmup,
        k = p.calls_per_run
    );
    md.push_str("| figure | runs | p50 | p95 |\n|---|---|---|---|\n");
    let _ = writeln!(
        md,
        "| `run_python`, {} calls from code | {} | {:.2} | {:.2} |",
        p.calls_per_run, p.with_calls.runs, p.with_calls.p50_ms, p.with_calls.p95_ms
    );
    let _ = writeln!(
        md,
        "| `run_python`, the same loop, no call | {} | {:.2} | {:.2} |",
        p.without_calls.runs, p.without_calls.p50_ms, p.without_calls.p95_ms
    );
    let _ = writeln!(
        md,
        "| one call from code (difference of the p50s / {}) | - | {} | - |",
        p.calls_per_run,
        with_ratio(p.per_call_ms, p.direct.p50_ms, 2)
    );
    let _ = writeln!(
        md,
        "| one `get_issue` called directly (the baseline) | {} | {:.2} | {:.2} |",
        p.direct.runs, p.direct.p50_ms, p.direct.p95_ms
    );
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::cells::latency;
    use std::collections::BTreeMap;

    fn figures() -> ToolsFigures {
        let way = |calls, bytes, written, p50| Way {
            tracker_calls: 10,
            model_calls: calls,
            model_bytes: bytes,
            written_bytes: written,
            latency: latency(20, p50, 2.0),
        };
        ToolsFigures {
            pool_size: 2,
            warmup: 1,
            task: TaskFigures {
                rounds: 20,
                answer: vec![15, 30],
                direct: way(10, 72_770, 110, 40.0),
                from_code: way(1, 728, 440, 80.0),
            },
            per_call: PerCallFigures {
                calls_per_run: 20,
                rounds: 20,
                with_calls: latency(20, 150.0, 1.5),
                without_calls: latency(20, 50.0, 1.5),
                per_call_ms: 5.0,
                direct: latency(400, 2.5, 1.5),
            },
            tracker_calls: BTreeMap::new(),
        }
    }

    fn rendered() -> String {
        let mut md = String::new();
        markdown(&ToolsSection::Measured(Box::new(figures())), &mut md);
        md
    }

    #[test]
    fn the_task_shows_both_ways_with_ratios_to_the_client_s_calls() {
        let md = rendered();
        assert!(
            md.contains(
                "| (a) `list_issues` page by page, by the client | 10 | 10 | 72,770 | 110 | \
                 40.00 | 80.00 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| 1 | 10 | 728 (0.010x) | 440 (4.000x) | 80.00 (2.00x) | 160.00 (2.00x) |"
            ),
            "{md}"
        );
        assert!(
            md.contains("found the same 2 issues in every round: 15, 30."),
            "{md}"
        );
        assert!(md.contains("20 rounds after 1 unmeasured"), "{md}");
    }

    #[test]
    fn the_cost_of_a_call_is_next_to_the_direct_call() {
        let md = rendered();
        assert!(
            md.contains(
                "| one call from code (difference of the p50s / 20) | - | 5.00 (2.00x) | - |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| one `get_issue` called directly (the baseline) | 400 | 2.50 | 3.75 |"),
            "{md}"
        );
        assert!(md.contains("| `run_python`, 20 calls from code | 20 | 150.00 | 225.00 |"));
        assert!(
            md.contains("20 rounds after 1 unmeasured. One call"),
            "{md}"
        );
    }

    #[test]
    fn a_skipped_section_says_why() {
        let mut md = String::new();
        let reason = "tests/mcp-clients/.venv/bin/python is missing: make it".to_owned();
        markdown(&ToolsSection::Skipped { reason }, &mut md);
        assert_eq!(
            md,
            "### Tools called from code\n\n**Skipped**: tests/mcp-clients/.venv/bin/python is \
             missing: make it.\n\n"
        );
    }
}
