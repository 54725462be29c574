//! What `pause_sandbox`, `snapshot_sandbox` and `fork_sandbox` return
//! ([`crate::snapshot_tools`]): text for the model and `structuredContent` in the shape
//! of each tool's output schema, as [`crate::sandbox_report`] makes them.

use rmcp::model::{CallToolResult, ContentBlock};
use sandbox_protocol::snapshot::{ForkedSession, PauseInfo, SnapshotInfo};
use serde_json::json;

use crate::sandbox_report::result;
use crate::snapshot_tools::SnapshotTool;
use crate::wording;

/// `pause_sandbox`'s answer.
pub fn paused(info: &PauseInfo) -> CallToolResult {
    let text = format!(
        "Paused the sandbox at {at}: its files ({size}) are kept on the runner's disk, and it \
         holds no memory or processes. Any call with its sandboxId wakes it first; the first \
         run's result says whether variables and background processes were lost.",
        at = info.paused_at,
        size = wording::bytes(info.bytes),
    );
    result(
        SnapshotTool::Pause,
        vec![ContentBlock::text(text)],
        json!({ "paused": true, "pausedAt": info.paused_at, "bytes": info.bytes }),
        None,
    )
}

/// `snapshot_sandbox`'s answer: `snapshot_id` is the handle of `info`'s snapshot.
pub fn snapshotted(snapshot_id: &str, info: &SnapshotInfo) -> CallToolResult {
    let text = format!(
        "Took a snapshot of the sandbox's files ({size}). snapshotId: {snapshot_id}\n\
         Pass it as snapshotId to create_sandbox to start a new sandbox with these files, as \
         often as needed, until {expires}. The sandbox goes on as it was.",
        size = wording::bytes(info.bytes),
        expires = info.expires_at,
    );
    result(
        SnapshotTool::Snapshot,
        vec![ContentBlock::text(text)],
        json!({
            "snapshotId": snapshot_id,
            "createdAt": info.created_at,
            "expiresAt": info.expires_at,
            "bytes": info.bytes,
        }),
        None,
    )
}

/// `fork_sandbox`'s answer: `sandbox_ids` are the handles of `forked`, in order.
pub fn forked(sandbox_ids: &[String], forked: &[ForkedSession]) -> CallToolResult {
    let mut lines = vec![format!(
        "Made {} from the sandbox, each with its own copy of its files, independent of each \
         other and of the original. Each starts paused and wakes at its first call (without \
         the original's variables or processes); one never used ends at {}. sandboxIds:",
        wording::plural(sandbox_ids.len(), "new sandbox"),
        forked
            .first()
            .map_or("its expiry", |f| f.expires_at.as_str()),
    )];
    lines.extend(sandbox_ids.iter().cloned());
    result(
        SnapshotTool::Fork,
        vec![ContentBlock::text(lines.join("\n"))],
        json!({ "sandboxIds": sandbox_ids }),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner_client::RunnerError;
    use crate::sandbox_report::from_runner_error;
    use crate::test_support::text_of;
    use sandbox_protocol::snapshot::SessionState;

    #[test]
    fn answers_give_the_contract_fields_and_never_the_runners_ids() {
        let pause = paused(&PauseInfo {
            id: "runner-session".into(),
            state: SessionState::Paused,
            paused_at: "2026-12-04T07:00:00.000Z".into(),
            bytes: 2048,
        });
        assert_eq!(pause.is_error, Some(false));
        assert_eq!(
            pause.structured_content.clone().unwrap(),
            json!({"paused": true, "pausedAt": "2026-12-04T07:00:00.000Z", "bytes": 2048, "error": null})
        );
        assert!(!text_of(&pause).contains("runner-session"));
        let info = SnapshotInfo {
            snapshot_id: "runner-snapshot".into(),
            session_id: "runner-session".into(),
            created_at: "2026-12-04T07:00:00.000Z".into(),
            bytes: 10,
            expires_at: "2026-12-11T07:00:00.000Z".into(),
        };
        let snap = snapshotted("snap_abc", &info);
        let structured = snap.structured_content.clone().unwrap();
        assert_eq!(structured["snapshotId"], "snap_abc");
        assert_eq!(structured["expiresAt"], "2026-12-11T07:00:00.000Z");
        assert!(text_of(&snap).contains("snap_abc") && !text_of(&snap).contains("runner-"));
        let copies = [ForkedSession {
            id: "runner-fork".into(),
            idle_timeout_ms: 1,
            expires_at: "2026-12-11T07:00:00.000Z".into(),
        }];
        let fork = forked(&["sbx_a".into()], &copies);
        assert_eq!(
            fork.structured_content.clone().unwrap(),
            json!({"sandboxIds": ["sbx_a"], "error": null})
        );
        assert!(text_of(&fork).contains("1 new sandbox") && text_of(&fork).contains("sbx_a"));
        assert!(!text_of(&fork).contains("runner-fork"));
    }

    #[test]
    fn failures_keep_the_schema_and_say_what_to_do() {
        let full = from_runner_error(
            SnapshotTool::Snapshot,
            &RunnerError::StorageFull("over 10 GiB".into()),
        );
        assert_eq!(full.is_error, Some(true));
        let structured = full.structured_content.clone().unwrap();
        assert_eq!(structured["snapshotId"], json!(null));
        assert_eq!(structured["error"]["code"], "storage_full");
        assert_eq!(structured["error"]["retryable"], true);
        let failed = from_runner_error(SnapshotTool::Fork, &RunnerError::SandboxNotFound);
        assert_eq!(
            failed.structured_content.clone().unwrap()["sandboxIds"],
            json!([])
        );
        assert!(text_of(&failed).starts_with("fork_sandbox failed"));
    }
}
