//! What a run tool's call returns: text a model reads well, and `structuredContent` for
//! programs; then the files the run wrote under `outputs/` ([`crate::outputs`]).
//!
//! Output is sized for a model's context: a long stream is cut to its first and last whole
//! lines with the number of lines and bytes left out, in the text and in the structured
//! result alike.

use rmcp::model::{CallToolResult, ContentBlock};
use sandbox_protocol::api::{Limits, RunResponse};
use serde::Serialize;

pub use crate::outputs::RunIn;
use crate::outputs::{self, OutputSummary};
use crate::runner_client::RunnerError;
use crate::tools::ArgsError;
use crate::upstreams::run_calls::ToolCallRecord;
use crate::wording::{self, plural};

/// Bytes of stdout shown at most (head plus tail).
pub const STDOUT_BUDGET: usize = 16 * 1024;
/// Bytes of stderr shown at most (head plus tail).
pub const STDERR_BUDGET: usize = 8 * 1024;

/// The `structuredContent` of every result; its schema is in [`crate::tools`].
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    stdout: String,
    stderr: String,
    stdout_omitted_bytes: usize,
    stderr_omitted_bytes: usize,
    stdout_omitted_lines: usize,
    stderr_omitted_lines: usize,
    exit_code: Option<i32>,
    duration_ms: Option<u64>,
    timed_out: bool,
    compile_error: bool,
    oom_killed: bool,
    stdout_truncated: bool,
    stderr_truncated: bool,
    outputs: Vec<OutputSummary>,
    outputs_truncated: bool,
    /// Only for a run in a sandbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    state_lost: Option<bool>,
    /// Only for a run in a sandbox: it was paused and this run woke it.
    #[serde(skip_serializing_if = "Option::is_none")]
    resumed: Option<bool>,
    error: Option<ReportError>,
}

/// Why nothing ran (or, for a sandbox tool, why the call failed).
#[derive(Debug, Serialize)]
pub(crate) struct ReportError {
    /// A stable code.
    pub(crate) code: &'static str,
    /// What happened and what to do.
    pub(crate) message: String,
    /// Whether the same call may succeed later.
    pub(crate) retryable: bool,
}

