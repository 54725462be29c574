//! The "Sessions" section: a run in a warm session next to a one-shot run, what a
//! resting session holds, and what freezing it between calls costs.

use super::cells::MIB;
use crate::sessions::SessionFigures;
use crate::stats::ratio;
use std::fmt::Write;

/// The "Sessions" section.
pub fn markdown(s: &SessionFigures, md: &mut String) {
    md.push_str("### Sessions, ms\n\n");
    let _ = writeln!(
        md,
        "`POST /sessions` on a full pool: p50 {:.2}, p95 {:.2} ({} runs).\n",
        s.create.p50_ms, s.create.p95_ms, s.create.runs
    );
    md.push_str(
        "| lang | run in a warm session p50 / p95 | one-shot POST /run p50 / p95 | \
         session / one-shot (p50) |\n|---|---|---|---|\n",
    );
    for r in &s.runs {
        let ratio = ratio(r.session.p50_ms, r.one_shot.p50_ms);
        let _ = writeln!(
            md,
            "| {} | {:.2} / {:.2} | {:.2} / {:.2} | {} |",
            r.lang.as_str(),
            r.session.p50_ms,
            r.session.p95_ms,
            r.one_shot.p50_ms,
            r.one_shot.p95_ms,
            ratio.map_or("-".into(), |r| format!("{r:.2}x")),
        );
    }
    let i = &s.idle;
    let n = i.warm.len().max(1) as f64;
    let warm_charge = i.warm.iter().map(|w| w.cgroup_bytes).sum::<u64>() as f64 / n;
    let warm_rss = i.warm.iter().map(|w| w.rss_bytes).sum::<u64>() as f64 / n;
    let _ = writeln!(
        md,
        "\n| memory, MiB | cgroup charge | RSS of its processes |\n|---|---|---|\n\
         | python session resting after `{}` | {:.1} | {:.1} |\n\
         | warm python sandbox, never used (mean of {}) | {:.1} | {:.1} |\n",
        i.code,
        i.session.cgroup_bytes as f64 / MIB,
        i.session.rss_bytes as f64 / MIB,
        i.warm.len(),
        warm_charge / MIB,
        warm_rss / MIB,
    );
    let w = &s.stop_wake;
    let _ = writeln!(
        md,
        "| `{}` in a session holding | p50 | p95 |\n|---|---|---|\n\
         | {} background `sleep 1000` | {:.2} | {:.2} |\n\
         | no background process | {:.2} | {:.2} |\n\n\
         Thawing and freezing {} processes: {:.2} ms a run (difference of the p50s).\n",
        w.code,
        w.background,
        w.crowded.p50_ms,
        w.crowded.p95_ms,
        w.empty.p50_ms,
        w.empty.p95_ms,
        w.background,
        w.cost_ms,
    );
    let b = &s.busy_loop;
    let _ = writeln!(
        md,
        "A background busy loop: {} CPU ticks while its session rested {:.0} ms, {} during a \
         run of the same length ({} ticks a second).\n",
        b.resting_ticks, b.watched_ms, b.running_ticks, b.ticks_per_second,
    );
    let p = &s.processes;
    let kib = |bytes: i64| bytes as f64 / 1024.0;
    let _ = writeln!(
        md,
        "Memory per process (the session's cgroup charge, {} of each): a `sleep` started with \
         `POST /sessions/{{id}}/processes` {:.0} KiB, the same `sleep` left in the background \
         by a run {:.0} KiB ({}); a process whose two output windows are full adds {:.0} KiB \
         (the runner's default window: 1 MiB a stream).\n",
        p.count,
        kib(p.process_bytes_each),
        kib(p.background_bytes_each),
        ratio(p.process_bytes_each as f64, p.background_bytes_each as f64)
            .map_or("-".into(), |r| format!("{r:.2}x")),
        kib(p.full_window_bytes),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SandboxMemory;
    use crate::report::cells::latency;
    use crate::sessions::{BusyLoop, IdleSession, SessionRun, StopWake};
    use sandbox_protocol::Lang;

    #[test]
    fn sessions_section_shows_ratios_and_ticks() {
        let ms = |p50_ms: f64| latency(1, p50_ms, 1.0);
        let sandbox = |cgroup_bytes: u64| SandboxMemory {
            kind: "python",
            cgroup_bytes,
            rss_bytes: 2 << 20,
            processes: vec!["python3".into()],
        };
        let figures = SessionFigures {
            create: ms(0.5),
            runs: vec![SessionRun {
                lang: Lang::PYTHON,
                code: "print(1)",
                session: ms(2.0),
                one_shot: ms(8.0),
            }],
            idle: IdleSession {
                code: "x = 41",
                session: sandbox(6 << 20),
                warm: vec![sandbox(4 << 20), sandbox(6 << 20)],
            },
            stop_wake: StopWake {
                background: 20,
                code: "echo 1",
                crowded: ms(5.5),
                empty: ms(4.5),
                cost_ms: 1.0,
            },
            busy_loop: BusyLoop {
                watched_ms: 1000.0,
                resting_ticks: 0,
                running_ticks: 50,
                ticks_per_second: 100,
            },
            processes: crate::processes::ProcessMemory {
                count: 12,
                background_bytes_each: 100 << 10,
                process_bytes_each: 150 << 10,
                full_window_bytes: 2 << 20,
            },
        };
        let mut md = String::new();
        markdown(&figures, &mut md);
        assert!(
            md.contains("| python | 2.00 / 2.00 | 8.00 / 8.00 | 0.25x |"),
            "{md}"
        );
        assert!(md.contains("(mean of 2) | 5.0 | 2.0 |"), "{md}");
        assert!(md.contains("20 processes: 1.00 ms"), "{md}");
        assert!(
            md.contains("0 CPU ticks while its session rested 1000 ms, 50"),
            "{md}"
        );
        assert!(
            md.contains(
                "150 KiB, the same `sleep` left in the background by a run 100 KiB (1.50x)"
            ),
            "{md}"
        );
        assert!(md.contains("adds 2048 KiB"), "{md}");
    }
}
