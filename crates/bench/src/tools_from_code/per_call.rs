//! The cost of one call from code: a `run_python` whose program calls `get_issue`
//! [`CALLS`] times, against the same program making none (the same loop, a dictionary
//! made in place of each call); the difference of their medians over [`CALLS`] is what
//! one call from code costs. Next to it, the median of one `get_issue` called directly
//! by the client on the tracker. Each round: the run with calls, the run without, then
//! [`CALLS`] direct calls back to back (each timed); each run on a quiet runner.

use super::calls::{call_directly, json_of, run_python, ToolCallCheck};
use super::rounds::{Quiet, Rounds};
use super::task::text_of;
use crate::stats::{self, Latency};
use anyhow::{ensure, Context};
use rmcp::model::JsonObject;
use rmcp::service::Peer;
use rmcp::RoleClient;
use serde::Serialize;
use std::time::{Duration, Instant};

/// The calls the program makes.
pub const CALLS: usize = 20;
/// The tool called.
const TOOL: &str = "get_issue";

/// The program: [`CALLS`] calls of `get_issue` (`with_calls`), or the same loop making
/// none. Both import `tools` and print the same line.
pub fn program(with_calls: bool) -> String {
    let each = if with_calls {
        "tools.tracker.get_issue(id=n)"
    } else {
        "{\"id\": n}"
    };
    format!(
        "import tools\n\
         got = []\n\
         for n in range(1, {end}):\n    got.append({each})\n\
         print(len(got), sum(issue[\"id\"] for issue in got))\n",
        end = CALLS + 1
    )
}

/// What both programs print.
fn expected_stdout() -> String {
    format!("{CALLS} {}\n", CALLS * (CALLS + 1) / 2)
}

/// The figure.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PerCallFigures {
    /// Calls per run.
    pub calls_per_run: usize,
    /// Measured rounds.
    pub rounds: usize,
    /// `run_python` of the program making [`CALLS`] calls.
    pub with_calls: Latency,
    /// `run_python` of the same loop making none.
    pub without_calls: Latency,
    /// One call from code: the difference of the medians over [`CALLS`], ms.
    pub per_call_ms: f64,
    /// One `get_issue` called directly by the client.
    pub direct: Latency,
}

/// What one call from code costs: the difference of the medians over `calls`.
pub fn per_call_ms(with_calls: &Latency, without_calls: &Latency, calls: usize) -> f64 {
    (with_calls.p50_ms - without_calls.p50_ms) / calls.max(1) as f64
}

/// Measures the figure.
pub async fn measure(
    direct: &Peer<RoleClient>,
    mcp: &Peer<RoleClient>,
    quiet: &Quiet<'_>,
    rounds: &Rounds,
) -> anyhow::Result<PerCallFigures> {
    let (with_code, without_code) = (program(true), program(false));
    let (mut with, mut without, mut one) = (Vec::new(), Vec::new(), Vec::new());
    let begun = Instant::now();
    let mut round = 0;
    while rounds.go_on(with.len(), begun.elapsed()) {
        quiet.wait().await?;
        let a = run(mcp, &with_code, CALLS)
            .await
            .context("calls from code")?;
        quiet.wait().await?;
        let b = run(mcp, &without_code, 0)
            .await
            .context("the loop without calls")?;
        quiet.wait().await?;
        let c = one_by_one(direct).await.context("get_issue directly")?;
        if rounds.counts(round) {
            with.push(a);
            without.push(b);
            one.extend(c);
        }
        round += 1;
    }
    let with_calls = stats::latency(&with).context("no round")?;
    let without_calls = stats::latency(&without).context("no round")?;
    Ok(PerCallFigures {
        calls_per_run: CALLS,
        rounds: with.len(),
        per_call_ms: per_call_ms(&with_calls, &without_calls, CALLS),
        with_calls,
        without_calls,
        direct: stats::latency(&one).context("no round")?,
    })
}

/// One `run_python` of `code`, which must make `calls` calls and print the sum.
async fn run(mcp: &Peer<RoleClient>, code: &str, calls: usize) -> anyhow::Result<Duration> {
    let (took, result) = run_python(mcp, code).await?;
    let stdout = ToolCallCheck { calls, tool: TOOL }.check(&result)?;
    ensure!(
        stdout == expected_stdout(),
        "the program printed {stdout:?}"
    );
    Ok(took)
}

/// [`CALLS`] `get_issue` calls, back to back, each timed; each must answer its issue.
pub(super) async fn one_by_one(tracker: &Peer<RoleClient>) -> anyhow::Result<Vec<Duration>> {
    let mut took = Vec::with_capacity(CALLS);
    for id in 1..=CALLS as u64 {
        let mut arguments = JsonObject::new();
        arguments.insert("id".into(), id.into());
        let (call, result) = call_directly(tracker, TOOL, arguments).await?;
        let issue = json_of(&text_of(&result)?)?;
        ensure!(issue["id"] == id, "get_issue {id} answered {issue}");
        took.push(call);
    }
    Ok(took)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latency(p50_ms: f64) -> Latency {
        Latency {
            runs: 20,
            p50_ms,
            p95_ms: p50_ms,
            p99_ms: p50_ms,
            mean_ms: p50_ms,
        }
    }

    #[test]
    fn both_programs_have_the_same_loop_and_print_the_same_line() {
        let with = program(true);
        let without = program(false);
        assert_eq!(
            with,
            "import tools\ngot = []\nfor n in range(1, 21):\n    \
             got.append(tools.tracker.get_issue(id=n))\n\
             print(len(got), sum(issue[\"id\"] for issue in got))\n"
        );
        assert_eq!(
            without.replace("{\"id\": n}", "tools.tracker.get_issue(id=n)"),
            with
        );
        assert_eq!(expected_stdout(), "20 210\n");
    }

    #[test]
    fn one_call_costs_the_difference_of_the_medians_over_the_calls() {
        let (with, without) = (latency(150.0), latency(50.0));
        assert_eq!(per_call_ms(&with, &without, 20), 5.0);
        assert_eq!(per_call_ms(&without, &with, 20), -5.0, "noise shows as is");
        assert_eq!(per_call_ms(&with, &without, 0), 100.0);
    }
}
