//! The "Languages" section: a hello world per language on the three paths, and the
//! commands compared.

use super::cells::with_ratio;
use crate::clients::Via;
use crate::languages::{LanguageFigures, LanguageRow, EXPECTED};
use crate::pool_watch::QUIET;
use std::fmt::Write;

/// The "Languages" section: the latency table, then the commands compared.
pub fn markdown(f: &LanguageFigures, md: &mut String) {
    md.push_str("### Languages: hello world, ms (ratio to the direct command)\n\n");
    let _ = writeln!(
        md,
        "Each program prints `{}`; up to {} measured runs per language and path (fewer \
         where a language's rounds passed {} s) after {} warm-up round(s){}, each on a pool \
         at rest (full, every sandbox process asleep for {} ms, then 50 ms more) that holds \
         a sandbox prepared for the language; pool size {}; (c) is the language's own tool, \
         or `run_code`. The section took {:.0} s.\n",
        EXPECTED.trim_end(),
        f.rounds,
        f.budget_s,
        f.warmup,
        if f.quick {
            " (for the languages with a warm loader)"
        } else {
            ""
        },
        QUIET.as_millis(),
        f.pool_size,
        f.took_s,
    );
    md.push_str(
        "| lang | version | runs | (a) direct p50 / p95 | (b) POST /run p50 / p95 | \
         (c) tools/call p50 / p95 |\n|---|---|---|---|---|---|\n",
    );
    for row in &f.rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            row.name,
            cell(&row.version),
            row.rounds,
            paths_cells(row).join(" | ")
        );
    }
    md.push_str(
        "\n| lang | (a) direct command | in the sandbox (the runner's /health) | (c) tool |\n\
         |---|---|---|---|\n",
    );
    for row in &f.rows {
        let warm = if row.warm { " (warm loader)" } else { "" };
        let _ = writeln!(
            md,
            "| {} | `{}` | {}{warm} | {} |",
            row.name,
            cell(&row.direct),
            cell(&row.sandboxed),
            row.tool,
        );
    }
    md.push('\n');
    languages_notes(f, md);
}

/// A path's p50 and p95 with their ratios to the direct command's, in [`Via::ALL`] order.
fn paths_cells(row: &LanguageRow) -> Vec<String> {
    let direct = row.paths.iter().find(|(via, _)| *via == Via::Direct);
    row.paths
        .iter()
        .map(|(_, l)| match direct {
            Some((_, d)) => format!(
                "{} / {}",
                with_ratio(l.p50_ms, d.p50_ms, 1),
                with_ratio(l.p95_ms, d.p95_ms, 1)
            ),
            None => format!("{:.1} / {:.1}", l.p50_ms, l.p95_ms),
        })
        .collect()
}

/// `text` on one line, fit for a table cell (`|` escaped).
fn cell(text: &str) -> String {
    text.replace('\n', " ").replace('|', "\\|")
}

/// What a languages run left out or could not hold.
fn languages_notes(f: &LanguageFigures, md: &mut String) {
    for row in f.rows.iter().filter(|r| r.not_at_rest + r.unprepared > 0) {
        let _ = writeln!(
            md,
            "**{}: {} runs went ahead on a pool not at rest, {} sandboxed runs met no \
             sandbox prepared for the language.**\n",
            row.name, row.not_at_rest, row.unprepared
        );
    }
    if !f.not_offered.is_empty() {
        let _ = writeln!(
            md,
            "Not offered by the runner (toolchain missing?): {}.\n",
            f.not_offered.join(", ")
        );
    }
    if !f.skipped.is_empty() {
        let _ = writeln!(
            md,
            "Left out in smoke mode (Debian's rows but a sample of each kind): {}.\n",
            f.skipped.join(", ")
        );
    }
    if !f.unknown.is_empty() {
        let _ = writeln!(
            md,
            "Offered by the runner, no hello world in the bench: {}.\n",
            f.unknown.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::cells::latency;

    #[test]
    fn languages_section_shows_ratios_commands_and_gaps() {
        let ms = |p50_ms: f64| latency(20, p50_ms, 2.0);
        let row = |name: &str, not_at_rest| LanguageRow {
            name: name.into(),
            version: "gcc 12.2.0".into(),
            direct: "gcc main.c | tee && ./main".into(),
            sandboxed: "gcc main.c && /tmp/.build/main".into(),
            tool: format!("run_{name}"),
            warm: false,
            rounds: 20,
            paths: vec![
                (Via::Direct, ms(100.0)),
                (Via::Run, ms(250.0)),
                (Via::ToolsCall, ms(50.0)),
            ],
            not_at_rest,
            unprepared: 0,
        };
        let figures = LanguageFigures {
            rounds: 20,
            warmup: 2,
            quick: true,
            pool_size: 8,
            budget_s: 60,
            rows: vec![row("c", 0), row("go", 3)],
            not_offered: vec!["java".into()],
            unknown: vec!["klingon".into()],
            skipped: vec!["kotlin".into()],
            took_s: 61.0,
        };
        let mut md = String::new();
        markdown(&figures, &mut md);
        assert!(
            md.contains(
                "| c | gcc 12.2.0 | 20 | 100.0 (1.00x) / 200.0 (1.00x) | \
                 250.0 (2.50x) / 500.0 (2.50x) | 50.0 (0.50x) / 100.0 (0.50x) |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| c | `gcc main.c \\| tee && ./main` | gcc main.c && /tmp/.build/main | run_c |"
            ),
            "{md}"
        );
        assert!(md.contains("**go: 3 runs went ahead"), "{md}");
        assert!(!md.contains("**c:"), "{md}");
        assert!(md.contains("toolchain missing?): java."), "{md}");
        assert!(md.contains("no hello world in the bench: klingon."), "{md}");
        assert!(md.contains("a sample of each kind): kotlin."), "{md}");
        assert!(md.contains("The section took 61 s."), "{md}");
        assert!(
            md.contains("after 2 warm-up round(s) (for the languages with a warm loader),"),
            "{md}"
        );
    }
}
