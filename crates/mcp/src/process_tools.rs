//! The process tools: `start_process`, `process_output`, `write_stdin`, `kill_process` and
//! `list_processes`. Their definitions (schemas, descriptions, annotations); the parsing of
//! a call's arguments is in [`crate::process_args`], their results in
//! [`crate::process_report`], the calls themselves in `crate::server::processes`.
//!
//! A process is a command started in a sandbox that keeps running between calls (the
//! runner's `/sessions/{id}/processes`): for servers, long jobs and anything to watch or
//! feed, where a `run_*` call answers only once its program has ended.

use std::sync::Arc;

use rmcp::model::JsonObject;
use sandbox_protocol::api::Limits;
use sandbox_protocol::process::ProcessSignal;
use serde_json::{json, Map, Value};

use crate::runner_client::MAX_OUTPUT_WAIT;
use crate::sandbox_call::SandboxCall;
use crate::sandbox_tools::HOME;
use crate::schema::{nullable, object};
use crate::wording;

/// One of the process tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessTool {
    /// `start_process`.
    Start,
    /// `process_output`.
    Output,
    /// `write_stdin`.
    Stdin,
    /// `kill_process`.
    Kill,
    /// `list_processes`.
    List,
}

impl SandboxCall for ProcessTool {
    fn name(self) -> &'static str {
        match self {
            ProcessTool::Start => "start_process",
            ProcessTool::Output => "process_output",
            ProcessTool::Stdin => "write_stdin",
            ProcessTool::Kill => "kill_process",
            ProcessTool::List => "list_processes",
        }
    }

    fn failed_fields(self) -> Map<String, Value> {
        let fields = match self {
            ProcessTool::Start => json!({"pid": null, "command": null, "startedAt": null}),
            ProcessTool::Output => json!({
                "stdout": "", "stderr": "",
                "stdoutOmittedBytes": 0, "stderrOmittedBytes": 0,
                "stdoutOmittedLines": 0, "stderrOmittedLines": 0,
                "stdoutDropped": 0, "stderrDropped": 0,
                "running": null, "exitCode": null, "cursor": null,
            }),
            ProcessTool::Stdin => json!({"written": null, "closed": false}),
            ProcessTool::Kill => json!({"signal": null, "sent": false}),
            ProcessTool::List => json!({"processes": []}),
        };
        match fields {
            Value::Object(map) => map,
            _ => unreachable!("written as objects"),
        }
    }

    fn title(self) -> &'static str {
        match self {
            ProcessTool::Start => "Start a process in a sandbox",
            ProcessTool::Output => "Read a process's output",
            ProcessTool::Stdin => "Write to a process's input",
            ProcessTool::Kill => "Send a signal to a process",
            ProcessTool::List => "List a sandbox's processes",
        }
    }

    fn description(self, limits: &Limits) -> String {
        let wait = MAX_OUTPUT_WAIT.as_millis();
        match self {
            ProcessTool::Start => format!(
                "Starts a command in a sandbox from create_sandbox and answers at once with \
                 its pid, without waiting for it to end. Use a process rather than run_* for \
                 a server (python3 -m http.server 8000, npm run dev), a long job (a build, \
                 a test watcher, a training run), or anything to watch while it runs or to \
                 feed input; use run_* for a program that ends quickly and whose output you \
                 want at once. The command runs under bash -c in {HOME} (or cwd, relative to \
                 it), keeps running between calls (run_* calls with the same sandboxId reach \
                 it: a server on localhost, its files), and stops when the sandbox ends. \
                 Read its output with process_output, write to its input with write_stdin, \
                 stop it with kill_process; list_processes shows every process. It shares \
                 the sandbox's {resources} with the sandbox's other programs.",
                resources = wording::sandbox_resources(limits),
            ),
            ProcessTool::Output => format!(
                "Reads a process's output (stdout and stderr) since the last read: pass the \
                 cursor of the previous answer, or omit it to read from the start. waitMs \
                 (at most {wait}) waits up to that long when there is no new output yet, \
                 until some comes or the process ends: use it to watch a process rather than \
                 calling again and again. The answer says whether the process still runs, \
                 its exitCode once it has ended (128 + the signal's number when a signal \
                 ended it: 143 after TERM, 137 after KILL), and the cursor to pass next. \
                 Long output is shown as its first and last lines, as run_* output is. Only \
                 the newest part of each stream is kept: output not read in time is \
                 dropped, and the answer says how many bytes."
            ),
            ProcessTool::Stdin => "Writes data to a process's standard input, as if typed \
                 (end a line with \\n). eof: true closes its input after the data, so a \
                 program that reads to the end (cat, sort, a REPL) finishes. Read what it \
                 answers with process_output."
                .to_owned(),
            ProcessTool::Kill => format!(
                "Sends a signal to a process and the processes it started: TERM (the \
                 default) asks it to stop, KILL stops it at once, INT is Ctrl-C; HUP, QUIT, \
                 USR1 and USR2 do what the program makes of them. Signals: {names}. It \
                 answers once the signal is sent: process_output or list_processes shows \
                 that it ended (exitCode 143 after TERM, 137 after KILL).",
                names = signal_names(),
            ),
            ProcessTool::List => "Lists the processes start_process started in a sandbox, \
                 running and ended (the most recent ended ones), oldest first: pid, command, \
                 whether it runs, its exitCode, when it started and ended."
                .to_owned(),
        }
    }

    fn input_schema(self) -> Arc<JsonObject> {
        let sandbox_id = json!({
            "type": "string",
            "description": "The sandboxId create_sandbox returned.",
        });
        let pid = json!({
            "type": "integer",
            "minimum": 1,
            "description": "The pid start_process returned.",
        });
        object(match self {
            ProcessTool::Start => json!({
                "type": "object",
                "properties": {
                    "sandboxId": sandbox_id,
                    "command": {
                        "type": "string",
                        "description": "The command line, run under bash -c (pipes, &&, redirections and variables work).",
                    },
                    "cwd": {
                        "type": "string",
                        "description": format!("The folder it runs in, relative to the home folder {HOME} (the home folder when absent)."),
                    },
                },
                "required": ["sandboxId", "command"],
            }),
            ProcessTool::Output => json!({
                "type": "object",
                "properties": {
                    "sandboxId": sandbox_id,
                    "pid": pid,
                    "cursor": {
                        "type": "string",
                        "description": "The cursor of the previous process_output answer for this process, as it is; omit it to read from the start.",
                    },
                    "waitMs": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": MAX_OUTPUT_WAIT.as_millis() as u64,
                        "description": "How long to wait for new output when there is none yet, in milliseconds (0, the default: answer at once).",
                    },
                },
                "required": ["sandboxId", "pid"],
            }),
            ProcessTool::Stdin => json!({
                "type": "object",
                "properties": {
                    "sandboxId": sandbox_id,
                    "pid": pid,
                    "data": {
                        "type": "string",
                        "description": "The text to write (end a line with \\n).",
                    },
                    "eof": {
                        "type": "boolean",
                        "default": false,
                        "description": "Close the process's input after data (it reads end of file).",
                    },
                },
                "required": ["sandboxId", "pid", "data"],
            }),
            ProcessTool::Kill => json!({
                "type": "object",
                "properties": {
                    "sandboxId": sandbox_id,
                    "pid": pid,
                    "signal": {
                        "type": "string",
                        "enum": ProcessSignal::ALL.map(|s| s.name()),
                        "default": "TERM",
                        "description": "The signal: TERM (the default) to ask it to stop, KILL to stop it at once, INT for Ctrl-C.",
                    },
                },
                "required": ["sandboxId", "pid"],
            }),
            ProcessTool::List => json!({
                "type": "object",
                "properties": { "sandboxId": sandbox_id },
                "required": ["sandboxId"],
            }),
        })
    }

    fn output_properties(self) -> Value {
        let text = |d: &str| nullable("string", d);
        let count = |d: &str| json!({ "type": "integer", "minimum": 0, "description": d });
        let exit_code = nullable(
            "integer",
            "Its exit code, or 128 + the number of the signal that ended it; null while it runs.",
        );
        match self {
            ProcessTool::Start => json!({
                "pid": nullable("integer", "The process's id in the sandbox: pass it as pid to the other process tools."),
                "command": text("Its command line."),
                "startedAt": text("When it started (RFC 3339, UTC)."),
            }),
            ProcessTool::Output => json!({
                "stdout": { "type": "string", "description": "Standard output since the cursor, cut to its first and last lines when long." },
                "stderr": { "type": "string", "description": "Standard error since the cursor, cut to its first and last lines when long." },
                "stdoutOmittedBytes": count("Bytes of stdout left out of `stdout` (from its middle)."),
                "stderrOmittedBytes": count("Bytes of stderr left out of `stderr` (from its middle)."),
                "stdoutOmittedLines": count("Lines of stdout left out of `stdout` (wholly or in part)."),
                "stderrOmittedLines": count("Lines of stderr left out of `stderr` (wholly or in part)."),
                "stdoutDropped": count("Bytes of stdout after the cursor that were no longer kept when read (only the newest part of each stream is kept)."),
                "stderrDropped": count("Bytes of stderr after the cursor that were no longer kept when read."),
                "running": nullable("boolean", "The process has not ended."),
                "exitCode": exit_code,
                "cursor": text("Pass it as cursor to the next process_output call for this process, to read what comes after."),
            }),
            ProcessTool::Stdin => json!({
                "written": nullable("integer", "Bytes written."),
                "closed": { "type": "boolean", "description": "The process's input was closed after them." },
            }),
            ProcessTool::Kill => json!({
                "signal": text("The signal sent."),
                "sent": { "type": "boolean", "description": "The signal was sent." },
            }),
            ProcessTool::List => json!({
                "processes": {
                    "type": "array",
                    "description": "The sandbox's processes, oldest first.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "pid": { "type": "integer", "description": "Its id in the sandbox." },
                            "command": { "type": "string", "description": "Its command line." },
                            "running": { "type": "boolean", "description": "It has not ended." },
                            "exitCode": exit_code,
                            "startedAt": { "type": "string", "description": "When it started (RFC 3339, UTC)." },
                            "endedAt": text("When it ended; null while it runs."),
                        },
                        "required": ["pid", "command", "running", "exitCode", "startedAt", "endedAt"],
                    },
                },
            }),
        }
    }

    fn hints(self) -> (bool, bool, bool) {
        match self {
            ProcessTool::Start | ProcessTool::Stdin => (false, false, false),
            ProcessTool::Output | ProcessTool::List => (true, false, true),
            ProcessTool::Kill => (false, true, true),
        }
    }

    fn says_resources(self) -> bool {
        self == ProcessTool::Start
    }
}

