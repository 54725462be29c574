//! What one run measures: the sections `--only` picks (`Section`) and the sizes of each
//! figure once smoke mode is applied (`Plan`), from the command line.

use crate::tools_from_code::{self, Rounds, TRACKER_SCRIPT};
use crate::{
    cpu_cost, egress, first_plot, languages, live_output, pause, scale_out, sessions, vm_pause,
    Args,
};
use clap::ValueEnum;
use serde::Serialize;
use std::time::Duration;

/// Concurrency levels of the throughput figures.
pub const LEVELS: [usize; 4] = [1, 2, 4, 8];
/// Sandboxes of each runner of the scale-out figure.
pub const SCALE_OUT_POOL: usize = 4;
/// Calls in flight at once in the scale-out figure: every sandbox of three runners.
pub const SCALE_OUT_CONCURRENCY: usize = 3 * SCALE_OUT_POOL;
/// Runs in flight at once in the CPU-per-run figure (issue 16's throughput level).
pub const CPU_CONCURRENCY: usize = 8;
/// Lines each run of the live-output figure prints.
pub const LIVE_LINES: usize = 50;
/// How long a session with a busy loop rests while the loop's CPU time is watched.
pub const SESSION_REST: Duration = Duration::from_secs(1);
/// The same in smoke mode.
pub const SMOKE_SESSION_REST: Duration = Duration::from_millis(200);
/// The time after which each figure of the tools section stops (after its round), once
/// it has a few rounds.
pub const TOOLS_BUDGET: Duration = Duration::from_secs(120);
/// The time after which a language's measured rounds stop (after their round) in the
/// languages section: the slow compilers get a few.
pub const LANGUAGE_BUDGET: Duration = Duration::from_secs(60);
/// Requests per batch of the egress section (one run, then as many from the host).
pub const EGRESS_BATCH: usize = 20;
/// Unmeasured requests per side before the egress section's batches.
pub const EGRESS_WARMUP: usize = 5;

/// A part of the bench that `--only` can pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Section {
    /// A new runner's first run, per language.
    ColdStart,
    /// Memory of the warm pool, sequential latency and throughput of the three paths
    /// (and the targets of issue 5).
    Paths,
    /// The runner's sessions (issue 12).
    Sessions,
    /// Packages: time to a first pandas + matplotlib plot (issue 13).
    FirstPlot,
    /// A hello world per language, next to the direct command on the host (issue 14).
    Languages,
    /// Calls/s through one sandbox-mcp in front of 1, 2 and 3 runners, and a runner's
    /// SIGKILL under load (issue 15).
    ScaleOut,
    /// CPU per run, counted by cgroups, next to a direct spawn (issue 16's baseline).
    CpuPerRun,
    /// From a program's write to its line at a client streaming the run (issue 30).
    LiveOutput,
    /// A session's pause and wake with 1 MiB and 50 MiB of files, and a fork of 8
    /// (issue 31).
    Pause,
    /// Tools called from code: a task as one tool call per page against one run whose
    /// program calls the tools, and the cost of one call from code (issue 32).
    Tools,
    /// A small HTTPS request through the runner's proxy next to the same request from the
    /// host (issue 33).
    Egress,
    /// Pause and wake on the vm backend under TCG (issue 31); only when named: it builds
    /// an image and boots VMs.
    VmPause,
}

impl Section {
    /// Every section, in bench order.
    pub const ALL: [Section; 12] = [
        Section::ColdStart,
        Section::Paths,
        Section::Sessions,
        Section::FirstPlot,
        Section::Languages,
        Section::ScaleOut,
        Section::CpuPerRun,
        Section::LiveOutput,
        Section::Pause,
        Section::Tools,
        Section::Egress,
        Section::VmPause,
    ];

    /// The sections of a run without `--only`: all but the vm backend's, which builds
    /// an image and boots VMs under TCG.
    pub fn default_run() -> Vec<Section> {
        Section::ALL
            .into_iter()
            .filter(|s| *s != Section::VmPause)
            .collect()
    }
}

/// The run's sizes once smoke mode is applied.
pub struct Plan {
    /// Measured sequential runs per language and path.
    pub iterations: usize,
    /// Unmeasured rounds before them.
    pub warmup: usize,
    /// Runs counted per throughput figure.
    pub throughput_runs: usize,
    /// Sandboxes of the runner under test.
    pub pool_size: usize,
    /// How long a session with a busy loop rests.
    pub session_rest: Duration,
    /// Time to first plot.
    pub plot: first_plot::Sizes,
    /// Hello world per language.
    pub languages: languages::Sizes,
    /// Scale-out and failover.
    pub scale_out: scale_out::Sizes,
    /// CPU per run.
    pub cpu: cpu_cost::Sizes,
    /// Live output.
    pub live: live_output::Sizes,
    /// Pause, wake and fork.
    pub pause: pause::Sizes,
    /// Pause and wake on the vm backend.
    pub vm_pause: vm_pause::Sizes,
    /// Tools called from code.
    pub tools: tools_from_code::Sizes,
    /// A request through the proxy and from the host.
    pub egress: egress::Sizes,
    /// The sections measured, in bench order.
    pub sections: Vec<Section>,
}

