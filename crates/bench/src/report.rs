//! The results of one run: JSON for programs, markdown tables (ratios to the direct
//! spawn) for people, and the targets of issue 5 checked against them.

use crate::clients::Via;
use crate::cpu_cost::CpuFigures;
use crate::first_plot::{FirstPlot, PlotPath, ONE_LINER};
use crate::languages::{LanguageFigures, EXPECTED};
use crate::measure::{ColdStart, LangLatency, Rate};
use crate::memory::{IdleInterpreter, SandboxMemory};
use crate::pool_watch::QUIET;
use crate::scale_out::ScaleOutFigures;
use crate::sessions::SessionFigures;
use crate::stats::{ratio, Latency};
use crate::Section;
use sandbox_protocol::Lang;
use serde::Serialize;
use std::fmt::Write;

/// What "a few MB beyond its idle interpreter" is taken to mean.
pub const MEMORY_TARGET_BYTES: u64 = 5 << 20;
const MIB: f64 = (1u64 << 20) as f64;

/// The machine and settings a run was made with.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Setup {
    /// CPUs the bench may use.
    pub cpus: usize,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// PRETTY_NAME of /etc/os-release.
    pub os: String,
    /// Seconds since the epoch when the run began.
    pub started_at: u64,
    /// Smoke mode: few iterations, figures not meaningful.
    pub smoke: bool,
    /// Measured sequential runs per language and path.
    pub iterations: usize,
    /// Unmeasured rounds before them.
    pub warmup: usize,
    /// Runs counted per throughput figure (after `pool_size` uncounted ones).
    pub throughput_runs: usize,
    /// Pool size of the runner under test.
    pub pool_size: usize,
    /// Measured runs per path of the time-to-first-plot figure.
    pub plot_rounds: usize,
    /// Measured runs per language and path of the hello-world figure.
    pub lang_rounds: usize,
    /// The sections measured (`--only`).
    pub sections: Vec<Section>,
    /// `--templates` given to the runners (`--runner-templates`); none: their default.
    pub runner_templates: Option<bool>,
    /// `--warm-imports` given to the runners (`--runner-warm-imports`); none: their
    /// default.
    pub runner_warm_imports: Option<String>,
    /// The CPU cgroup the bench and its direct spawns ran in (see `cpu_group`).
    pub direct_cgroup: Option<String>,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Machine and settings.
    pub setup: Setup,
    /// Sequential latency per language.
    pub latency: Vec<LangLatency>,
    /// Throughput per language and concurrency.
    pub throughput: Vec<Rate>,
    /// Each warm sandbox of a fresh pool.
    pub sandboxes: Vec<SandboxMemory>,
    /// The interpreters started directly and idle.
    pub idle_interpreters: Vec<IdleInterpreter>,
    /// A new runner's first run, per language.
    pub cold_start: Vec<ColdStart>,
    /// The runner's sessions (issue 12).
    pub sessions: Option<SessionFigures>,
    /// Packages: time to a first pandas + matplotlib plot (issue 13).
    pub first_plot: Option<FirstPlot>,
    /// A hello world per language (issue 14).
    pub languages: Option<LanguageFigures>,
    /// Calls/s with 1, 2 and 3 runners, and failover (issue 15).
    pub scale_out: Option<ScaleOutFigures>,
    /// CPU per run next to a direct spawn (issue 16's baseline).
    pub cpu_per_run: Option<CpuFigures>,
    /// The targets of issue 5.
    pub targets: Vec<Target>,
}

/// One target and whether it holds.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// What is required.
    pub rule: String,
    /// The measured figure (a ratio, or MiB for memory).
    pub measured: Option<f64>,
    /// Whether it holds.
    pub holds: bool,
}

impl Report {
    /// Checks the targets against the figures.
    pub fn check_targets(&mut self) {
        let mut targets = Vec::new();
        for lang in &[Lang::PYTHON, Lang::NODE] {
            for (via, limit) in [(Via::Run, 0.5), (Via::ToolsCall, 0.6)] {
                let measured = self.p50_ratio(lang, via);
                targets.push(at_most(
                    format!("{} {} p50 <= {limit} x direct", lang.as_str(), via.label()),
                    measured,
                    limit,
                ));
            }
        }
        for lang in &[Lang::BASH, Lang::PYTHON, Lang::NODE] {
            for via in [Via::Run, Via::ToolsCall] {
                let measured = self.rate_ratio(lang, 8, via);
                let rule = format!(
                    "{} {} runs/s at c=8 >= 0.7 x direct",
                    lang.as_str(),
                    via.label()
                );
                targets.push(Target {
                    holds: measured.is_some_and(|m| m >= 0.7),
                    rule,
                    measured,
                });
            }
        }
        for kind in ["python", "node"] {
            let measured = self.beyond_idle(kind);
            let limit = MEMORY_TARGET_BYTES as f64 / MIB;
            targets.push(at_most(
                format!("warm {kind} sandbox <= {limit} MiB beyond its idle interpreter"),
                measured,
                limit,
            ));
        }
        self.targets = targets;
    }

