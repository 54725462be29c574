//! The arguments of the process tools' calls ([`crate::process_tools`]): a command and
//! its working folder, a pid, `process_output`'s cursor and wait, stdin's data and a
//! signal's name.
//!
//! The cursor is opaque to the model: `process_output` answers with one and takes it
//! back. It holds the process it was written for and the byte offset reached in each
//! stream ([`Offsets`]), as the unpadded base64url of 21 bytes (a version, 1; the pid;
//! the two offsets; big-endian).

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rmcp::model::JsonObject;
use sandbox_protocol::process::ProcessSignal;
use serde_json::Value;

use crate::process_tools::signal_names;
use crate::runner_client::{Offsets, MAX_OUTPUT_WAIT};
use crate::sandbox_args::{parse_sandbox_id, sandbox_path, string};
use crate::sandbox_tools::HOME;
use crate::tools::{self, ArgsError};

/// The cursor format's version.
const CURSOR_VERSION: u8 = 1;

/// Where a process's output was read up to: the next read starts there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The process.
    pub pid: i32,
    /// The first byte of each stream not read yet.
    pub offsets: Offsets,
}

impl Cursor {
    /// The text the model passes back.
    pub fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(21);
        bytes.push(CURSOR_VERSION);
        bytes.extend_from_slice(&self.pid.to_be_bytes());
        bytes.extend_from_slice(&self.offsets.stdout.to_be_bytes());
        bytes.extend_from_slice(&self.offsets.stderr.to_be_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The cursor `text` stands for, if [`encode`](Self::encode) wrote it.
    pub fn decode(text: &str) -> Result<Cursor, ArgsError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(text.trim())
            .map_err(|_| ArgsError::BadCursor)?;
        let mut rest = bytes.as_slice();
        let version = take::<1>(&mut rest);
        let pid = take::<4>(&mut rest).map(i32::from_be_bytes);
        let stdout = take::<8>(&mut rest).map(u64::from_be_bytes);
        let stderr = take::<8>(&mut rest).map(u64::from_be_bytes);
        match (version, pid, stdout, stderr) {
            (Some([CURSOR_VERSION]), Some(pid), Some(stdout), Some(stderr))
                if pid > 0 && rest.is_empty() =>
            {
                Ok(Cursor {
                    pid,
                    offsets: Offsets { stdout, stderr },
                })
            }
            _ => Err(ArgsError::BadCursor),
        }
    }
}

/// The first `N` bytes of `bytes`, which then starts after them.
fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
    let (head, rest) = bytes.split_first_chunk::<N>()?;
    *bytes = rest;
    Some(*head)
}

/// The arguments of `start_process`.
#[derive(Debug, PartialEq, Eq)]
pub struct StartArgs {
    /// The sandbox.
    pub sandbox_id: String,
    /// The command line, for `bash -c`.
    pub command: String,
    /// Its working folder relative to the home folder; the home folder when `None`.
    pub cwd: Option<String>,
}

/// The arguments of `process_output`.
#[derive(Debug, PartialEq, Eq)]
pub struct OutputArgs {
    /// The sandbox.
    pub sandbox_id: String,
    /// The process.
    pub pid: i32,
    /// Where to read from: the cursor's offsets, or the start.
    pub from: Offsets,
    /// How long to wait for output when there is none yet.
    pub wait: Duration,
}

/// The arguments of `write_stdin`.
#[derive(Debug, PartialEq, Eq)]
pub struct StdinArgs {
    /// The sandbox.
    pub sandbox_id: String,
    /// The process.
    pub pid: i32,
    /// The bytes to write.
    pub data: Vec<u8>,
    /// Close its standard input after them.
    pub eof: bool,
}

/// The arguments of `kill_process`.
#[derive(Debug, PartialEq, Eq)]
pub struct KillArgs {
    /// The sandbox.
    pub sandbox_id: String,
    /// The process.
    pub pid: i32,
    /// The signal; TERM when the call gives none.
    pub signal: ProcessSignal,
}

/// Reads `start_process`'s arguments.
pub fn parse_start(arguments: Option<&JsonObject>) -> Result<StartArgs, ArgsError> {
    const COMMAND: &str = "the command line to run";
    let sandbox_id = parse_sandbox_id(arguments)?;
    let command = string(arguments, "command", COMMAND)?;
    if command.trim().is_empty() {
        return Err(ArgsError::Missing {
            field: "command",
            what: COMMAND,
        });
    }
    let cwd = match arguments.and_then(|a| a.get("cwd")) {
        None | Some(Value::Null) => None,
        Some(Value::String(cwd)) => working_folder(cwd)?,
        Some(other) => return Err(ArgsError::BadPath(other.to_string())),
    };
    Ok(StartArgs {
        sandbox_id,
        command: command.to_owned(),
        cwd,
    })
}