impl Plan {
    /// The plan `args` ask for: the sizes of the flags, or with `--smoke` a few runs of
    /// everything.
    pub fn from(args: &Args) -> Plan {
        let sections = if args.only.is_empty() {
            Section::default_run()
        } else {
            Section::ALL
                .into_iter()
                .filter(|s| args.only.contains(s))
                .collect()
        };
        let pool_size = args.pool_size as usize;
        let plan = Plan {
            iterations: args.iterations as usize,
            warmup: (args.iterations as usize / 10).clamp(1, 20),
            throughput_runs: args.throughput_runs as usize,
            pool_size,
            session_rest: SESSION_REST,
            plot: first_plot::Sizes {
                rounds: args.plot_rounds as usize,
                warmup: 1,
                pool_size,
            },
            languages: languages::Sizes {
                rounds: args.lang_rounds as usize,
                warmup: (args.lang_rounds as usize / 10).clamp(1, 2),
                pool_size,
                budget: LANGUAGE_BUDGET,
                quick: false,
            },
            scale_out: scale_out::Sizes {
                calls: args.scale_calls as usize,
                warmup: SCALE_OUT_CONCURRENCY,
                concurrency: SCALE_OUT_CONCURRENCY,
                pool_size: SCALE_OUT_POOL,
                failover: scale_out::Phases {
                    before: Duration::from_secs(3),
                    down: Duration::from_secs(5),
                    after: Duration::from_secs(2),
                },
            },
            cpu: cpu_cost::Sizes {
                runs: args.cpu_runs as usize,
                concurrency: CPU_CONCURRENCY,
                pool_size,
            },
            live: live_output::Sizes {
                lines: LIVE_LINES,
                runs: args.live_runs as usize,
            },
            pause: pause::Sizes {
                rounds: args.pause_rounds as usize,
                warmup: 1,
                fork_rounds: args.fork_rounds as usize,
            },
            vm_pause: vm_pause::Sizes {
                rounds: args.vm_pause_rounds as usize,
                warmup: 1,
                image: args.vm_image.clone(),
                image_cache: args.out.join("vm-images"),
            },
            tools: tools_from_code::Sizes {
                task: tools_rounds(args.tools_rounds as usize),
                per_call: tools_rounds(args.tools_rounds as usize),
                python: args.upstream_python.clone(),
                script: TRACKER_SCRIPT.into(),
            },
            egress: egress::Sizes {
                requests: args.egress_requests as usize,
                batch: EGRESS_BATCH,
                warmup: EGRESS_WARMUP,
            },
            sections,
        };
        if args.smoke {
            plan.smoke()
        } else {
            plan
        }
    }

    /// The same plan with a few runs of everything (`--smoke`): the pool sizes and the
    /// concurrency stay.
    fn smoke(mut self) -> Plan {
        (self.iterations, self.warmup, self.throughput_runs) = (3, 1, 8);
        self.session_rest = SMOKE_SESSION_REST;
        (self.plot.rounds, self.plot.warmup) = (2, 0);
        (self.languages.rounds, self.languages.warmup) = (1, 1);
        self.languages.quick = true;
        (self.scale_out.calls, self.scale_out.warmup) = (8, 4);
        self.scale_out.failover = scale_out::Phases {
            before: Duration::from_secs(1),
            down: Duration::from_secs(1),
            after: Duration::from_millis(200),
        };
        self.cpu.runs = 16;
        self.live = live_output::Sizes { lines: 5, runs: 1 };
        (self.pause.rounds, self.pause.warmup, self.pause.fork_rounds) = (2, 0, 1);
        (self.vm_pause.rounds, self.vm_pause.warmup) = (1, 0);
        for rounds in [&mut self.tools.task, &mut self.tools.per_call] {
            (rounds.rounds, rounds.warmup) = (2, 0);
        }
        self.egress = egress::Sizes {
            requests: 4,
            batch: 2,
            warmup: 0,
        };
        self
    }

    pub fn has(&self, section: Section) -> bool {
        self.sections.contains(&section)
    }

    /// The sizes of the session figures: as many rounds as the sequential ones.
    pub fn sessions(&self) -> sessions::Sizes {
        sessions::Sizes {
            warmup: self.warmup,
            iterations: self.iterations,
            rest: self.session_rest,
        }
    }
}

