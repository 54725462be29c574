//! The reports' text and structured content for each kind of outcome.

use super::*;
use crate::test_support::text_of;

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
        compile_error: false,
        oom_killed: false,
        stdout_truncated: false,
        stderr_truncated: false,
        outputs: Vec::new(),
        outputs_truncated: false,
        state_lost: None,
        resumed: None,
        egress: None,
    }
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
    let in_sandbox = super::from_run(with_outputs, 100, &Limits::default(), false, RunIn::Sandbox);
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
fn a_wake_is_said_with_what_it_lost() {
    let mut woken = response("", 0);
    woken.resumed = Some(true);
    woken.state_lost = Some(true);
    let result = super::from_run(woken, 100, &Limits::default(), false, RunIn::Sandbox);
    let text = text_of(&result);
    assert!(
        text.contains("was paused, and this call woke it") && text.contains("variables"),
        "{text}"
    );
    assert!(text.contains("files are all there"), "{text}");
    assert!(!text.contains("restarted"), "one line, not two: {text}");
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["resumed"], true);
    assert_eq!(structured["stateLost"], true);
    // A backend that keeps memory (vm) wakes with everything.
    let mut whole = response("", 0);
    whole.resumed = Some(true);
    whole.state_lost = Some(false);
    let result = super::from_run(whole, 100, &Limits::default(), false, RunIn::Sandbox);
    assert!(
        text_of(&result).contains("variables and processes as they were"),
        "{}",
        text_of(&result)
    );
    // Not woken: nothing said; a one-shot run has no such field.
    let plain = super::from_run(
        response("", 0),
        100,
        &Limits::default(),
        false,
        RunIn::Sandbox,
    );
    assert!(!text_of(&plain).contains("paused"));
    assert_eq!(plain.structured_content.unwrap()["resumed"], false);
    let one_shot = super::from_run(
        response("", 0),
        100,
        &Limits::default(),
        false,
        RunIn::OneShot,
    );
    assert!(one_shot
        .structured_content
        .unwrap()
        .get("resumed")
        .is_none());
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
