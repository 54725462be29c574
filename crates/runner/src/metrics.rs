//! Prometheus metrics: runs by language and outcome, programs started, run durations,
//! pool and queue, readiness and drain.
//!
//! `sandbox_runner_programs_started_total` counts each program handed to a sandbox
//! (`POST /run` and a session's run) exactly once: the count of programs a runner ran.
//! `sandbox_runner_runs_total` counts each answered run request once by outcome, the
//! refused ones too (`rejected`: no sandbox free; `draining`: the runner drains), which
//! started nothing.

use crate::backend::RunOutcome;
use crate::pool::PoolState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sandbox_protocol::Lang;

/// How a run ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit code 0.
    Ok,
    /// A non-zero exit code.
    Failed,
    /// The program did not compile.
    CompileError,
    /// Killed at its timeout.
    Timeout,
    /// Killed by the out-of-memory killer.
    Oom,
    /// The sandbox could not run it.
    Error,
    /// No sandbox was free (429/503).
    Rejected,
    /// The runner drains (503): nothing was started.
    Draining,
}

impl Outcome {
    /// How a run that ended as `outcome` counts.
    pub fn of(outcome: &RunOutcome) -> Outcome {
        if outcome.oom_killed {
            Outcome::Oom
        } else if outcome.job.timed_out {
            Outcome::Timeout
        } else if outcome.job.compile_error {
            Outcome::CompileError
        } else if outcome.job.exit_code == 0 {
            Outcome::Ok
        } else {
            Outcome::Failed
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "nonzero_exit",
            Outcome::CompileError => "compile_error",
            Outcome::Timeout => "timeout",
            Outcome::Oom => "oom",
            Outcome::Error => "error",
            Outcome::Rejected => "rejected",
            Outcome::Draining => "draining",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    lang: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LangLabels {
    lang: String,
}

/// Where the runner is in its life, for the gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// `/health` answers 200.
    pub ready: bool,
    /// SIGTERM or SIGINT came: the runner drains.
    pub draining: bool,
    /// API requests in flight (runs, sessions).
    pub in_flight: usize,
}

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// The runner's metrics.
pub struct Metrics {
    registry: Registry,
    runs: Family<RunLabels, Counter>,
    started: Family<LangLabels, Counter>,
    durations: Family<LangLabels, Histogram, fn() -> Histogram>,
    pool_size: Gauge,
    pool_available: Gauge,
    queue_length: Gauge,
    ready: Gauge,
    draining: Gauge,
    in_flight: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sandbox_runner");
        let runs = Family::<RunLabels, Counter>::default();
        registry.register("runs", "Runs by language and outcome", runs.clone());
        let started = Family::<LangLabels, Counter>::default();
        registry.register(
            "programs_started",
            "Programs handed to a sandbox, each counted once",
            started.clone(),
        );
        let durations = Family::<LangLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        registry.register(
            "run_duration_seconds",
            "Wall-clock time of POST /run, from request to answer",
            durations.clone(),
        );
        let pool_size = Gauge::default();
        registry.register(
            "pool_size",
            "Sandboxes kept, warm plus running",
            pool_size.clone(),
        );
        let pool_available = Gauge::default();
        registry.register(
            "pool_available",
            "Warm sandboxes ready now",
            pool_available.clone(),
        );
        let queue_length = Gauge::default();
        registry.register(
            "queue_length",
            "Requests waiting for a sandbox",
            queue_length.clone(),
        );
        let [ready, draining, in_flight] = [
            ("ready", "1 when GET /health answers 200 (ok), else 0"),
            ("draining", "1 once SIGTERM or SIGINT came, else 0"),
            ("requests_in_flight", "Run and session requests in flight"),
        ]
        .map(|(name, help)| {
            let gauge = Gauge::default();
            registry.register(name, help, gauge.clone());
            gauge
        });
        Metrics {
            registry,
            runs,
            started,
            durations,
            pool_size,
            pool_available,
            queue_length,
            ready,
            draining,
            in_flight,
        }
    }

    /// Counts one run.
    pub fn record(&self, lang: &Lang, outcome: Outcome, seconds: Option<f64>) {
        let labels = RunLabels {
            lang: lang.as_str().to_owned(),
            outcome: outcome.as_str().to_owned(),
        };
        self.runs.get_or_create(&labels).inc();
        if let Some(seconds) = seconds {
            let lang = LangLabels {
                lang: lang.as_str().to_owned(),
            };
            self.durations.get_or_create(&lang).observe(seconds);
        }
    }

    /// Counts a program handed to a sandbox.
    pub fn program_started(&self, lang: &Lang) {
        let labels = LangLabels {
            lang: lang.as_str().to_owned(),
        };
        self.started.get_or_create(&labels).inc();
    }

    /// The text exposition, with the pool gauges set from `pool` and the life gauges
    /// from `readiness`.
    pub fn render(&self, pool: &PoolState, readiness: &Readiness) -> String {
        self.ready.set(i64::from(readiness.ready));
        self.draining.set(i64::from(readiness.draining));
        self.in_flight.set(readiness.in_flight as i64);
        self.pool_size.set(pool.size as i64);
        self.pool_available.set(pool.available as i64);
        self.queue_length.set(pool.waiting as i64);
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
