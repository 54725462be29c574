//! The "Pause, wake and fork" section (issue 31): pause and wake next to a run in the
//! active session, per session size and on the vm backend; a fork next to a new session.

use super::cells::{with_ratio, MIB};
use crate::pause::{ForkFigures, PauseFigures, PauseRow};
use crate::stats::Latency;
use crate::vm_pause::VmPauseFigures;
use std::fmt::Write;

/// The process backend's section.
pub fn markdown(f: &PauseFigures, md: &mut String) {
    md.push_str("### Pause and wake, ms (ratio to a run in the active session)\n\n");
    let _ = writeln!(
        md,
        "A bash session's files ({} files of random bytes) on a runner of its own (pool size \
         {}); {} rounds (after {} unmeasured) of `true` in the active session, `POST \
         /sessions/{{id}}/pause`, and `true` again, which wakes it; each step on a full pool.\n",
        f.files, f.pool_size, f.rounds, f.warmup
    );
    rows_md(f.rows.iter().map(|row| (mib(row.files_bytes), row)), md);
    fork_md(&f.fork, md);
}

/// The vm backend's section.
pub fn vm_markdown(f: &VmPauseFigures, md: &mut String) {
    let _ = writeln!(
        md,
        "### Pause and wake on the vm backend ({}, {}), ms (ratio to a run in the active \
         session)\n\n{} rounds (after {} unmeasured) as above, a pool of {} VM (each wake on a \
         VM booted ahead).\n",
        f.vmm, f.accel, f.rounds, f.warmup, f.pool_size
    );
    rows_md([(mib(f.row.files_bytes), &f.row)].into_iter(), md);
}

/// `1 MiB`, `50 MiB`.
fn mib(bytes: u64) -> String {
    format!("{} MiB", (bytes as f64 / MIB).round())
}

/// Three rows per session: the run, the pause (with its bytes), the wake.
fn rows_md<'a>(rows: impl Iterator<Item = (String, &'a PauseRow)>, md: &mut String) {
    md.push_str("| files | step | runs | p50 | p95 | stored bytes |\n|---|---|---|---|---|---|\n");
    for (files, row) in rows {
        let steps = [
            ("run `true`, session active", &row.run, String::new()),
            ("`POST .../pause`", &row.pause, row.stored_bytes.to_string()),
            ("first run `true` (wakes it)", &row.wake, String::new()),
        ];
        for (step, latency, stored) in steps {
            let cells = cells(latency, &row.run);
            let _ = writeln!(md, "| {files} | {step} | {cells} | {stored} |");
        }
    }
    md.push('\n');
}

/// The fork, its wakes, and the new session they are measured against.
fn fork_md(f: &ForkFigures, md: &mut String) {
    let _ = writeln!(
        md,
        "### Fork of {}, ms (ratio to `POST /sessions`)\n\n{} rounds on the {} session; the \
         {} first runs (`true`, each waking one fork) sent at once.\n",
        f.count,
        f.rounds,
        mib(f.files_bytes),
        f.count
    );
    md.push_str("| step | runs | p50 | p95 |\n|---|---|---|---|\n");
    let steps: [(String, &Latency); 4] = [
        ("`POST /sessions`, a new session".into(), &f.create),
        (format!("`POST .../fork` `{{count: {}}}`", f.count), &f.fork),
        ("a fork's first run (wakes it)".into(), &f.wake),
        (
            format!("all {} woken (to the last answer)", f.count),
            &f.all_woken,
        ),
    ];
    for (step, latency) in steps {
        let _ = writeln!(md, "| {step} | {} |", cells(latency, &f.create));
    }
    md.push('\n');
}

/// `runs | p50 | p95`, each time with its ratio to `base`'s.
fn cells(latency: &Latency, base: &Latency) -> String {
    format!(
        "{} | {} | {}",
        latency.runs,
        with_ratio(latency.p50_ms, base.p50_ms, 2),
        with_ratio(latency.p95_ms, base.p95_ms, 2),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::cells::latency;

    fn row(files_bytes: u64) -> PauseRow {
        PauseRow {
            files_bytes,
            stored_bytes: files_bytes + 10_240,
            run: latency(20, 5.0, 2.0),
            pause: latency(20, 10.0, 2.0),
            wake: latency(20, 40.0, 2.0),
        }
    }

    #[test]
    fn pause_section_shows_ratios_to_the_active_run_and_the_bytes() {
        let figures = PauseFigures {
            rounds: 20,
            warmup: 1,
            pool_size: 8,
            files: 8,
            rows: vec![row(1 << 20), row(50 << 20)],
            fork: ForkFigures {
                count: 8,
                files_bytes: 1 << 20,
                rounds: 5,
                create: latency(5, 1.0, 2.0),
                fork: latency(5, 20.0, 2.0),
                wake: latency(40, 30.0, 2.0),
                all_woken: latency(5, 90.0, 2.0),
            },
        };
        let mut md = String::new();
        markdown(&figures, &mut md);
        assert!(
            md.contains(
                "| 1 MiB | run `true`, session active | 20 | 5.00 (1.00x) | 10.00 (1.00x) |  |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| 50 MiB | `POST .../pause` | 20 | 10.00 (2.00x) | 20.00 (2.00x) | 52439040 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 1 MiB | first run `true` (wakes it) | 20 | 40.00 (8.00x) |"),
            "{md}"
        );
        assert!(md.contains("### Fork of 8"), "{md}");
        assert!(
            md.contains("| `POST .../fork` `{count: 8}` | 5 | 20.00 (20.00x) | 40.00 (20.00x) |"),
            "{md}"
        );
        assert!(
            md.contains("| all 8 woken (to the last answer) | 5 | 90.00 (90.00x) |"),
            "{md}"
        );
        assert!(md.contains("20 rounds (after 1 unmeasured)"), "{md}");
    }

    #[test]
    fn vm_section_names_its_vmm_and_accelerator() {
        let figures = VmPauseFigures {
            vmm: "qemu",
            accel: "tcg",
            pool_size: 1,
            rounds: 3,
            warmup: 1,
            row: row(1 << 20),
        };
        let mut md = String::new();
        vm_markdown(&figures, &mut md);
        assert!(md.contains("vm backend (qemu, tcg)"), "{md}");
        assert!(
            md.contains(
                "| 1 MiB | `POST .../pause` | 20 | 10.00 (2.00x) | 20.00 (2.00x) | 1058816 |"
            ),
            "{md}"
        );
    }
}
