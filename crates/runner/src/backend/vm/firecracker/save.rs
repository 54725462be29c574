//! A Firecracker VM saved whole and restored with Firecracker's snapshot API, as the
//! template is (`snapshot.rs`), but for a session's VM between its calls.
//!
//! Saving: the guest's init is told (it answers Ready, lets its vsock connection go and
//! keeps reconnecting), the VM is paused, `PUT /snapshot/create` writes the snapshot and
//! the memory file into the VM's root, and the runner moves them into the saved
//! folder, its own (mode 0600), beside `vm.json`. The VM is spent after it, and also
//! after a failure once the notice is out (its init has let its channel go).
//!
//! Restoring: a new Firecracker gets its own copies of the two files (a jailed VMM
//! reads nothing of the runner's; a fork restores one folder several times at once)
//! and the root image at the path the snapshot names, `PUT /snapshot/load` resumes the
//! VM, its init reconnects and gets the Reseed before anything else.
//!
//! Untested here: it needs KVM and Firecracker, which the test machines lack.

use super::api::Api;
use super::launch::{self, Launched};
use super::Firecracker;
use crate::backend::channel;
use crate::backend::vm::error::io_error;
use crate::backend::vm::host::{Host, VmmUser};
use crate::backend::vm::sandbox::Control;
use crate::backend::vm::saved::{self, Machine};
use crate::backend::vm::{VmError, VmSandbox};
use hyper::Method;
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The snapshot of the VM's state, and its memory, in a saved folder and in a VM's root.
const SNAPSHOT_FILE: &str = "vm.snap";
const MEMORY_FILE: &str = "vm.mem";
/// The longest a save may take (a few seconds per GiB of guest memory).
const SAVE_TIMEOUT: Duration = Duration::from_secs(120);

/// The machine a Firecracker VM of `host` is.
pub(super) fn machine(host: &Host) -> Result<Machine, VmError> {
    Machine::new(
        "firecracker",
        "kvm",
        host.config.guest_memory_mb,
        &host.image,
    )
}

/// How the runner reaches a launched VM's Firecracker for a save.
pub(super) fn control(launched: &Launched) -> Control {
    Control::Firecracker {
        api: launched.layout.api_socket(),
        root: launched.layout.root.clone(),
        jailed: launched.layout.jailed(),
    }
}

/// Saves the VM into `dir`; the bytes written. The VM is spent after it, and after an
/// error too.
pub(in crate::backend::vm) async fn save(
    vm: &mut VmSandbox,
    api: &Path,
    root: &Path,
    jailed: bool,
    dir: &Path,
) -> Result<u64, VmError> {
    let machine = vm.machine.clone().ok_or(VmError::NoChannel)?;
    let started = Instant::now();
    let written = tokio::time::timeout(SAVE_TIMEOUT, async {
        let channel = vm.channel.as_mut().ok_or(VmError::NoChannel)?;
        channel::announce_snapshot(channel, true).await?;
        vm.channel = None;
        let mut api = Api::connect(api, &mut vm.child).await?;
        api.call(Method::PATCH, "/vm", json!({"state": "Paused"}))
            .await?;
        let name = |file: &str| match jailed {
            true => format!("/{file}"),
            false => file.to_owned(),
        };
        api.call(
            Method::PUT,
            "/snapshot/create",
            json!({
                "snapshot_type": "Full",
                "snapshot_path": name(SNAPSHOT_FILE),
                "mem_file_path": name(MEMORY_FILE)
            }),
        )
        .await?;
        for file in [SNAPSHOT_FILE, MEMORY_FILE] {
            keep(&root.join(file), &dir.join(file))?;
        }
        machine.write(dir)
    })
    .await;
    match written {
        Ok(Ok(())) => {
            let _ = vm.child.start_kill();
            let bytes = saved::bytes(dir, &[SNAPSHOT_FILE, MEMORY_FILE, saved::MACHINE_FILE])?;
            tracing::info!(
                vm = vm.id,
                bytes,
                save_ms = started.elapsed().as_millis() as u64,
                "Firecracker VM saved"
            );
            Ok(bytes)
        }
        Ok(Err(e)) => {
            saved::remove(dir, &[SNAPSHOT_FILE, MEMORY_FILE]);
            Err(e)
        }
        Err(_) => {
            saved::remove(dir, &[SNAPSHOT_FILE, MEMORY_FILE]);
            Err(VmError::SaveTimeout(SAVE_TIMEOUT))
        }
    }
}

/// Moves a file Firecracker wrote into the saved folder, the runner's, mode 0600
/// (copied where the folder is on another file system).
fn keep(made: &Path, kept: &Path) -> Result<(), VmError> {
    if fs::rename(made, kept).is_err() {
        fs::copy(made, kept).map_err(io_error("keeping the snapshot file", made))?;
        let _ = fs::remove_file(made);
    }
    nix::unistd::chown(kept, Some(0.into()), Some(0.into()))
        .map_err(|e| io_error("handing the snapshot to the runner", kept)(e.into()))?;
    fs::set_permissions(kept, fs::Permissions::from_mode(0o600))
        .map_err(io_error("protecting", kept))
}

/// Copies a saved file into a VM's root for its Firecracker (`user`) to read.
fn lend(saved: &Path, root: &Path, user: VmmUser) -> Result<PathBuf, VmError> {
    let name = saved.file_name().unwrap_or_default();
    let copy = root.join(name);
    fs::copy(saved, &copy).map_err(io_error("copying the saved VM", saved))?;
    user.own(&copy)?;
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o600))
        .map_err(io_error("protecting", &copy))?;
    Ok(copy)
}

impl Firecracker {
    /// A VM restored from what [`save`] wrote in `dir` (read, never changed), reseeded,
    /// within the boot timeout.
    pub(in crate::backend::vm) async fn restore(
        &self,
        host: &Host,
        dir: &Path,
    ) -> Result<VmSandbox, VmError> {
        let machine = machine(host)?;
        Machine::check(dir, &machine)?;
        for file in [SNAPSHOT_FILE, MEMORY_FILE] {
            drop(saved::open(dir, file)?);
        }
        let launched = launch::launch(host).await?;
        let control = control(&launched);
        let Launched {
            mut sandbox,
            mut api,
            layout,
            listener,
            user,
            ..
        } = launched;
        let timeout = host.config.boot_timeout;
        let restored = async {
            for file in [SNAPSHOT_FILE, MEMORY_FILE] {
                lend(&dir.join(file), &layout.root, user)?;
            }
            // The snapshot names the root image as the VM it was taken of saw it.
            layout.expose(&host.image.rootfs, sandbox_image::ROOTFS_FILE)?;
            let name = |file: &str| match layout.jailed() {
                true => format!("/{file}"),
                false => file.to_owned(),
            };
            api.call(
                Method::PUT,
                "/snapshot/load",
                json!({
                    "snapshot_path": name(SNAPSHOT_FILE),
                    "mem_backend": {"backend_type": "File", "backend_path": name(MEMORY_FILE)},
                    "resume_vm": true
                }),
            )
            .await?;
            sandbox.accept(&listener).await?;
            let channel = sandbox.channel.as_mut().ok_or(VmError::NoChannel)?;
            channel::reseed(channel, saved::fresh_entropy()?, saved::unix_time_ms()).await?;
            Ok(channel::expect_ready(channel).await?)
        };
        let outcome = tokio::time::timeout(timeout, restored).await;
        let mut sandbox = sandbox.booted(outcome, timeout).await?;
        sandbox.machine = Some(machine);
        sandbox.control = Some(control);
        Ok(sandbox)
    }
}