/// `rounds` measured rounds of a figure of the tools section, after one unmeasured.
fn tools_rounds(rounds: usize) -> Rounds {
    Rounds {
        warmup: 1,
        rounds,
        budget: TOOLS_BUDGET,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::PathBuf;

    #[test]
    fn smoke_plan_is_small() {
        let args = Args::parse_from(["bench", "--smoke"]);
        let plan = Plan::from(&args);
        assert!(plan.iterations <= 5 && plan.throughput_runs <= 8);
        assert!(plan.plot.rounds <= 2 && plan.plot.warmup == 0);
        assert!(plan.languages.rounds == 1 && plan.languages.warmup == 1);
        assert!(plan.languages.quick, "slow compilers left out");
        assert!(plan.pool_size >= *LEVELS.iter().max().unwrap_or(&8));
        assert!(plan.pause.rounds <= 2 && plan.pause.fork_rounds == 1);
        assert!(plan.vm_pause.rounds == 1 && plan.vm_pause.warmup == 0);
        for rounds in [plan.tools.task, plan.tools.per_call] {
            assert_eq!((rounds.rounds, rounds.warmup), (2, 0));
        }
        let egress = plan.egress;
        assert_eq!((egress.requests, egress.batch, egress.warmup), (4, 2, 0));
        assert!(plan.has(Section::Egress), "in the default set");
        assert_eq!(plan.sections, Section::default_run());
        assert!(plan.has(Section::Tools), "in the default set");
        assert_eq!(plan.sections.len(), Section::ALL.len() - 1);
        assert!(!plan.has(Section::VmPause), "VMs only when named");
    }

    #[test]
    fn the_vm_section_is_run_when_named_with_its_image() {
        let args = Args::parse_from(["bench", "--only", "vm-pause,pause", "--out", "/o"]);
        let plan = Plan::from(&args);
        assert_eq!(plan.sections, [Section::Pause, Section::VmPause]);
        assert_eq!((plan.pause.rounds, plan.pause.fork_rounds), (20, 5));
        assert_eq!(plan.vm_pause.rounds, 3);
        assert_eq!(plan.vm_pause.image, None);
        assert_eq!(plan.vm_pause.image_cache, PathBuf::from("/o/vm-images"));
        let args = Args::parse_from(["bench", "--only", "vm-pause", "--vm-image", "/img"]);
        assert_eq!(
            Plan::from(&args).vm_pause.image,
            Some(PathBuf::from("/img"))
        );
    }

    #[test]
    fn only_picks_sections_in_bench_order() {
        let args = Args::parse_from(["bench", "--only", "languages,first-plot,cold-start"]);
        let plan = Plan::from(&args);
        assert_eq!(
            plan.sections,
            [Section::ColdStart, Section::FirstPlot, Section::Languages]
        );
        assert!(plan.has(Section::FirstPlot) && !plan.has(Section::Paths));
        assert_eq!(plan.plot.rounds, 20);
        assert_eq!((plan.languages.rounds, plan.languages.warmup), (20, 2));
        assert!(!plan.languages.quick && plan.languages.budget == LANGUAGE_BUDGET);
        let args = Args::parse_from(["bench", "--only", "languages", "--lang-rounds", "3"]);
        assert_eq!(Plan::from(&args).languages.warmup, 1);
        assert!(Args::try_parse_from(["bench", "--only", "nothing"]).is_err());
    }

    #[test]
    fn the_tools_section_takes_its_rounds_and_python_from_the_flags() {
        let args = Args::parse_from(["bench", "--only", "tools"]);
        let plan = Plan::from(&args);
        assert_eq!(plan.sections, [Section::Tools]);
        let tools = &plan.tools;
        assert_eq!((tools.task.rounds, tools.task.warmup), (20, 1));
        assert_eq!((tools.per_call.rounds, tools.per_call.warmup), (20, 1));
        assert_eq!(tools.task.budget, TOOLS_BUDGET);
        assert_eq!(
            tools.python,
            PathBuf::from("tests/mcp-clients/.venv/bin/python")
        );
        assert_eq!(tools.script, PathBuf::from(TRACKER_SCRIPT));
        let args = Args::parse_from([
            "bench",
            "--only",
            "tools",
            "--tools-rounds",
            "7",
            "--upstream-python",
            "/opt/py/bin/python",
        ]);
        let plan = Plan::from(&args);
        assert_eq!((plan.tools.task.rounds, plan.tools.per_call.rounds), (7, 7));
        assert_eq!(plan.tools.python, PathBuf::from("/opt/py/bin/python"));
        assert!(Args::try_parse_from(["bench", "--tools-rounds", "0"]).is_err());
    }

    #[test]
    fn the_egress_section_takes_its_requests_from_the_flag() {
        let args = Args::parse_from(["bench", "--only", "egress"]);
        let plan = Plan::from(&args);
        assert_eq!(plan.sections, [Section::Egress]);
        let egress = plan.egress;
        assert_eq!((egress.requests, egress.batch), (100, EGRESS_BATCH));
        assert_eq!(egress.warmup, EGRESS_WARMUP);
        let args = Args::parse_from(["bench", "--only", "egress", "--egress-requests", "40"]);
        assert_eq!(Plan::from(&args).egress.requests, 40);
        assert!(Args::try_parse_from(["bench", "--egress-requests", "0"]).is_err());
    }
}
