//! The "Languages" section: a hello world per language on the three paths, and the
//! commands compared.

use super::cells::with_ratio;
use crate::clients::Via;
use crate::languages::{LanguageFigures, EXPECTED};
use crate::pool_watch::QUIET;
use std::fmt::Write;

/// The "Languages" section: the latency table, then the commands compared.
pub fn markdown(f: &LanguageFigures, md: &mut String) {
    md.push_str("### Languages: hello world, ms (ratio to the direct command)\n\n");
    let _ = writeln!(
        md,
        "Each program prints `{}`; {} measured runs per language and path after {} warm-up \
         round(s), each on a pool at rest (full, every sandbox process asleep for {} ms, \
         then 50 ms more) that holds a sandbox prepared for the language; pool size {}.\n",
        EXPECTED.trim_end(),
        f.rounds,
        f.warmup,
        QUIET.as_millis(),
        f.pool_size,
    );
    md.push_str("| lang | path | p50 | p95 |\n|---|---|---|---|\n");
    for row in &f.rows {
        let direct = row.paths.iter().find(|(via, _)| *via == Via::Direct);
        for (via, l) in &row.paths {
            let (p50, p95) = match direct {
                Some((_, d)) => (
                    with_ratio(l.p50_ms, d.p50_ms, 1),
                    with_ratio(l.p95_ms, d.p95_ms, 1),
                ),
                None => (format!("{:.1}", l.p50_ms), format!("{:.1}", l.p95_ms)),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {p50} | {p95} |",
                row.name,
                language_path(*via)
            );
        }
    }
    md.push_str(
        "\n| lang | toolchain | (a) direct command | in the sandbox (the runner's /health) |\n\
         |---|---|---|---|\n",
    );
    for row in &f.rows {
        let warm = if row.warm { " (warm loader)" } else { "" };
        let _ = writeln!(
            md,
            "| {} | {} | `{}` | {}{warm} |",
            row.name,
            row.version.replace('\n', " "),
            row.direct,
            row.sandboxed,
        );
    }
    md.push('\n');
    languages_notes(f, md);
}

/// A path's row heading in the "Languages" section.
fn language_path(via: Via) -> &'static str {
    match via {
        Via::Direct => "(a) direct command",
        Via::Run => "(b) POST /run",
        Via::ToolsCall => "(c) tools/call",
    }
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
    use crate::languages::LanguageRow;
    use crate::report::cells::latency;

    #[test]
    fn languages_section_shows_ratios_commands_and_gaps() {
        let ms = |p50_ms: f64| latency(20, p50_ms, 2.0);
        let row = |name, not_at_rest| LanguageRow {
            name,
            version: "gcc 12.2.0".into(),
            direct: "gcc main.c && ./main".into(),
            sandboxed: "gcc main.c && /tmp/.build/main".into(),
            warm: false,
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
            pool_size: 8,
            rows: vec![row("c", 0), row("go", 3)],
            not_offered: vec!["java"],
            unknown: vec!["perl".into()],
        };
        let mut md = String::new();
        markdown(&figures, &mut md);
        assert!(
            md.contains("| c | (a) direct command | 100.0 (1.00x) | 200.0 (1.00x) |"),
            "{md}"
        );
        assert!(
            md.contains("| c | (b) POST /run | 250.0 (2.50x) | 500.0 (2.50x) |"),
            "{md}"
        );
        assert!(
            md.contains("| go | (c) tools/call | 50.0 (0.50x) |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| c | gcc 12.2.0 | `gcc main.c && ./main` | gcc main.c && /tmp/.build/main |"
            ),
            "{md}"
        );
        assert!(md.contains("**go: 3 runs went ahead"), "{md}");
        assert!(!md.contains("**c:"), "{md}");
        assert!(md.contains("toolchain missing?): java."), "{md}");
        assert!(md.contains("no hello world in the bench: perl."), "{md}");
    }
}
