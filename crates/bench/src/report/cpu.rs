//! The "CPU per run" section: the CPU one run costs, counted by cgroups, next to a
//! direct spawn.

use super::cells::with_ratio;
use crate::cpu_cost::CpuFigures;
use std::fmt::Write;

/// The "CPU per run" section.
pub fn markdown(f: &CpuFigures, md: &mut String) {
    md.push_str("### CPU per run, ms (ratio to the direct spawn)\n\n");
    let _ = writeln!(
        md,
        "{} runs per language and path, {} at a time; counted by cgroup v1 cpuacct groups: \
         the runner's (the runner, every sandbox and the replacements of those used; pool \
         size {}, no warm imports) and the bench's during its direct spawns.\n",
        f.runs, f.concurrency, f.pool_size
    );
    md.push_str(
        "| lang | direct spawn | POST /run (templates) | POST /run (jails: `--templates false`) |\n\
         |---|---|---|---|\n",
    );
    for row in &f.rows {
        let _ = writeln!(
            md,
            "| {} | {:.2} | {} | {} |",
            row.lang,
            row.direct_ms,
            with_ratio(row.sandboxed_ms, row.direct_ms, 2),
            with_ratio(row.jail_ms, row.direct_ms, 2)
        );
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_cost::CpuRow;

    #[test]
    fn cpu_section_shows_ratios_to_the_direct_spawn() {
        let figures = CpuFigures {
            runs: 200,
            concurrency: 8,
            pool_size: 8,
            rows: vec![CpuRow {
                lang: "python".into(),
                direct_ms: 10.0,
                sandboxed_ms: 20.0,
                jail_ms: 40.0,
            }],
        };
        let mut md = String::new();
        markdown(&figures, &mut md);
        assert!(
            md.contains("| python | 10.00 | 20.00 (2.00x) | 40.00 (4.00x) |"),
            "{md}"
        );
        assert!(
            md.contains("200 runs per language and path, 8 at a time"),
            "{md}"
        );
    }
}
