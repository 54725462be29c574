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
use crate::tools::{self, ArgsError};

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
    oom_killed: bool,
    stdout_truncated: bool,
    stderr_truncated: bool,
    outputs: Vec<OutputSummary>,
    outputs_truncated: bool,
    /// Only for a run in a sandbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    state_lost: Option<bool>,
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
struct Shown {
    text: String,
    omitted: usize,
    omitted_lines: usize,
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

fn head_and_tail(s: &str, budget: usize) -> Shown {
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

/// `n` and the noun, in the plural (with an "s" or, after "x", "es") unless `n` is 1.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        let s = if noun.ends_with('x') { "es" } else { "s" };
        format!("{n} {noun}{s}")
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
    let failed =
        failed_is_error && (response.exit_code != 0 || response.timed_out || response.oom_killed);
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
        oom_killed: response.oom_killed,
        stdout_truncated: response.stdout_truncated,
        stderr_truncated: response.stderr_truncated,
        outputs: outputs::summaries(&response.outputs),
        outputs_truncated: response.outputs_truncated,
        state_lost: match place {
            RunIn::Sandbox => Some(response.state_lost.unwrap_or(false)),
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
    if report.state_lost == Some(true) {
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
                tools::bytes(limits.output_cap_bytes)
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

fn section(name: &str, text: &str, omitted: usize, omitted_lines: usize) -> String {
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
mod tests {
    use super::*;

    use base64::Engine;
    use sandbox_protocol::api::OutputFile;

    fn from_run(
        response: RunResponse,
        timeout_ms: u64,
        limits: &Limits,
        failed_is_error: bool,
    ) -> CallToolResult {
        super::from_run(
            response,
            timeout_ms,
            limits,
            failed_is_error,
            RunIn::OneShot,
        )
    }

    fn response(stdout: &str, exit_code: i32) -> RunResponse {
        RunResponse {
            stdout: stdout.into(),
            stderr: String::new(),
            exit_code,
            duration_ms: 12,
            timed_out: false,
            oom_killed: false,
            stdout_truncated: false,
            stderr_truncated: false,
            outputs: Vec::new(),
            outputs_truncated: false,
            state_lost: None,
        }
    }

    fn text_of(result: &CallToolResult) -> String {
        result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect()
    }

    #[test]
    fn short_output_is_kept_whole() {
        assert_eq!(
            head_and_tail("abc", 10),
            Shown {
                text: "abc".into(),
                omitted: 0,
                omitted_lines: 0,
            }
        );
    }

    #[test]
    fn long_output_keeps_head_and_tail_on_char_boundaries() {
        let s = "é".repeat(1000); // 2000 bytes
        let shown = head_and_tail(&s, 101);
        assert!(shown.text.starts_with(&"é".repeat(25)));
        assert!(shown.text.ends_with(&"é".repeat(25)));
        assert_eq!(shown.omitted, 2000 - 50 - 50);
        assert!(shown
            .text
            .contains("[... 1 line and 1900 bytes omitted ...]"));
    }

    #[test]
    fn long_output_is_cut_at_line_boundaries() {
        let s: String = (0..100_000).map(|i| format!("{i}\n")).collect();
        let shown = head_and_tail(&s, 1000);
        let (head, rest) = shown.text.split_once("[... ").unwrap();
        let (marker, tail) = rest.split_once(" ...]\n").unwrap();
        // Whole lines only, at both ends.
        assert!(head.ends_with('\n'));
        assert!(head.lines().enumerate().all(|(i, l)| l == i.to_string()));
        let first_tail: usize = tail.lines().next().unwrap().parse().unwrap();
        assert!(tail
            .lines()
            .enumerate()
            .all(|(i, l)| l == (first_tail + i).to_string()));
        assert!(tail.ends_with("99999\n"));
        let kept_head = head.lines().count();
        let omitted_lines = first_tail - kept_head;
        assert_eq!(shown.omitted_lines, omitted_lines);
        assert_eq!(shown.omitted, s.len() - head.len() - tail.len());
        assert_eq!(
            marker,
            format!("{omitted_lines} lines and {} bytes omitted", shown.omitted)
        );
        assert!(shown.text.len() <= 1000 + 64);
    }

    #[test]
    fn one_long_line_is_cut_inside_it() {
        let s = format!("start\n{}\nend", "x".repeat(5000));
        let shown = head_and_tail(&s, 100);
        assert!(shown.text.starts_with("start\n[... "));
        assert!(shown.text.ends_with("\nend"));
        assert_eq!(shown.omitted_lines, 1);
        assert!(shown.text.contains("1 line and 5001 bytes omitted"));
    }

    #[test]
    fn a_program_that_ran_is_a_result_whatever_its_exit() {
        let ok = from_run(response("1\n", 0), 100, &Limits::default(), false);
        assert_eq!(ok.is_error, Some(false));
        assert!(text_of(&ok).contains("exit code: 0"));
        assert!(text_of(&ok).contains("--- stdout ---\n1\n--- end of stdout ---"));
        let failed = from_run(response("", 3), 100, &Limits::default(), false);
        assert_eq!(failed.is_error, Some(false));
        assert!(text_of(&failed).contains("exit code: 3"));
        let structured = failed.structured_content.unwrap();
        assert_eq!(structured["exitCode"], 3);
        assert!(structured["error"].is_null());
    }

    #[test]
    fn the_operator_may_have_a_failed_run_set_is_error() {
        let failed = from_run(response("", 3), 100, &Limits::default(), true);
        assert_eq!(failed.is_error, Some(true));
        let ok = from_run(response("1\n", 0), 100, &Limits::default(), true);
        assert_eq!(ok.is_error, Some(false));
    }

    #[test]
    fn timeouts_and_out_of_memory_are_stated() {
        let mut timed_out = response("", 137);
        timed_out.timed_out = true;
        let result = from_run(timed_out, 1000, &Limits::default(), false);
        assert_eq!(result.is_error, Some(false));
        assert!(text_of(&result).contains("1000 ms timeout"));
        let mut oom = response("", 137);
        oom.oom_killed = true;
        assert!(text_of(&from_run(oom, 1000, &Limits::default(), false)).contains("out of memory"));
    }

    #[test]
    fn a_flood_is_cut_for_the_model() {
        let result = from_run(
            response(&"x".repeat(1024 * 1024), 0),
            100,
            &Limits::default(),
            false,
        );
        let text = text_of(&result);
        assert!(text.len() < STDOUT_BUDGET + 1024);
        assert!(text.contains("bytes omitted"));
        let structured = result.structured_content.unwrap();
        assert_eq!(
            structured["stdoutOmittedBytes"],
            1024 * 1024 - STDOUT_BUDGET
        );
    }

    #[test]
    fn runner_errors_say_what_happened() {
        let result = from_runner_error(&RunnerError::NotConfigured);
        assert_eq!(result.is_error, Some(true));
        assert!(text_of(&result).contains("SANDBOX_RUNNER_URL"));
        let structured = result.structured_content.unwrap();
        assert_eq!(structured["error"]["code"], "not_configured");
        assert_eq!(structured["error"]["retryable"], false);
        assert!(structured["exitCode"].is_null());
    }

    #[test]
    fn outputs_follow_the_unchanged_text_and_are_listed() {
        let mut with_outputs = response("1\n", 0);
        let png = b"\x89PNG\r\n\x1a\n....";
        with_outputs.outputs = vec![
            OutputFile {
                path: "plot.png".into(),
                size: png.len() as u64,
                mime_type: "image/png".into(),
                data: Some(base64::engine::general_purpose::STANDARD.encode(png)),
            },
            OutputFile {
                path: "big.csv".into(),
                size: 30 << 20,
                mime_type: "text/csv".into(),
                data: None,
            },
        ];
        let plain = from_run(response("1\n", 0), 100, &Limits::default(), false);
        let result = from_run(with_outputs.clone(), 100, &Limits::default(), false);
        assert_eq!(
            result.content[0], plain.content[0],
            "the run's text is unchanged"
        );
        assert_eq!(result.content.len(), 3, "{:?}", result.content);
        assert!(text_of(&result).contains("outputs/big.csv"));
        assert_eq!(
            result.content[2].as_image().map(|i| i.mime_type.as_str()),
            Some("image/png")
        );
        let structured = result.structured_content.unwrap();
        assert_eq!(
            structured["outputs"],
            serde_json::json!([
                {"path": "plot.png", "size": png.len(), "mimeType": "image/png"},
                {"path": "big.csv", "size": 30 << 20, "mimeType": "text/csv"},
            ])
        );
        assert_eq!(structured["outputsTruncated"], false);
        assert!(
            structured.get("stateLost").is_none(),
            "one-shot runs have none"
        );
        let in_sandbox =
            super::from_run(with_outputs, 100, &Limits::default(), false, RunIn::Sandbox);
        assert!(text_of(&in_sandbox).contains("download_file"));
        assert_eq!(in_sandbox.structured_content.unwrap()["stateLost"], false);
    }

    #[test]
    fn a_lost_state_is_said() {
        let mut lost = response("", 137);
        lost.timed_out = true;
        lost.state_lost = Some(true);
        let result = super::from_run(lost, 100, &Limits::default(), false, RunIn::Sandbox);
        let text = text_of(&result);
        assert!(
            text.contains("variables") && text.contains("files remain"),
            "{text}"
        );
        assert_eq!(result.structured_content.unwrap()["stateLost"], true);
        let mut kept = response("", 0);
        kept.state_lost = Some(false);
        let result = super::from_run(kept, 100, &Limits::default(), false, RunIn::Sandbox);
        assert!(!text_of(&result).contains("restarted"));
    }

    #[test]
    fn errors_list_no_outputs() {
        let structured = from_runner_error(&RunnerError::SandboxBusy)
            .structured_content
            .unwrap();
        assert_eq!(structured["outputs"], serde_json::json!([]));
        assert_eq!(structured["error"]["code"], "sandbox_busy");
        assert_eq!(structured["error"]["retryable"], true);
    }
}
