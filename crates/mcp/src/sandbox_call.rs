//! What the tools whose calls name a sandbox share: the sandbox tools
//! ([`crate::sandbox_tools`]), those that pause, snapshot and fork sandboxes
//! ([`crate::snapshot_tools`]) and the process tools ([`crate::process_tools`]) each say
//! their name, texts and schemas ([`SandboxCall`]), and get their definition from them
//! here. Their results have their own fields and `error`, null on success; a failed call
//! has the same fields, empty ([`crate::sandbox_report`]).

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use sandbox_protocol::api::Limits;
use serde_json::{json, Map, Value};

use crate::schema::{error_schema, object};

/// A tool whose calls name a sandbox: its parts, and its definition from them.
pub trait SandboxCall: Copy {
    /// The tool's name.
    fn name(self) -> &'static str;
    /// The fields of the tool's `structuredContent` besides `error`, as they are when the
    /// call failed.
    fn failed_fields(self) -> Map<String, Value>;
    /// Its title.
    fn title(self) -> &'static str;
    /// What it does, for a runner with `limits`.
    fn description(self, limits: &Limits) -> String;
    /// The schema of its arguments.
    fn input_schema(self) -> Arc<JsonObject>;
    /// The properties of its output schema besides `error`.
    fn output_properties(self) -> Value;
    /// Whether it is (read-only, destructive, idempotent).
    fn hints(self) -> (bool, bool, bool);
    /// Whether its description says the sandbox's resources (and so, on a server without
    /// resource limits, that there are none).
    fn says_resources(self) -> bool;

    /// The definition as `tools/list` shows it, for a runner with `limits`: its output
    /// schema requires every field a failed call keeps, and `error`. Every tool of a
    /// server without resource limits says so.
    fn definition(self, limits: &Limits) -> Tool {
        let mut description = self.description(limits);
        if !limits.resource_limits && !self.says_resources() {
            description.push_str(
                " This server's sandboxes have NO memory or CPU limit (it runs with \
                 --unsafe-no-resource-limits).",
            );
        }
        let mut required: Vec<String> = self.failed_fields().keys().cloned().collect();
        required.push("error".into());
        let mut properties = self.output_properties();
        if let Value::Object(map) = &mut properties {
            map.insert(
                "error".into(),
                error_schema("Why the call failed; null when it succeeded."),
            );
        }
        let (read_only, destructive, idempotent) = self.hints();
        let annotations = ToolAnnotations::with_title(self.title())
            .read_only(read_only)
            .destructive(destructive)
            .idempotent(idempotent)
            .open_world(false);
        let mut tool = Tool::new(self.name(), description, self.input_schema());
        tool.title = Some(self.title().to_owned());
        tool.output_schema = Some(object(
            json!({ "type": "object", "properties": properties, "required": required }),
        ));
        tool.annotations = Some(annotations);
        tool
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process_tools::ProcessTool;
    use crate::sandbox_tools::SandboxTool;
    use crate::snapshot_tools::SnapshotTool;

    /// The definition of `tool` for `limits`, as JSON.
    fn checked(tool: impl SandboxCall, limits: &Limits) -> Value {
        let definition = tool.definition(limits);
        let schema = Value::Object((*definition.output_schema.clone().unwrap()).clone());
        let required = schema["required"].as_array().unwrap();
        assert!(required.contains(&json!("error")), "{}", tool.name());
        for field in tool.failed_fields().keys() {
            assert!(schema["properties"][field].is_object(), "{}", tool.name());
            assert!(required.contains(&json!(field)), "{} {field}", tool.name());
        }
        let annotations = definition.annotations.clone().unwrap();
        assert_eq!(annotations.open_world_hint, Some(false));
        assert_eq!(annotations.title.as_deref(), Some(tool.title()));
        serde_json::to_value(&definition).unwrap()
    }

    #[test]
    fn every_field_of_a_failed_call_is_in_the_schema_and_limits_are_said() {
        let unlimited = Limits {
            resource_limits: false,
            ..Limits::default()
        };
        let sandbox =
            SandboxTool::ALL.map(|t| (checked(t, &Limits::default()), checked(t, &unlimited)));
        let process =
            ProcessTool::ALL.map(|t| (checked(t, &Limits::default()), checked(t, &unlimited)));
        let snapshot =
            SnapshotTool::ALL.map(|t| (checked(t, &Limits::default()), checked(t, &unlimited)));
        for (limited, unlimited) in sandbox.iter().chain(&process).chain(&snapshot) {
            let said = |d: &Value| {
                d["description"]
                    .as_str()
                    .unwrap()
                    .contains("NO memory or CPU limit")
            };
            assert!(said(unlimited), "{unlimited}");
            assert!(!said(limited), "{limited}");
        }
    }
}
