//! What the process tools return: text for the model and `structuredContent` in the shape
//! of each tool's output schema ([`crate::process_tools`]), as the sandbox tools' results
//! are made ([`crate::sandbox_report::result`]). A process's output is cut for the
//! model's context as a run's is ([`crate::report::head_and_tail`]), and the text says
//! what to pass next.

use rmcp::model::{CallToolResult, ContentBlock};
use sandbox_protocol::process::{
    ProcessInfo, ProcessList, ProcessOutput, ProcessSignal, ProcessStarted,
};
use serde_json::json;

use crate::process_args::Cursor;
use crate::process_tools::ProcessTool;
use crate::report::{head_and_tail, section, STDERR_BUDGET, STDOUT_BUDGET};
use crate::runner_client::{Offsets, MAX_OUTPUT_WAIT};
use crate::sandbox_report::result;
use crate::wording::plural;

/// The most characters of a command line a text shows.
const COMMAND_SHOWN: usize = 200;

fn text(text: String) -> Vec<ContentBlock> {
    vec![ContentBlock::text(text)]
}

/// `start_process`'s answer.
pub fn started(started: &ProcessStarted) -> CallToolResult {
    let pid = started.pid;
    let said = format!(
        "Started process {pid} ({command}) at {at}; it runs in the background. Read its \
         output with process_output (pid {pid}; waitMs to wait for some), write to its \
         input with write_stdin, stop it with kill_process.",
        command = shown_command(&started.command),
        at = started.started_at,
    );
    result(
        ProcessTool::Start,
        text(said),
        json!({ "pid": pid, "command": started.command, "startedAt": started.started_at }),
        None,
    )
}

/// `process_output`'s answer for process `pid`: what came since the cursor, cut, and the
/// cursor to pass next.
pub fn output(pid: i32, output: &ProcessOutput) -> CallToolResult {
    let stdout = head_and_tail(&output.stdout, STDOUT_BUDGET);
    let stderr = head_and_tail(&output.stderr, STDERR_BUDGET);
    let cursor = Cursor {
        pid,
        offsets: Offsets {
            stdout: output.stdout_to,
            stderr: output.stderr_to,
        },
    }
    .encode();
    let mut lines = vec![status(pid, output.running, output.exit_code)];
    for (name, dropped) in [
        ("stdout", output.stdout_dropped),
        ("stderr", output.stderr_dropped),
    ] {
        if dropped > 0 {
            lines.push(format!(
                "{dropped} bytes of {name} after the cursor were no longer kept and are lost \
                 (only the newest part of each stream is kept): read more often, with \
                 waitMs, to miss nothing."
            ));
        }
    }
    lines.push(section(
        "stdout",
        &stdout.text,
        stdout.omitted,
        stdout.omitted_lines,
    ));
    lines.push(section(
        "stderr",
        &stderr.text,
        stderr.omitted,
        stderr.omitted_lines,
    ));
    let nothing_new = output.stdout.is_empty() && output.stderr.is_empty();
    lines.push(if !output.running && nothing_new {
        "It has ended, and nothing new came since the cursor.".to_owned()
    } else {
        format!(
            "Next: call process_output with cursor \"{cursor}\" to read what comes after \
             this (waitMs, up to {} ms, waits for it).",
            MAX_OUTPUT_WAIT.as_millis()
        )
    });
    let fields = json!({
        "stdout": stdout.text,
        "stderr": stderr.text,
        "stdoutOmittedBytes": stdout.omitted,
        "stderrOmittedBytes": stderr.omitted,
        "stdoutOmittedLines": stdout.omitted_lines,
        "stderrOmittedLines": stderr.omitted_lines,
        "stdoutDropped": output.stdout_dropped,
        "stderrDropped": output.stderr_dropped,
        "running": output.running,
        "exitCode": output.exit_code,
        "cursor": cursor,
    });
    result(ProcessTool::Output, text(lines.join("\n")), fields, None)
}

/// "Process 7 is running." or how it ended.
fn status(pid: i32, running: bool, exit_code: Option<i32>) -> String {
    match (running, exit_code) {
        (true, _) => format!("Process {pid} is running."),
        (false, Some(code)) => format!("Process {pid} has ended: {}.", exit(code)),
        (false, None) => format!("Process {pid} has ended."),
    }
}