    fn latency_of(&self, lang: &Lang, via: Via) -> Option<Latency> {
        let row = self.latency.iter().find(|l| &l.lang == lang)?;
        row.paths.iter().find(|(v, _)| *v == via).map(|(_, l)| *l)
    }

    fn p50_ratio(&self, lang: &Lang, via: Via) -> Option<f64> {
        let direct = self.latency_of(lang, Via::Direct)?;
        ratio(self.latency_of(lang, via)?.p50_ms, direct.p50_ms)
    }

    fn rate_of(&self, lang: &Lang, concurrency: usize, via: Via) -> Option<f64> {
        let rate = self
            .throughput
            .iter()
            .find(|r| &r.lang == lang && r.concurrency == concurrency)?;
        rate.per_second
            .iter()
            .find(|(v, _)| *v == via)
            .map(|(_, r)| *r)
    }

    fn rate_ratio(&self, lang: &Lang, concurrency: usize, via: Via) -> Option<f64> {
        let direct = self.rate_of(lang, concurrency, Via::Direct)?;
        ratio(self.rate_of(lang, concurrency, via)?, direct)
    }

    /// Mean cgroup charge of the warm sandboxes of `kind`, in bytes.
    fn sandbox_mean(&self, kind: &str) -> Option<f64> {
        let charges: Vec<u64> = self
            .sandboxes
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.cgroup_bytes)
            .collect();
        (!charges.is_empty()).then(|| charges.iter().sum::<u64>() as f64 / charges.len() as f64)
    }

    fn idle(&self, kind: &str) -> Option<&IdleInterpreter> {
        self.idle_interpreters.iter().find(|i| i.kind == kind)
    }

    /// MiB a warm sandbox of `kind` is charged beyond its interpreter started directly.
    fn beyond_idle(&self, kind: &str) -> Option<f64> {
        let idle = self.idle(kind)?.cgroup_bytes as f64;
        Some((self.sandbox_mean(kind)? - idle) / MIB)
    }

    /// The markdown tables.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        self.setup_md(&mut md);
        if !self.latency.is_empty() {
            self.latency_md(&mut md);
        }
        if !self.throughput.is_empty() {
            self.throughput_md(&mut md);
        }
        if !self.sandboxes.is_empty() {
            self.memory_md(&mut md);
        }
        if !self.cold_start.is_empty() {
            self.cold_start_md(&mut md);
        }
        if let Some(sessions) = &self.sessions {
            sessions_md(sessions, &mut md);
        }
        if let Some(first_plot) = &self.first_plot {
            first_plot_md(first_plot, &mut md);
        }
        if let Some(languages) = &self.languages {
            languages_md(languages, &mut md);
        }
        if let Some(scale_out) = &self.scale_out {
            crate::scale_out::markdown(scale_out, &mut md);
        }
        if let Some(cpu) = &self.cpu_per_run {
            cpu_md(cpu, &mut md);
        }
        if !self.targets.is_empty() {
            self.targets_md(&mut md);
        }
        md
    }

    fn setup_md(&self, md: &mut String) {
        let s = &self.setup;
        let _ = write!(md, "{} CPUs, {}, kernel {}", s.cpus, s.os, s.kernel);
        if s.sections.contains(&Section::Paths) {
            let _ = write!(
                md,
                "; {} sequential runs per path (after {} warm-up rounds), {} runs counted \
                 per throughput figure after the first {} (the steady rate, once the \
                 sandboxes made ahead are used up)",
                s.iterations, s.warmup, s.throughput_runs, s.pool_size,
            );
        }
        let _ = write!(md, "; pool size {}", s.pool_size);
        if s.sections.len() < Section::ALL.len() {
            let names: Vec<String> = s
                .sections
                .iter()
                .map(|section| {
                    serde_json::to_value(section)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                })
                .collect();
            let _ = write!(md, "; only {}", names.join(", "));
        }
        if let Some(templates) = s.runner_templates {
            let _ = write!(md, "; runners with --templates {templates}");
        }
        if let Some(warm) = &s.runner_warm_imports {
            let _ = write!(md, "; runners with --warm-imports {warm:?}");
        }
        let _ = writeln!(
            md,
            "{}.\n",
            if s.smoke {
                "; SMOKE run, figures not meaningful"
            } else {
                ""
            }
        );
        if let Some(group) = &s.direct_cgroup {
            let _ = writeln!(
                md,
                "The bench and its direct spawns ran in the CPU cgroup {group}, a sibling of \
                 the runner's sandbox-runner group with the same weight.\n"
            );
        }
    }

    fn latency_md(&self, md: &mut String) {
        md.push_str("### Sequential latency, ms (ratio to direct spawn)\n\n");
        md.push_str("| lang | path | p50 | p95 | p99 |\n|---|---|---|---|---|\n");
        for row in &self.latency {
            let Some(direct) = self.latency_of(&row.lang, Via::Direct) else {
                continue;
            };
            for (via, l) in &row.paths {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} |",
                    row.lang.as_str(),
                    via.label(),
                    with_ratio(l.p50_ms, direct.p50_ms, 2),
                    with_ratio(l.p95_ms, direct.p95_ms, 2),
                    with_ratio(l.p99_ms, direct.p99_ms, 2),
                );
            }
        }
        md.push('\n');
    }

    fn throughput_md(&self, md: &mut String) {
        let levels: Vec<usize> = dedup(self.throughput.iter().map(|r| r.concurrency));
        md.push_str("### Throughput, runs/s (ratio to direct spawn)\n\n| lang | path |");
        for c in &levels {
            let _ = write!(md, " c={c} |");
        }
        md.push_str("\n|---|---|");
        md.push_str(&"---|".repeat(levels.len()));
        md.push('\n');
        for lang in &dedup(self.throughput.iter().map(|r| r.lang.clone())) {
            for via in Via::ALL {
                let _ = write!(md, "| {} | {} |", lang.as_str(), via.label());
                for &c in &levels {
                    let cell = match (
                        self.rate_of(lang, c, via),
                        self.rate_of(lang, c, Via::Direct),
                    ) {
                        (Some(r), Some(d)) => with_ratio(r, d, 1),
                        _ => "-".into(),
                    };
                    let _ = write!(md, " {cell} |");
                }
                md.push('\n');
            }
        }
        md.push('\n');
    }

    fn memory_md(&self, md: &mut String) {
        md.push_str(
            "### Memory per warm sandbox, MiB\n\n\
             | kind | sandboxes | cgroup charge (mean) | RSS of its processes (mean) | \
             idle interpreter started directly: cgroup charge / RSS | beyond the idle interpreter |\n\
             |---|---|---|---|---|---|\n",
        );
        for kind in ["python", "node", "bash"] {
            let of_kind: Vec<&SandboxMemory> =
                self.sandboxes.iter().filter(|s| s.kind == kind).collect();
            if of_kind.is_empty() {
                continue;
            }
            let n = of_kind.len() as f64;
            let rss = of_kind.iter().map(|s| s.rss_bytes).sum::<u64>() as f64 / n;
            let charge = self.sandbox_mean(kind).unwrap_or_default();
            let idle = self.idle(kind).map_or("-".into(), |i| {
                format!(
                    "{:.1} / {:.1}",
                    i.cgroup_bytes as f64 / MIB,
                    i.rss_bytes as f64 / MIB
                )
            });
            let beyond = if kind == "bash" {
                // An unprepared sandbox runs no interpreter: all of it is overhead.
                Some(charge / MIB)
            } else {
                self.beyond_idle(kind)
            };
            let _ = writeln!(
                md,
                "| {kind} | {} | {:.1} | {:.1} | {idle} | {} |",
                of_kind.len(),
                charge / MIB,
                rss / MIB,
                beyond.map_or("-".into(), |b| format!("{b:.1}")),
            );
        }
        md.push('\n');
    }

    fn cold_start_md(&self, md: &mut String) {
        md.push_str(
            "### Cold start (new runner, empty pool), ms\n\n\
             | first run | runner start to listening | runner start to first answer |\n\
             |---|---|---|\n",
        );
        for c in &self.cold_start {
            let _ = writeln!(
                md,
                "| {} | {:.0} | {:.0} |",
                c.lang.as_str(),
                c.listening_ms,
                c.first_run_ms
            );
        }
        md.push('\n');
    }

    fn targets_md(&self, md: &mut String) {
        md.push_str("### Targets (issue 5)\n\n| target | measured | holds |\n|---|---|---|\n");
        for t in &self.targets {
            let measured = t.measured.map_or("-".into(), |m| format!("{m:.2}"));
            let holds = if t.holds { "yes" } else { "**no**" };
            let _ = writeln!(md, "| {} | {measured} | {holds} |", t.rule);
        }
    }
}