/// A string cut to at most `budget` bytes: its head, its tail, and how much is left out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Shown {
    /// The head, a marker and the tail; the whole string when it fits.
    pub(crate) text: String,
    /// Bytes left out.
    pub(crate) omitted: usize,
    /// Lines left out, wholly or in part.
    pub(crate) omitted_lines: usize,
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Where the head ends: after the last newline in `s[..limit]`, or inside a line (on a
/// character boundary) when that part has no newline.
fn head_end(s: &str, limit: usize) -> usize {
    let limit = floor_boundary(s, limit);
    match s[..limit].rfind('\n') {
        Some(newline) => newline + 1,
        None => limit,
    }
}

/// Where the tail starts: after the first newline in `s[from..]` (so it begins a line),
/// or inside a line when the tail has no newline but at its very end.
fn tail_start(s: &str, from: usize) -> usize {
    let from = ceil_boundary(s, from);
    match s[from..].find('\n') {
        Some(newline) if from + newline + 1 < s.len() => from + newline + 1,
        _ => from,
    }
}

/// `s` cut to at most `budget` bytes (and a marker): its first and last whole lines.
pub(crate) fn head_and_tail(s: &str, budget: usize) -> Shown {
    if s.len() <= budget {
        return Shown {
            text: s.to_owned(),
            omitted: 0,
            omitted_lines: 0,
        };
    }
    let head_end = head_end(s, budget / 2);
    let tail_start = tail_start(s, s.len() - budget / 2).max(head_end);
    let left_out = &s[head_end..tail_start];
    let omitted = left_out.len();
    // Lines wholly or partly left out: the newlines cut away, plus a line cut at either
    // end that has no newline of its own in the gap.
    let omitted_lines = left_out.matches('\n').count() + usize::from(!left_out.ends_with('\n'));
    let head = &s[..head_end];
    let before = if head.is_empty() || head.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    Shown {
        text: format!(
            "{head}{before}[... {} and {omitted} bytes omitted ...]\n{}",
            plural(omitted_lines, "line"),
            &s[tail_start..]
        ),
        omitted,
        omitted_lines,
    }
}

/// A result from the program's run (which had `timeout_ms`, on a runner with `limits`, in
/// `place`). A program that ran is a result whatever its exit: frameworks treat `isError`
/// as a broken call (pydantic-ai, for one, retries it and ends the agent after two), and a
/// failing test is a fact for the model to read. With `failed_is_error` (an operator's
/// choice) a failed run sets `isError` as well.
pub fn from_run(
    response: RunResponse,
    timeout_ms: u64,
    limits: &Limits,
    failed_is_error: bool,
    place: RunIn,
) -> CallToolResult {
    let stdout = head_and_tail(&response.stdout, STDOUT_BUDGET);
    let stderr = head_and_tail(&response.stderr, STDERR_BUDGET);
    let failed = failed_is_error
        && (response.exit_code != 0
            || response.timed_out
            || response.oom_killed
            || response.compile_error);
    let report = RunReport {
        stdout: stdout.text,
        stderr: stderr.text,
        stdout_omitted_bytes: stdout.omitted,
        stderr_omitted_bytes: stderr.omitted,
        stdout_omitted_lines: stdout.omitted_lines,
        stderr_omitted_lines: stderr.omitted_lines,
        exit_code: Some(response.exit_code),
        duration_ms: Some(response.duration_ms),
        timed_out: response.timed_out,
        compile_error: response.compile_error,
        oom_killed: response.oom_killed,
        stdout_truncated: response.stdout_truncated,
        stderr_truncated: response.stderr_truncated,
        outputs: outputs::summaries(&response.outputs),
        outputs_truncated: response.outputs_truncated,
        state_lost: match place {
            RunIn::Sandbox => Some(response.state_lost.unwrap_or(false)),
            RunIn::OneShot => None,
        },
        resumed: match place {
            RunIn::Sandbox => Some(response.resumed.unwrap_or(false)),
            RunIn::OneShot => None,
        },
        error: None,
    };
    let mut result = finish(run_text(&report, timeout_ms, limits), &report, failed);
    result.content.extend(outputs::blocks(
        &response.outputs,
        response.outputs_truncated,
        place,
    ));
    result
}

/// Adds the calls a run's program made of its `tools` module to the run's result: its
/// `structuredContent` gains `toolCalls` (in call order; empty when it made none), and
/// its text a line when it made some.
pub fn with_tool_calls(result: &mut CallToolResult, calls: &[ToolCallRecord]) {
    if let Some(serde_json::Value::Object(structured)) = &mut result.structured_content {
        // Records hold only strings, numbers and booleans: they always serialize.
        let calls = serde_json::to_value(calls).unwrap_or_default();
        structured.insert("toolCalls".into(), calls);
    }
    if calls.is_empty() {
        return;
    }
    let failed = calls.iter().filter(|c| c.is_error).count();
    let line = format!(
        "\nThe program made {} ({failed} failed): see toolCalls.",
        plural(calls.len(), "tool call")
    );
    if let Some(ContentBlock::Text(text)) = result.content.first_mut() {
        text.text.push_str(&line);
    }
}

/// A result for a call whose program did not run.
pub fn from_runner_error(error: &RunnerError) -> CallToolResult {
    failure(error.code(), error.to_string(), error.retryable())
}

/// A result for a call with unusable arguments.
pub fn from_args_error(error: &ArgsError) -> CallToolResult {
    failure("invalid_arguments", error.to_string(), false)
}

/// A result for a call refused because its session has `max` calls in flight already.
pub fn from_busy_session(max: usize) -> CallToolResult {
    let message = format!(
        "this session has as many tool calls in flight as the server allows ({max}, \
         MCP_MAX_CALLS_PER_SESSION); wait for one to finish, then retry"
    );
    failure("session_busy", message, true)
}

/// A result for a call whose program did not run because of `code`.
pub(crate) fn failure(code: &'static str, message: String, retryable: bool) -> CallToolResult {
    let report = RunReport {
        error: Some(ReportError {
            code,
            message: message.clone(),
            retryable,
        }),
        ..RunReport::default()
    };
    finish(
        format!("The sandbox did not run the program: {message}"),
        &report,
        true,
    )
}

fn finish(text: String, report: &RunReport, is_error: bool) -> CallToolResult {
    let mut result = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    // RunReport holds only strings, numbers and booleans: it always serializes.
    result.structured_content = serde_json::to_value(report).ok();
    result
}

fn run_text(report: &RunReport, timeout_ms: u64, limits: &Limits) -> String {
    let mut lines = Vec::new();
    let exit = report.exit_code.unwrap_or_default();
    let duration = report.duration_ms.unwrap_or_default();
    lines.push(format!("exit code: {exit} (ran {duration} ms)"));
    if report.compile_error {
        lines.push(
            "The program did not compile: the output below is the compiler's, and the \
             program never ran."
                .to_owned(),
        );
    }
    if report.timed_out {
        lines.push(format!(
            "The program timed out: it ran into its {timeout_ms} ms timeout and was killed."
        ));
    }
    if report.oom_killed {
        lines.push(format!(
            "The program ran out of memory (OOM, {} MB) and was killed.",
            limits.memory_mb
        ));
    }
    if report.resumed == Some(true) {
        lines.push(woken_text(report.state_lost == Some(true)).to_owned());
    } else if report.state_lost == Some(true) {
        lines.push(
            "The sandbox's interpreter was restarted: the variables, functions and imports of \
             earlier calls are lost (define them again); its files remain."
                .to_owned(),
        );
    }
    for (name, truncated) in [
        ("stdout", report.stdout_truncated),
        ("stderr", report.stderr_truncated),
    ] {
        if truncated {
            lines.push(format!(
                "{name} was truncated: the program wrote more than {} to it and was stopped there.",
                wording::bytes(limits.output_cap_bytes)
            ));
        }
    }
    lines.push(section(
        "stdout",
        &report.stdout,
        report.stdout_omitted_bytes,
        report.stdout_omitted_lines,
    ));
    lines.push(section(
        "stderr",
        &report.stderr,
        report.stderr_omitted_bytes,
        report.stderr_omitted_lines,
    ));
    lines.join("\n")
}

/// What a run that woke its paused sandbox says, by whether the sandbox's variables and
/// processes were lost.
fn woken_text(state_lost: bool) -> &'static str {
    if state_lost {
        "The sandbox was paused, and this call woke it: its files are all there, but the \
         variables, functions and imports of earlier calls, and its background processes, \
         are lost (define or start them again)."
    } else {
        "The sandbox was paused, and this call woke it with its files, variables and \
         processes as they were."
    }
}

/// A stream as the text shows it: between `--- name ---` lines, with what was cut said.
pub(crate) fn section(name: &str, text: &str, omitted: usize, omitted_lines: usize) -> String {
    if text.is_empty() {
        return format!("--- {name}: (empty) ---");
    }
    let note = if omitted > 0 {
        format!(
            " (cut for length: {} and {omitted} bytes from the middle left out)",
            plural(omitted_lines, "line")
        )
    } else {
        String::new()
    };
    let newline = if text.ends_with('\n') { "" } else { "\n" };
    format!("--- {name}{note} ---\n{text}{newline}--- end of {name} ---")
}

#[cfg(test)]
mod tests;