/// "exit code 143 (128 + 15: ended by signal TERM)".
fn exit(code: i32) -> String {
    let signal = code
        .checked_sub(128)
        .filter(|n| (1..=64).contains(n))
        .map(
            |n| match ProcessSignal::ALL.into_iter().find(|s| s.number() == n) {
                Some(signal) => format!(" (128 + {n}: ended by signal {})", signal.name()),
                None => format!(" (128 + {n}: ended by signal {n})"),
            },
        );
    format!("exit code {code}{}", signal.unwrap_or_default())
}

/// `write_stdin`'s answer.
pub fn written(pid: i32, written: usize, closed: bool) -> CallToolResult {
    let closing = if closed {
        " and closed its input (it reads end of file after them)"
    } else {
        ""
    };
    let said = format!(
        "Wrote {} to process {pid}{closing}. process_output shows what it answers.",
        plural(written, "byte")
    );
    result(
        ProcessTool::Stdin,
        text(said),
        json!({ "written": written, "closed": closed }),
        None,
    )
}

/// `kill_process`'s answer.
pub fn signalled(pid: i32, signal: ProcessSignal) -> CallToolResult {
    let name = signal.name();
    let said = format!(
        "Sent {name} to process {pid} (and the processes it started). process_output (with \
         waitMs) or list_processes shows whether it ended: exit code {} if {name} ended it.",
        128 + signal.number()
    );
    result(
        ProcessTool::Kill,
        text(said),
        json!({ "signal": name, "sent": true }),
        None,
    )
}

/// `list_processes`' answer.
pub fn listed(list: &ProcessList) -> CallToolResult {
    let running = list.processes.iter().filter(|p| p.running).count();
    let mut lines = vec![format!(
        "{} ({running} running){}",
        plural(list.processes.len(), "process"),
        if list.processes.is_empty() {
            ": start_process starts one."
        } else {
            ", oldest first:"
        }
    )];
    lines.extend(list.processes.iter().map(listed_line));
    let processes = serde_json::to_value(&list.processes).unwrap_or_else(|_| json!([]));
    result(
        ProcessTool::List,
        text(lines.join("\n")),
        json!({ "processes": processes }),
        None,
    )
}

fn listed_line(process: &ProcessInfo) -> String {
    let state = if process.running {
        format!("running since {}", process.started_at)
    } else {
        let at = process.ended_at.as_deref().unwrap_or("an unknown time");
        match process.exit_code {
            Some(code) => format!("ended at {at}, {}", exit(code)),
            None => format!("ended at {at}"),
        }
    };
    format!(
        "pid {}: {state}: {}",
        process.pid,
        shown_command(&process.command)
    )
}

