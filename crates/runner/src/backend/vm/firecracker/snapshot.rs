//! The snapshot template: one VM booted to its agent, told a snapshot is coming, paused
//! and written to disk (its memory and its state); every later VM is restored from it
//! and its agent handed fresh entropy and the time before anything else.

use super::api::Api;
use super::layout::Layout;
use crate::backend::vm::error::io_error;
use crate::backend::vm::VmError;
use hyper::Method;
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The snapshot files of the template, in the backend's folder and in each VM's root.
const SNAPSHOT_FILE: &str = "vm.snap";
const MEMORY_FILE: &str = "vm.mem";

/// The template's snapshot, which every restored VM starts from.
#[derive(Debug)]
pub struct Template {
    snapshot: PathBuf,
    memory: PathBuf,
}

impl Template {
    /// Pauses the template VM and snapshots it into `dir` (readable by `group`, which
    /// every VMM of this backend runs in).
    pub(super) async fn take(
        api: &mut Api,
        layout: &Layout,
        dir: &Path,
        group: u32,
    ) -> Result<Template, VmError> {
        api.call(Method::PATCH, "/vm", json!({"state": "Paused"}))
            .await?;
        let (snap_name, mem_name) = match layout.jailed() {
            true => (format!("/{SNAPSHOT_FILE}"), format!("/{MEMORY_FILE}")),
            false => (SNAPSHOT_FILE.to_owned(), MEMORY_FILE.to_owned()),
        };
        let started = Instant::now();
        api.call(
            Method::PUT,
            "/snapshot/create",
            json!({"snapshot_type": "Full", "snapshot_path": snap_name, "mem_file_path": mem_name}),
        )
        .await?;
        fs::create_dir_all(dir).map_err(io_error("creating", dir))?;
        let template = Template {
            snapshot: dir.join(SNAPSHOT_FILE),
            memory: dir.join(MEMORY_FILE),
        };
        for (made, kept) in [
            (layout.root.join(SNAPSHOT_FILE), &template.snapshot),
            (layout.root.join(MEMORY_FILE), &template.memory),
        ] {
            fs::rename(&made, kept).map_err(io_error("keeping the snapshot file", &made))?;
            nix::unistd::chown(kept, Some(0.into()), Some(group.into()))
                .map_err(|e| io_error("handing the snapshot to the VMM group", kept)(e.into()))?;
            fs::set_permissions(kept, fs::Permissions::from_mode(0o640))
                .map_err(io_error("protecting", kept))?;
        }
        tracing::info!(
            snapshot_ms = started.elapsed().as_millis() as u64,
            "Firecracker template snapshot taken"
        );
        Ok(template)
    }

    /// Loads the snapshot into a fresh Firecracker and resumes the VM.
    pub(super) async fn restore(&self, api: &mut Api, layout: &Layout) -> Result<(), VmError> {
        let snapshot = layout.expose(&self.snapshot, SNAPSHOT_FILE)?;
        let memory = layout.expose(&self.memory, MEMORY_FILE)?;
        api.call(
            Method::PUT,
            "/snapshot/load",
            json!({
                "snapshot_path": snapshot,
                "mem_backend": {"backend_type": "File", "backend_path": memory},
                "resume_vm": true
            }),
        )
        .await
    }
}