impl ProcessTool {
    /// Every process tool, in the order `tools/list` gives them.
    pub const ALL: [ProcessTool; 5] = [
        ProcessTool::Start,
        ProcessTool::Output,
        ProcessTool::Stdin,
        ProcessTool::Kill,
        ProcessTool::List,
    ];

    /// The tool a name stands for.
    pub fn of(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// "INT, TERM, KILL, HUP, QUIT, USR1 or USR2".
pub fn signal_names() -> String {
    let names: Vec<&str> = ProcessSignal::ALL.iter().map(|s| s.name()).collect();
    match names.split_last() {
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_say_when_to_use_a_process() {
        let limits = Limits::default();
        let start = ProcessTool::Start.definition(&limits);
        let text = start.description.as_deref().unwrap_or_default();
        for needle in [
            "server",
            "long job",
            "watch",
            "feed",
            "run_*",
            "process_output",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
        for tool in ProcessTool::ALL {
            assert_eq!(ProcessTool::of(tool.name()), Some(tool));
            let input = Value::Object((*tool.input_schema()).clone());
            assert_eq!(input["required"][0], "sandboxId", "{tool:?}");
        }
        let output = Value::Object((*ProcessTool::Output.input_schema()).clone());
        assert_eq!(output["properties"]["waitMs"]["maximum"], 30_000);
        let kill = Value::Object((*ProcessTool::Kill.input_schema()).clone());
        assert_eq!(
            kill["properties"]["signal"]["enum"],
            json!(["INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2"])
        );
    }
}