/// A working folder as the runner takes it: relative to the home folder, `None` for the
/// home folder itself.
fn working_folder(raw: &str) -> Result<Option<String>, ArgsError> {
    let trimmed = raw.trim().trim_end_matches('/');
    if ["", ".", "~", HOME].contains(&trimmed) {
        return Ok(None);
    }
    sandbox_path(raw).map(Some)
}

/// Reads the `pid` every process tool but `start_process` and `list_processes` needs.
pub fn parse_pid(arguments: Option<&JsonObject>) -> Result<i32, ArgsError> {
    match arguments.and_then(|a| a.get("pid")) {
        None | Some(Value::Null) => Err(ArgsError::Missing {
            field: "pid",
            what: "the pid start_process returned",
        }),
        Some(value) => tools::whole_number(value)
            .and_then(|n| i32::try_from(n).ok())
            .filter(|pid| *pid > 0)
            .ok_or(ArgsError::BadPid),
    }
}

/// Reads `process_output`'s arguments.
pub fn parse_output(arguments: Option<&JsonObject>) -> Result<OutputArgs, ArgsError> {
    let sandbox_id = parse_sandbox_id(arguments)?;
    let pid = parse_pid(arguments)?;
    let from = match arguments.and_then(|a| a.get("cursor")) {
        None | Some(Value::Null) => Offsets::default(),
        // An empty cursor is a model's way of giving none.
        Some(Value::String(text)) if text.trim().is_empty() => Offsets::default(),
        Some(Value::String(text)) => {
            let cursor = Cursor::decode(text)?;
            if cursor.pid != pid {
                return Err(ArgsError::CursorOfAnotherProcess {
                    cursor: cursor.pid,
                    pid,
                });
            }
            cursor.offsets
        }
        Some(_) => return Err(ArgsError::BadCursor),
    };
    let max = MAX_OUTPUT_WAIT.as_millis() as u64;
    let wait_ms = match arguments.and_then(|a| a.get("waitMs")) {
        None | Some(Value::Null) => 0,
        Some(value) => tools::whole_number(value)
            .filter(|ms| *ms <= max)
            .ok_or(ArgsError::BadWait { max })?,
    };
    Ok(OutputArgs {
        sandbox_id,
        pid,
        from,
        wait: Duration::from_millis(wait_ms),
    })
}

/// Reads `write_stdin`'s arguments: `data` may be left out only to close the input.
pub fn parse_stdin(arguments: Option<&JsonObject>) -> Result<StdinArgs, ArgsError> {
    let sandbox_id = parse_sandbox_id(arguments)?;
    let pid = parse_pid(arguments)?;
    let eof = match arguments.and_then(|a| a.get("eof")) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(eof)) => *eof,
        Some(_) => return Err(ArgsError::BadFlag("eof")),
    };
    let data = match arguments.and_then(|a| a.get("data")) {
        None | Some(Value::Null) if eof => Vec::new(),
        _ => string(
            arguments,
            "data",
            "the text to write to the process's input",
        )?
        .as_bytes()
        .to_vec(),
    };
    Ok(StdinArgs {
        sandbox_id,
        pid,
        data,
        eof,
    })
}