/// The "Sessions" section.
fn sessions_md(s: &SessionFigures, md: &mut String) {
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
}

/// The "Packages: time to first plot" section.
fn first_plot_md(f: &FirstPlot, md: &mut String) {
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
    let direct = f
        .rested
        .iter()
        .find(|(p, _)| *p == PlotPath::Direct)
        .map(|(_, l)| *l);
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
    let one_liner = |path: PlotPath| f.rested.iter().find(|(p, _)| *p == path).map(|(_, l)| *l);
    if let (Some(warm), Some(none)) = (
        one_liner(PlotPath::OneLinerWarm),
        one_liner(PlotPath::OneLinerNoWarm),
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
    md.push_str(
        "| idle python sandbox, MiB | sandboxes | cgroup charge (mean) | RSS of its processes \
         (mean) |\n|---|---|---|---|\n",
    );
    for (label, sandboxes) in [
        ("with warm imports", &f.memory.warm_imports),
        ("without warm imports", &f.memory.no_warm_imports),
    ] {
        let n = sandboxes.len().max(1) as f64;
        let charge = sandboxes.iter().map(|s| s.cgroup_bytes).sum::<u64>() as f64 / n;
        let rss = sandboxes.iter().map(|s| s.rss_bytes).sum::<u64>() as f64 / n;
        let _ = writeln!(
            md,
            "| {label} | {} | {:.1} | {:.1} |",
            sandboxes.len(),
            charge / MIB,
            rss / MIB
        );
    }
    md.push('\n');
}

/// The "Languages" section: the latency table, then the commands compared.
fn languages_md(f: &LanguageFigures, md: &mut String) {
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

fn cpu_md(f: &CpuFigures, md: &mut String) {
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

/// The first 12 characters of a package set's key (as `git log` shortens hashes).
fn short_key(key: &str) -> &str {
    key.get(..12).unwrap_or(key)
}

fn at_most(rule: String, measured: Option<f64>, limit: f64) -> Target {
    Target {
        holds: measured.is_some_and(|m| m <= limit),
        rule,
        measured,
    }
}

/// `value (ratio x)` with `decimals` digits for the value.
fn with_ratio(value: f64, base: f64, decimals: usize) -> String {
    match ratio(value, base) {
        Some(r) => format!("{value:.decimals$} ({r:.2}x)"),
        None => format!("{value:.decimals$}"),
    }
}

/// The distinct values, in the order they first appear.
fn dedup<T: PartialEq>(values: impl Iterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
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
    fn dedup_keeps_first_order() {
        assert_eq!(dedup([2, 1, 2, 8, 1].into_iter()), vec![2, 1, 8]);
    }

    #[test]
    fn sessions_section_shows_ratios_and_ticks() {
        use crate::sessions::{BusyLoop, IdleSession, SessionRun, StopWake};
        let ms = |p50_ms: f64| Latency {
            runs: 1,
            p50_ms,
            p95_ms: p50_ms,
            p99_ms: p50_ms,
            mean_ms: p50_ms,
        };
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
        };
        let mut md = String::new();
        sessions_md(&figures, &mut md);
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
    }

    #[test]
    fn first_plot_section_shows_ratios_and_memory() {
        use crate::first_plot::PlotMemory;
        let ms = |p50_ms: f64| Latency {
            runs: 20,
            p50_ms,
            p95_ms: 2.0 * p50_ms,
            p99_ms: 2.0 * p50_ms,
            mean_ms: p50_ms,
        };
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
        first_plot_md(&figure, &mut md);
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

    #[test]
    fn languages_section_shows_ratios_commands_and_gaps() {
        use crate::languages::LanguageRow;
        let ms = |p50_ms: f64| Latency {
            runs: 20,
            p50_ms,
            p95_ms: 2.0 * p50_ms,
            p99_ms: 2.0 * p50_ms,
            mean_ms: p50_ms,
        };
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
        languages_md(&figures, &mut md);
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

    #[test]
    fn cpu_section_shows_ratios_to_the_direct_spawn() {
        let figures = CpuFigures {
            runs: 200,
            concurrency: 8,
            pool_size: 8,
            rows: vec![crate::cpu_cost::CpuRow {
                lang: "python".into(),
                direct_ms: 10.0,
                sandboxed_ms: 20.0,
                jail_ms: 40.0,
            }],
        };
        let mut md = String::new();
        cpu_md(&figures, &mut md);
        assert!(
            md.contains("| python | 10.00 | 20.00 (2.00x) | 40.00 (4.00x) |"),
            "{md}"
        );
        assert!(
            md.contains("200 runs per language and path, 8 at a time"),
            "{md}"
        );
    }

    #[test]
    fn at_most_needs_a_figure() {
        assert!(at_most("r".into(), Some(0.4), 0.5).holds);
        assert!(!at_most("r".into(), Some(0.6), 0.5).holds);
        assert!(!at_most("r".into(), None, 0.5).holds);
    }
}
