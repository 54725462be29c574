//! The tools that keep a sandbox beyond its sandbox process: `pause_sandbox` (its files to
//! the runner's disk until its next call), `snapshot_sandbox` (a copy of its files to
//! start new sandboxes from, behind an opaque `snapshotId`) and `fork_sandbox` (new
//! sandboxes, each with its own copy). Their definitions; the parsing of their arguments
//! is in [`crate::sandbox_args`], their results in [`crate::snapshot_report`], the calls
//! in `crate::server::snapshots`. `create_sandbox` takes a `snapshotId`
//! ([`crate::sandbox_tools`]).
//!
//! A snapshot lives on the runner it was taken on: its id names that runner, as a
//! sandbox id does ([`crate::handle`]).

use std::sync::Arc;

use rmcp::model::JsonObject;
use sandbox_protocol::api::Limits;
use serde_json::{json, Map, Value};

use crate::sandbox_call::SandboxCall;
use crate::sandbox_tools::HOME;
use crate::schema::{nullable, object};

/// The most sandboxes one `fork_sandbox` call makes: the runner's contract (`POST
/// /sessions/{id}/fork` takes a count of 1 to 16).
pub use sandbox_protocol::snapshot::MAX_FORKS;

/// One of the tools that pause, snapshot and fork sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotTool {
    /// `pause_sandbox`.
    Pause,
    /// `snapshot_sandbox`.
    Snapshot,
    /// `fork_sandbox`.
    Fork,
}

impl SandboxCall for SnapshotTool {
    fn name(self) -> &'static str {
        match self {
            SnapshotTool::Pause => "pause_sandbox",
            SnapshotTool::Snapshot => "snapshot_sandbox",
            SnapshotTool::Fork => "fork_sandbox",
        }
    }

    fn failed_fields(self) -> Map<String, Value> {
        let fields = match self {
            SnapshotTool::Pause => json!({"paused": false, "pausedAt": null, "bytes": null}),
            SnapshotTool::Snapshot => {
                json!({"snapshotId": null, "createdAt": null, "expiresAt": null, "bytes": null})
            }
            SnapshotTool::Fork => json!({"sandboxIds": []}),
        };
        match fields {
            Value::Object(map) => map,
            _ => unreachable!("written as objects"),
        }
    }

    fn title(self) -> &'static str {
        match self {
            SnapshotTool::Pause => "Pause a sandbox",
            SnapshotTool::Snapshot => "Snapshot a sandbox",
            SnapshotTool::Fork => "Fork a sandbox",
        }
    }

    fn description(self, _limits: &Limits) -> String {
        let kept = format!("its files (in {HOME} and /tmp, with their modes and symlinks)");
        match self {
            SnapshotTool::Pause => format!(
                "Pauses a sandbox from create_sandbox until its next call. Pause it before a \
                 long wait (for a person, a long job elsewhere, the next session of work): \
                 while paused it keeps {kept} on the runner's disk and holds no memory, CPU \
                 or processes, so it costs nothing, and it lasts far longer than an idle \
                 sandbox would. Any later call with its sandboxId (run_*, the file and \
                 process tools) wakes it first, transparently. After a wake its files are \
                 all there; the first run's result says it was woken (resumed) and whether \
                 the interpreters' variables and background processes were lost (stateLost): \
                 keep what matters in files."
            ),
            SnapshotTool::Snapshot => format!(
                "Takes a snapshot of a sandbox from create_sandbox: a copy of {kept} as they \
                 are now, behind a snapshotId; the sandbox goes on. Take one at a known good \
                 state (dependencies installed, data prepared, tests passing) to come back to \
                 it after an experiment goes wrong, or to start many sandboxes from it: \
                 create_sandbox with snapshotId makes a new sandbox with those files. \
                 Variables and processes are not part of a snapshot. A snapshot lives on the \
                 runner of its sandbox until its time runs out (expiresAt)."
            ),
            SnapshotTool::Fork => format!(
                "Copies a sandbox from create_sandbox into count new sandboxes (1 to \
                 {MAX_FORKS}, default 1), each with its own copy of {kept}, independent of \
                 each other and of the original. Fork to try alternatives side by side (two \
                 fixes, several parameters) from the same starting point, then keep the one \
                 that works and close the others with close_sandbox. Each new sandbox starts \
                 paused and wakes at its first call, without the original's variables or \
                 processes."
            ),
        }
    }

    fn input_schema(self) -> Arc<JsonObject> {
        let sandbox_id = json!({
            "type": "string",
            "description": "The sandboxId create_sandbox (or fork_sandbox) returned.",
        });
        object(match self {
            SnapshotTool::Pause | SnapshotTool::Snapshot => json!({
                "type": "object",
                "properties": { "sandboxId": sandbox_id },
                "required": ["sandboxId"],
            }),
            SnapshotTool::Fork => json!({
                "type": "object",
                "properties": {
                    "sandboxId": sandbox_id,
                    "count": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_FORKS,
                        "default": 1,
                        "description": "How many new sandboxes to make.",
                    },
                },
                "required": ["sandboxId"],
            }),
        })
    }

    fn output_properties(self) -> Value {
        let text = |d: &str| nullable("string", d);
        let count = |d: &str| nullable("integer", d);
        match self {
            SnapshotTool::Pause => json!({
                "paused": { "type": "boolean", "description": "The sandbox is paused." },
                "pausedAt": text("When it was paused (RFC 3339, UTC)."),
                "bytes": count("The bytes its files take on the runner's disk."),
            }),
            SnapshotTool::Snapshot => json!({
                "snapshotId": text("The snapshot's id: pass it as snapshotId to create_sandbox."),
                "createdAt": text("When it was taken (RFC 3339, UTC)."),
                "expiresAt": text("When it is deleted (RFC 3339, UTC)."),
                "bytes": count("The bytes it takes on the runner's disk."),
            }),
            SnapshotTool::Fork => json!({
                "sandboxIds": {
                    "type": "array",
                    "items": { "type": "string" },
                    "description": "The new sandboxes' ids, each to pass as sandboxId to the other tools.",
                },
            }),
        }
    }

    fn hints(self) -> (bool, bool, bool) {
        match self {
            SnapshotTool::Pause => (false, false, true),
            SnapshotTool::Snapshot | SnapshotTool::Fork => (false, false, false),
        }
    }

    fn says_resources(self) -> bool {
        false
    }
}

