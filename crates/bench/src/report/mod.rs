//! The results of one run: JSON for programs, markdown tables (ratios to the direct
//! spawn) for people, and the targets of issue 5 checked against them.
//!
//! This module holds the report, its targets and the tables of the paths (latency,
//! throughput, memory, cold start); each later section's table is a module of its own
//! (`sessions`, `first_plot`, `languages`, `cpu`, `live`, `pause`, `tools`, `egress`; the scale-out section's is
//! `scale_out::markdown`), and `cells` how a figure is written in one.

mod cells;
mod cpu;
mod egress;
mod first_plot;
mod languages;
mod live;
mod pause;
mod sessions;
mod tools;

use crate::clients::Via;
use crate::cpu_cost::CpuFigures;
use crate::egress::EgressSection;
use crate::first_plot::FirstPlot;
use crate::languages::LanguageFigures;
use crate::live_output::LiveFigures;
use crate::measure::{ColdStart, LangLatency, Rate};
use crate::memory::{IdleInterpreter, SandboxMemory};
use crate::pause::PauseFigures;
use crate::scale_out::ScaleOutFigures;
use crate::sessions::SessionFigures;
use crate::stats::{ratio, Latency};
use crate::tools_from_code::ToolsSection;
use crate::vm_pause::VmPauseFigures;
use crate::Section;
use cells::{dedup, with_ratio, MIB};
use sandbox_protocol::Lang;
use serde::Serialize;
use std::fmt::Write;

/// What "a few MB beyond its idle interpreter" is taken to mean.
pub const MEMORY_TARGET_BYTES: u64 = 5 << 20;

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
    /// From a program's write to its line at a streaming client (issue 30).
    pub live_output: Option<LiveFigures>,
    /// A session's pause, wake and fork (issue 31).
    pub pause: Option<PauseFigures>,
    /// Tools called from code, or why the section was skipped (issue 32).
    pub tools: Option<ToolsSection>,
    /// A request through the proxy next to the host's, or why the section was skipped
    /// (issue 33).
    pub egress: Option<EgressSection>,
    /// Pause and wake on the vm backend under TCG (issue 31).
    pub vm_pause: Option<VmPauseFigures>,
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
            sessions::markdown(sessions, &mut md);
        }
        if let Some(first_plot) = &self.first_plot {
            first_plot::markdown(first_plot, &mut md);
        }
        if let Some(languages) = &self.languages {
            languages::markdown(languages, &mut md);
        }
        if let Some(scale_out) = &self.scale_out {
            crate::scale_out::markdown(scale_out, &mut md);
        }
        if let Some(cpu) = &self.cpu_per_run {
            cpu::markdown(cpu, &mut md);
        }
        if let Some(live) = &self.live_output {
            live::markdown(live, &mut md);
        }
        if let Some(figures) = &self.pause {
            pause::markdown(figures, &mut md);
        }
        if let Some(section) = &self.tools {
            tools::markdown(section, &mut md);
        }
        if let Some(section) = &self.egress {
            egress::markdown(section, &mut md);
        }
        if let Some(figures) = &self.vm_pause {
            pause::vm_markdown(figures, &mut md);
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
        if s.sections != Section::default_run() {
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

fn at_most(rule: String, measured: Option<f64>, limit: f64) -> Target {
    Target {
        holds: measured.is_some_and(|m| m <= limit),
        rule,
        measured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_needs_a_figure() {
        assert!(at_most("r".into(), Some(0.4), 0.5).holds);
        assert!(!at_most("r".into(), Some(0.6), 0.5).holds);
        assert!(!at_most("r".into(), None, 0.5).holds);
    }
}
