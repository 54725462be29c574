//! The "Packages: time to first plot" section: a pandas + matplotlib program on each
//! path, what warm imports cost a run that does not use them, and the memory of an idle
//! python sandbox with and without them.

use super::cells::{with_ratio, MIB};
use crate::first_plot::{FirstPlot, PlotPath, ONE_LINER};
use crate::memory::SandboxMemory;
use crate::pool_watch::QUIET;
use crate::stats::{ratio, Latency};
use std::fmt::Write;

/// The "Packages: time to first plot" section.
pub fn markdown(f: &FirstPlot, md: &mut String) {
    md.push_str("### Packages: time to first plot, ms (ratio to direct spawn)\n\n");
    let _ = writeln!(
        md,
        "The program (package set {}), {} measured runs per path after {} warm-up round(s). \
         At rest: before each run the pools are full and every sandbox process has been \
         asleep, its CPU time unchanged, for {} ms (the refill's warm imports are done), \
         then 50 ms more. Warm imports: {}; pool size {}.\n\n```python\n{}```\n",
        short_key(&f.package_set),
        f.rounds,
        f.warmup,
        QUIET.as_millis(),
        f.warm_imports.join(", "),
        f.pool_size,
        f.script,
    );
    paths_table(f, md);
    warm_import_notes(f, md);
    memory_table(f, md);
}

/// Each path's latency at rest and back to back, with its ratio to the direct spawn.
fn paths_table(f: &FirstPlot, md: &mut String) {
    let direct = rested(f, PlotPath::Direct);
    md.push_str("| path | pool | p50 | p95 |\n|---|---|---|---|\n");
    let rows = f
        .rested
        .iter()
        .filter(|(path, _)| path.plots())
        .map(|row| ("at rest", row))
        .chain(f.back_to_back.iter().map(|row| ("back to back", row)));
    for (pool, (path, l)) in rows {
        let pool = if *path == PlotPath::Direct { "-" } else { pool };
        let (p50, p95) = match direct {
            Some(d) => (
                with_ratio(l.p50_ms, d.p50_ms, 0),
                with_ratio(l.p95_ms, d.p95_ms, 0),
            ),
            None => (format!("{:.0}", l.p50_ms), format!("{:.0}", l.p95_ms)),
        };
        let _ = writeln!(md, "| {} | {pool} | {p50} | {p95} |", path.label());
    }
    md.push('\n');
}

/// What warm imports cost a run that does not use them, how long the pools took to be
/// at rest again, and the runs that could not wait for it.
fn warm_import_notes(f: &FirstPlot, md: &mut String) {
    if let (Some(warm), Some(none)) = (
        rested(f, PlotPath::OneLinerWarm),
        rested(f, PlotPath::OneLinerNoWarm),
    ) {
        let _ = writeln!(
            md,
            "What warm imports cost a run that does not use them: `{ONE_LINER}` by `POST /run` \
             at rest, p50 / p95 {:.1} / {:.1} ms with warm imports, {:.1} / {:.1} ms without \
             ({} at the p50).\n",
            warm.p50_ms,
            warm.p95_ms,
            none.p50_ms,
            none.p95_ms,
            ratio(warm.p50_ms, none.p50_ms).map_or("-".into(), |r| format!("{r:.1}x")),
        );
    }
    if let Some(t) = &f.to_rest {
        let _ = writeln!(
            md,
            "From a warm-import run's answer to the pools at rest again (the refill made and \
             its imports done, plus the {} ms of quiet observed): p50 {:.0} ms, p95 {:.0} ms \
             ({} waits).\n",
            QUIET.as_millis(),
            t.p50_ms,
            t.p95_ms,
            t.runs
        );
    }
    if f.not_at_rest > 0 {
        let _ = writeln!(
            md,
            "**{} runs went ahead on a pool not at rest** (it did not settle in time).\n",
            f.not_at_rest
        );
    }
}

/// The memory of an idle python sandbox, with warm imports and without.
fn memory_table(f: &FirstPlot, md: &mut String) {
    md.push_str(
        "| idle python sandbox, MiB | sandboxes | cgroup charge (mean) | RSS of its processes \
         (mean) |\n|---|---|---|---|\n",
    );
    for (label, sandboxes) in [
        ("with warm imports", &f.memory.warm_imports),
        ("without warm imports", &f.memory.no_warm_imports),
    ] {
        let n = sandboxes.len().max(1) as f64;
        let mean = |bytes: fn(&SandboxMemory) -> u64| {
            sandboxes.iter().map(bytes).sum::<u64>() as f64 / n / MIB
        };
        let _ = writeln!(
            md,
            "| {label} | {} | {:.1} | {:.1} |",
            sandboxes.len(),
            mean(|s| s.cgroup_bytes),
            mean(|s| s.rss_bytes),
        );
    }
    md.push('\n');
}

/// The latency of `path` at rest, if it was measured.
fn rested(f: &FirstPlot, path: PlotPath) -> Option<Latency> {
    f.rested.iter().find(|(p, _)| *p == path).map(|(_, l)| *l)
}

/// The first 12 characters of a package set's key (as `git log` shortens hashes).
fn short_key(key: &str) -> &str {
    key.get(..12).unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::first_plot::PlotMemory;
    use crate::report::cells::latency;

    #[test]
    fn first_plot_section_shows_ratios_and_memory() {
        let ms = |p50_ms: f64| latency(20, p50_ms, 2.0);
        let sandbox = |cgroup_bytes: u64| SandboxMemory {
            kind: "python",
            cgroup_bytes,
            rss_bytes: cgroup_bytes * 2,
            processes: vec!["python3".into()],
        };
        let figure = FirstPlot {
            script: "print(1)\n",
            package_set: "065cc7d86200eddd0b7ea9a7".into(),
            warm_imports: vec!["numpy".into(), "pandas".into()],
            pool_size: 8,
            rounds: 20,
            warmup: 1,
            rested: vec![
                (PlotPath::Direct, ms(1000.0)),
                (PlotPath::Run, ms(250.0)),
                (PlotPath::OneLinerWarm, ms(200.0)),
                (PlotPath::OneLinerNoWarm, ms(10.0)),
            ],
            back_to_back: vec![(PlotPath::Run, ms(500.0))],
            to_rest: Some(ms(1500.0)),
            not_at_rest: 0,
            memory: PlotMemory {
                warm_imports: vec![sandbox(70 << 20), sandbox(80 << 20)],
                no_warm_imports: vec![sandbox(4 << 20)],
            },
        };
        let mut md = String::new();
        markdown(&figure, &mut md);
        assert!(md.contains("package set 065cc7d86200)"), "{md}");
        assert!(
            md.contains("| POST /run, warm imports | at rest | 250 (0.25x) | 500 (0.25x) |"),
            "{md}"
        );
        assert!(
            md.contains("| POST /run, warm imports | back to back | 500 (0.50x) |"),
            "{md}"
        );
        assert!(md.contains("| - | 1000 (1.00x) |"), "{md}");
        assert!(md.contains("p50 1500 ms, p95 3000 ms (20 waits)"), "{md}");
        assert!(!md.contains("| `print(1)`"), "{md}");
        assert!(
            md.contains("200.0 / 400.0 ms with warm imports, 10.0 / 20.0 ms without (20.0x"),
            "{md}"
        );
        assert!(
            md.contains("| with warm imports | 2 | 75.0 | 150.0 |"),
            "{md}"
        );
        assert!(
            md.contains("| without warm imports | 1 | 4.0 | 8.0 |"),
            "{md}"
        );
        assert!(!md.contains("not at rest"), "{md}");
    }
}