/// A command line as a text shows it: cut after [`COMMAND_SHOWN`] characters.
fn shown_command(command: &str) -> String {
    let mut chars = command.chars();
    let shown: String = chars.by_ref().take(COMMAND_SHOWN).collect();
    if chars.next().is_some() {
        format!("`{shown}...`")
    } else {
        format!("`{shown}`")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner_client::RunnerError;
    use crate::sandbox_call::SandboxCall;
    use crate::sandbox_report;
    use crate::test_support::text_of;
    use serde_json::Value;

    fn answer(stdout: &str, running: bool, exit_code: Option<i32>) -> ProcessOutput {
        ProcessOutput {
            stdout: stdout.into(),
            stderr: String::new(),
            stdout_from: 100,
            stdout_to: 100 + stdout.len() as u64,
            stderr_from: 5,
            stderr_to: 5,
            stdout_dropped: 0,
            stderr_dropped: 0,
            running,
            exit_code,
        }
    }

    fn structured(result: &CallToolResult) -> Value {
        result.structured_content.clone().expect("structured")
    }

    #[test]
    fn output_gives_the_cursor_past_what_it_shows() {
        let result = output(7, &answer("tick 1\n", true, None));
        assert_eq!(result.is_error, Some(false));
        let fields = structured(&result);
        assert_eq!(fields["stdout"], "tick 1\n");
        assert_eq!(fields["running"], true);
        assert_eq!(fields["exitCode"], Value::Null);
        assert_eq!(fields["error"], Value::Null);
        let cursor = fields["cursor"].as_str().expect("a cursor");
        let read = Cursor::decode(cursor).expect("its own cursor");
        assert_eq!(read.pid, 7);
        assert_eq!(
            read.offsets,
            Offsets {
                stdout: 107,
                stderr: 5
            }
        );
        let text = text_of(&result);
        assert!(text.contains("Process 7 is running."), "{text}");
        assert!(text.contains(&format!("cursor \"{cursor}\"")), "{text}");
        assert!(text.contains("tick 1"), "{text}");
    }

    #[test]
    fn long_output_is_cut_as_a_runs_is_and_dropped_bytes_are_said() {
        let long: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        let mut read = answer(&long, true, None);
        read.stdout_dropped = 4096;
        let result = output(3, &read);
        let fields = structured(&result);
        let shown = fields["stdout"].as_str().unwrap();
        assert!(shown.len() <= STDOUT_BUDGET + 100, "{}", shown.len());
        assert!(shown.starts_with("line 0\n") && shown.ends_with("line 19999\n"));
        assert!(fields["stdoutOmittedBytes"].as_u64().unwrap() > 100_000);
        assert!(fields["stdoutOmittedLines"].as_u64().unwrap() > 10_000);
        assert_eq!(fields["stdoutDropped"], 4096);
        let cursor = Cursor::decode(fields["cursor"].as_str().unwrap()).unwrap();
        assert_eq!(
            cursor.offsets.stdout,
            100 + long.len() as u64,
            "past all of it"
        );
        let text = text_of(&result);
        assert!(text.contains("4096 bytes of stdout"), "{text}");
        assert!(text.contains("omitted"), "{text}");
    }

    #[test]
    fn an_ended_process_says_its_exit_and_when_nothing_is_left() {
        let killed = output(9, &answer("bye\n", false, Some(143)));
        let text = text_of(&killed);
        assert!(
            text.contains("exit code 143 (128 + 15: ended by signal TERM)"),
            "{text}"
        );
        assert!(text.contains("Next: call process_output"), "{text}");
        assert_eq!(structured(&killed)["exitCode"], 143);
        assert_eq!(structured(&killed)["running"], false);
        let drained = text_of(&output(9, &answer("", false, Some(0))));
        assert!(drained.contains("nothing new came"), "{drained}");
        assert!(drained.contains("exit code 0."), "{drained}");
        assert_eq!(exit(137), "exit code 137 (128 + 9: ended by signal KILL)");
        assert_eq!(exit(139), "exit code 139 (128 + 11: ended by signal 11)");
        assert_eq!(exit(1), "exit code 1");
    }

    #[test]
    fn results_keep_their_schemas_shape() {
        for tool in ProcessTool::ALL {
            let failed = sandbox_report::from_runner_error(tool, &RunnerError::ProcessNotFound);
            assert_eq!(failed.is_error, Some(true));
            let fields = structured(&failed);
            for field in tool.failed_fields().keys() {
                assert!(fields.get(field).is_some(), "{tool:?} {field}");
            }
            assert_eq!(fields["error"]["code"], "process_not_found");
            assert!(text_of(&failed).contains("list_processes"));
        }
        let started = started(&ProcessStarted {
            pid: 12,
            command: "python3 -m http.server 8000".into(),
            started_at: "2026-12-05T10:00:00.000Z".into(),
        });
        assert_eq!(structured(&started)["pid"], 12);
        assert!(text_of(&started).contains("process_output"));
        let written = written(12, 6, true);
        assert_eq!(structured(&written)["written"], 6);
        assert_eq!(structured(&written)["closed"], true);
        let sent = signalled(12, ProcessSignal::Kill);
        assert_eq!(structured(&sent)["signal"], "KILL");
        assert!(text_of(&sent).contains("exit code 137"));
    }

    #[test]
    fn a_listing_says_what_runs_and_how_the_others_ended() {
        let process = |pid, running, exit_code: Option<i32>| ProcessInfo {
            pid,
            command: "x".repeat(300),
            running,
            exit_code,
            started_at: "2026-12-05T10:00:00.000Z".into(),
            ended_at: exit_code.map(|_| "2026-12-05T10:01:00.000Z".into()),
        };
        let list = ProcessList {
            processes: vec![process(2, false, Some(137)), process(5, true, None)],
        };
        let result = listed(&list);
        let text = text_of(&result);
        assert!(text.starts_with("2 processes (1 running)"), "{text}");
        assert!(
            text.contains("pid 2: ended at 2026-12-05T10:01:00.000Z, exit code 137"),
            "{text}"
        );
        assert!(text.contains("pid 5: running since"), "{text}");
        assert!(
            text.contains(&format!("`{}...`", "x".repeat(COMMAND_SHOWN))),
            "{text}"
        );
        let fields = structured(&result);
        assert_eq!(fields["processes"][1]["pid"], 5);
        assert_eq!(fields["processes"][1]["endedAt"], Value::Null);
        assert_eq!(fields["processes"][0]["exitCode"], 137);
        let empty = text_of(&listed(&ProcessList { processes: vec![] }));
        assert!(empty.contains("start_process"), "{empty}");
    }
}