/// Reads `kill_process`'s arguments. A signal is taken by its name in any case, with or
/// without `SIG` (`term`, `SIGTERM`), or by its number.
pub fn parse_kill(arguments: Option<&JsonObject>) -> Result<KillArgs, ArgsError> {
    let sandbox_id = parse_sandbox_id(arguments)?;
    let pid = parse_pid(arguments)?;
    let signal = match arguments.and_then(|a| a.get("signal")) {
        None | Some(Value::Null) => Some(ProcessSignal::Term),
        Some(Value::String(name)) => {
            let name = name.trim().to_ascii_uppercase();
            ProcessSignal::from_name(name.strip_prefix("SIG").unwrap_or(&name))
        }
        Some(value) => tools::whole_number(value).and_then(|n| {
            ProcessSignal::ALL
                .into_iter()
                .find(|s| u64::try_from(s.number()) == Ok(n))
        }),
    };
    let signal = signal.ok_or_else(|| ArgsError::BadSignal {
        given: arguments
            .and_then(|a| a.get("signal"))
            .map(|v| v.to_string().chars().take(40).collect())
            .unwrap_or_default(),
        names: signal_names(),
    })?;
    Ok(KillArgs {
        sandbox_id,
        pid,
        signal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::args;
    use serde_json::json;

    fn output(value: Value) -> Result<OutputArgs, ArgsError> {
        parse_output(Some(&args(value)))
    }

    #[test]
    fn a_cursor_comes_back_as_it_was_written() {
        let cursor = Cursor {
            pid: 42,
            offsets: Offsets {
                stdout: 1 << 40,
                stderr: 7,
            },
        };
        let text = cursor.encode();
        assert!(text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_eq!(Cursor::decode(&text), Ok(cursor));
        assert_eq!(Cursor::decode(&format!(" {text}\n")), Ok(cursor));
        let read = output(json!({"sandboxId": "sbx_1", "pid": 42, "cursor": text}));
        assert_eq!(read.map(|a| a.from), Ok(cursor.offsets));
    }

    #[test]
    fn a_malformed_cursor_is_refused_not_read_from_the_start() {
        let good = Cursor {
            pid: 3,
            offsets: Offsets::default(),
        }
        .encode();
        let mut longer = URL_SAFE_NO_PAD.decode(&good).unwrap();
        longer.push(0);
        let mut versioned = URL_SAFE_NO_PAD.decode(&good).unwrap();
        versioned[0] = 2;
        let mut negative = URL_SAFE_NO_PAD.decode(&good).unwrap();
        negative[1] = 0x80;
        for bad in [
            "x".to_owned(),
            "not a cursor!".to_owned(),
            good[..good.len() - 2].to_owned(),
            URL_SAFE_NO_PAD.encode(longer),
            URL_SAFE_NO_PAD.encode(versioned),
            URL_SAFE_NO_PAD.encode(negative),
            "é".repeat(30),
        ] {
            assert_eq!(Cursor::decode(&bad), Err(ArgsError::BadCursor), "{bad:?}");
            let read = output(json!({"sandboxId": "sbx_1", "pid": 3, "cursor": bad}));
            assert_eq!(read, Err(ArgsError::BadCursor));
        }
        let numbered = output(json!({"sandboxId": "sbx_1", "pid": 3, "cursor": 12}));
        assert_eq!(numbered, Err(ArgsError::BadCursor));
        let error = ArgsError::BadCursor.to_string();
        assert!(error.contains("omit it"), "{error}");
    }

    #[test]
    fn a_cursor_reads_only_its_own_process() {
        let cursor = Cursor {
            pid: 3,
            offsets: Offsets::default(),
        }
        .encode();
        let read = output(json!({"sandboxId": "sbx_1", "pid": 4, "cursor": cursor}));
        assert_eq!(
            read,
            Err(ArgsError::CursorOfAnotherProcess { cursor: 3, pid: 4 })
        );
        for none in [json!(null), json!(""), json!("  ")] {
            let read = output(json!({"sandboxId": "sbx_1", "pid": 4, "cursor": none}));
            assert_eq!(read.map(|a| a.from), Ok(Offsets::default()), "{none}");
        }
    }

    #[test]
    fn a_wait_is_whole_milliseconds_up_to_the_runners_cap() {
        let wait = |ms: Value| {
            output(json!({"sandboxId": "sbx_1", "pid": 1, "waitMs": ms})).map(|a| a.wait)
        };
        assert_eq!(wait(json!(null)), Ok(Duration::ZERO));
        assert_eq!(wait(json!(0)), Ok(Duration::ZERO));
        assert_eq!(wait(json!(30_000)), Ok(MAX_OUTPUT_WAIT));
        assert_eq!(wait(json!(1500.0)), Ok(Duration::from_millis(1500)));
        for bad in [
            json!(30_001),
            json!(-1),
            json!(1.5),
            json!("100"),
            json!(true),
        ] {
            assert_eq!(wait(bad), Err(ArgsError::BadWait { max: 30_000 }));
        }
    }

    #[test]
    fn a_pid_is_a_positive_whole_number() {
        let pid = |value: Value| parse_pid(Some(&args(json!({"pid": value}))));
        assert_eq!(pid(json!(7)), Ok(7));
        assert_eq!(pid(json!(7.0)), Ok(7));
        for bad in [
            json!(0),
            json!(-7),
            json!(1.5),
            json!("7"),
            json!(1u64 << 31),
        ] {
            assert_eq!(pid(bad), Err(ArgsError::BadPid));
        }
        assert!(matches!(
            parse_pid(Some(&args(json!({})))),
            Err(ArgsError::Missing { field: "pid", .. })
        ));
        assert!(matches!(
            parse_pid(None),
            Err(ArgsError::Missing { field: "pid", .. })
        ));
    }

    #[test]
    fn a_command_runs_in_the_home_folder_or_below_it() {
        let start = |value: Value| parse_start(Some(&args(value)));
        let plain = start(json!({"sandboxId": "sbx_1", "command": "python3 -m http.server"}));
        assert_eq!(
            plain,
            Ok(StartArgs {
                sandbox_id: "sbx_1".into(),
                command: "python3 -m http.server".into(),
                cwd: None
            })
        );
        for home in ["", ".", "~", "~/", "/home/sandbox", "/home/sandbox/"] {
            let at = start(json!({"sandboxId": "s", "command": "ls", "cwd": home}));
            assert_eq!(at.map(|a| a.cwd), Ok(None), "{home:?}");
        }
        let below = start(json!({"sandboxId": "s", "command": "ls", "cwd": "/home/sandbox/app/"}));
        assert_eq!(below.map(|a| a.cwd), Ok(Some("app".into())));
        for outside in [json!("/etc"), json!("../x"), json!("a/../.."), json!(5)] {
            let at = start(json!({"sandboxId": "s", "command": "ls", "cwd": outside}));
            assert!(matches!(at, Err(ArgsError::BadPath(_))), "{outside}");
        }
        for missing in [
            json!({"sandboxId": "s"}),
            json!({"sandboxId": "s", "command": " "}),
        ] {
            assert!(matches!(
                start(missing),
                Err(ArgsError::Missing {
                    field: "command",
                    ..
                })
            ));
        }
        assert!(matches!(
            start(json!({"command": "ls"})),
            Err(ArgsError::Missing {
                field: "sandboxId",
                ..
            })
        ));
    }

    #[test]
    fn stdin_takes_text_and_may_only_close() {
        let stdin = |value: Value| parse_stdin(Some(&args(value)));
        let line = stdin(json!({"sandboxId": "s", "pid": 9, "data": "héllo\n"})).unwrap();
        assert_eq!(line.data, "héllo\n".as_bytes());
        assert!(!line.eof);
        let close = stdin(json!({"sandboxId": "s", "pid": 9, "eof": true})).unwrap();
        assert!(close.data.is_empty() && close.eof);
        assert!(matches!(
            stdin(json!({"sandboxId": "s", "pid": 9})),
            Err(ArgsError::Missing { field: "data", .. })
        ));
        assert_eq!(
            stdin(json!({"sandboxId": "s", "pid": 9, "data": "x", "eof": "yes"})),
            Err(ArgsError::BadFlag("eof"))
        );
    }

    #[test]
    fn a_signal_is_term_unless_named_and_one_of_seven() {
        let kill = |signal: Value| {
            parse_kill(Some(&args(
                json!({"sandboxId": "s", "pid": 9, "signal": signal}),
            )))
            .map(|a| a.signal)
        };
        assert_eq!(kill(json!(null)), Ok(ProcessSignal::Term));
        assert_eq!(
            parse_kill(Some(&args(json!({"sandboxId": "s", "pid": 9})))).map(|a| a.signal),
            Ok(ProcessSignal::Term)
        );
        for (given, signal) in [
            (json!("KILL"), ProcessSignal::Kill),
            (json!("sigint"), ProcessSignal::Int),
            (json!(" SIGUSR2 "), ProcessSignal::Usr2),
            (json!("hup"), ProcessSignal::Hup),
            (json!(9), ProcessSignal::Kill),
            (json!(3), ProcessSignal::Quit),
        ] {
            assert_eq!(kill(given.clone()), Ok(signal), "{given}");
        }
        for bad in [
            json!("STOP"),
            json!("SIGSEGV"),
            json!(19),
            json!(""),
            json!([]),
        ] {
            match kill(bad.clone()) {
                Err(error @ ArgsError::BadSignal { .. }) => {
                    let said = error.to_string();
                    assert!(
                        said.contains("INT, TERM, KILL, HUP, QUIT, USR1 or USR2"),
                        "{said}"
                    );
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