impl SnapshotTool {
    /// Every one of these tools, in the order `tools/list` gives them.
    pub const ALL: [SnapshotTool; 3] = [
        SnapshotTool::Pause,
        SnapshotTool::Snapshot,
        SnapshotTool::Fork,
    ];

    /// The tool a name stands for.
    pub fn of(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn description(tool: SnapshotTool) -> String {
        let definition = tool.definition(&Limits::default());
        definition
            .description
            .as_deref()
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn descriptions_say_when_to_pause_snapshot_and_fork() {
        let pause = description(SnapshotTool::Pause);
        for needle in [
            "long wait",
            "costs nothing",
            "wakes",
            "resumed",
            "stateLost",
        ] {
            assert!(pause.contains(needle), "{needle:?} missing from {pause}");
        }
        let snapshot = description(SnapshotTool::Snapshot);
        for needle in [
            "known good state",
            "snapshotId",
            "create_sandbox",
            "expiresAt",
        ] {
            assert!(
                snapshot.contains(needle),
                "{needle:?} missing from {snapshot}"
            );
        }
        let fork = description(SnapshotTool::Fork);
        for needle in ["alternatives side by side", "independent", "1 to 16"] {
            assert!(fork.contains(needle), "{needle:?} missing from {fork}");
        }
    }

    #[test]
    fn names_round_trip_and_schemas_hold_the_contract_fields() {
        for tool in SnapshotTool::ALL {
            assert_eq!(SnapshotTool::of(tool.name()), Some(tool));
        }
        assert_eq!(SnapshotTool::of("create_sandbox"), None);
        let schema = |tool: SnapshotTool| {
            let definition = tool.definition(&Limits::default());
            Value::Object((*definition.output_schema.unwrap_or_default()).clone())
        };
        assert!(schema(SnapshotTool::Snapshot)["properties"]["snapshotId"].is_object());
        assert_eq!(
            schema(SnapshotTool::Fork)["properties"]["sandboxIds"]["type"],
            "array"
        );
        let fork = SnapshotTool::Fork.input_schema();
        assert_eq!(fork["properties"]["count"]["maximum"], MAX_FORKS);
        assert_eq!(fork["required"], json!(["sandboxId"]));
    }
}
