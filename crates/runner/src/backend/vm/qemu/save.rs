//! A QEMU VM saved whole and restored, with QEMU's own migration to and from a file
//! the runner opens (QEMU gets only the descriptor, over QMP: its seccomp sandbox
//! forbids the `exec:` transport, and this QEMU has no `file:` one).
//!
//! Saving, between a session's calls: the guest's init is told (it answers Ready and
//! waits for a Reseed), QMP `stop`, `migrate` to `vm.state` until `completed`, then
//! `vm.json` (the machine) and `quit`. The VM is stopped before its QEMU lets go of
//! the agent's socket, so the guest never sees its serial port's host side close.
//! Should a step fail, the save is undone: QEMU continues the VM and the init gets its
//! Reseed, as after a restore.
//!
//! Restoring: a new QEMU with the same machine (`-incoming defer`), connected to the new
//! runner's sockets before the VM runs; `migrate-incoming` from the file until
//! `completed`, `cont`, then the Reseed (fresh entropy and the host's time) and the
//! init's Ready. Every step is bounded in time.

use super::{Accel, Qemu};
use crate::backend::channel;
use crate::backend::vm::host::Host;
use crate::backend::vm::qmp::Qmp;
use crate::backend::vm::sandbox::{describe, Control};
use crate::backend::vm::saved::{self, Machine};
use crate::backend::vm::{BootError, VmError, VmSandbox};
use serde_json::{json, Value};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// The guest's memory and devices, in a saved folder.
const STATE_FILE: &str = "vm.state";
/// The name QEMU knows the state file's descriptor by.
const FD_NAME: &str = "state";
/// The longest a save may take, undoing it included (a few seconds per GiB written).
const SAVE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the undoing of a failed save, or QEMU's exit after a save, may take.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the migration's status is asked for.
const POLL: Duration = Duration::from_millis(20);
/// QEMU's migration speed limit (bytes a second): none to speak of (its default, 128
/// MiB/s, is for networks).
const MAX_BANDWIDTH: u64 = 64 << 30;

/// The machine a QEMU VM of `host` with `accel` is.
pub(super) fn machine(host: &Host, accel: Accel) -> Result<Machine, VmError> {
    Machine::new(
        "qemu",
        accel.name(),
        host.config.guest_memory_mb,
        &host.image,
    )
}

/// Saves the VM into `dir`; the bytes written. The VM is spent after it (its QEMU has
/// exited); after an error it runs on as it was, unless undoing failed too.
pub(in crate::backend::vm) async fn save(
    vm: &mut VmSandbox,
    mut qmp: Qmp,
    dir: &Path,
) -> Result<u64, VmError> {
    let machine = vm.machine.clone().ok_or(VmError::NoChannel)?;
    let started = Instant::now();
    // The tunnel's connections end here, both directions at a frame's end.
    let quiesced = vm.quiesce_egress().await;
    let channel = vm.channel.as_mut().ok_or(VmError::NoChannel)?;
    let announced =
        tokio::time::timeout(SETTLE_TIMEOUT, channel::announce_snapshot(channel, true)).await;
    let failed = match announced {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.into()),
        Err(_) => Some(VmError::SaveTimeout(SETTLE_TIMEOUT)),
    };
    if let Some(e) = failed {
        vm.resume_egress(quiesced);
        return Err(e);
    }
    let written = tokio::time::timeout(SAVE_TIMEOUT, write_state(&mut qmp, dir, &machine)).await;
    let error = match written {
        Ok(Ok(())) => {
            quit(vm, qmp).await;
            let bytes = saved::bytes(dir, &[STATE_FILE, saved::MACHINE_FILE])?;
            tracing::info!(
                vm = vm.id,
                bytes,
                save_ms = started.elapsed().as_millis() as u64,
                "QEMU VM saved"
            );
            return Ok(bytes);
        }
        Ok(Err(e)) => e,
        Err(_) => VmError::SaveTimeout(SAVE_TIMEOUT),
    };
    saved::remove(dir, &[STATE_FILE]);
    match tokio::time::timeout(SETTLE_TIMEOUT, undo(vm, &mut qmp)).await {
        Ok(Ok(())) => {
            vm.control = Some(Control::Qmp(qmp));
            vm.resume_egress(quiesced);
        }
        Ok(Err(e)) => tracing::error!(vm = vm.id, error = %e, "a failed save left the VM stopped"),
        Err(_) => tracing::error!(vm = vm.id, "undoing a failed save took too long"),
    }
    Err(error)
}

/// Stops the VM and migrates it into `dir`'s state file, then describes the machine.
async fn write_state(qmp: &mut Qmp, dir: &Path, machine: &Machine) -> Result<(), VmError> {
    qmp.execute("stop", json!({})).await?;
    let file = saved::create(&dir.join(STATE_FILE))?;
    qmp.send_fd(FD_NAME, file.as_fd()).await?;
    qmp.execute(
        "migrate-set-parameters",
        json!({ "max-bandwidth": MAX_BANDWIDTH }),
    )
    .await?;
    qmp.execute("migrate", json!({ "uri": format!("fd:{FD_NAME}") }))
        .await?;
    migrated(qmp).await?;
    let path = dir.join(STATE_FILE);
    file.sync_all()
        .map_err(crate::backend::vm::error::io_error("writing", &path))?;
    machine.write(dir)
}

/// Waits until the migration (out, or in on a restoring QEMU) has completed.
async fn migrated(qmp: &mut Qmp) -> Result<(), VmError> {
    loop {
        let info = qmp.execute("query-migrate", json!({})).await?;
        match info.get("status").and_then(Value::as_str) {
            Some("completed") => return Ok(()),
            Some(status @ ("failed" | "cancelled")) => {
                let said = info.get("error-desc").and_then(Value::as_str);
                return Err(VmError::Migration(format!(
                    "{status}: {}",
                    said.unwrap_or("QEMU gave no reason")
                )));
            }
            _ => tokio::time::sleep(POLL).await,
        }
    }
}

/// Ends the saved VM's QEMU (killed if it does not exit in time).
async fn quit(vm: &mut VmSandbox, mut qmp: Qmp) {
    // QEMU may exit before it answers: whether `quit` is answered does not matter.
    let _ = tokio::time::timeout(SETTLE_TIMEOUT, qmp.execute("quit", json!({}))).await;
    if tokio::time::timeout(SETTLE_TIMEOUT, vm.child.wait())
        .await
        .is_err()
    {
        let _ = vm.child.start_kill();
    }
}

/// Lets a VM whose save failed run on: the migration cancelled, the VM continued, its
/// init reseeded (it waits for that since the notice).
async fn undo(vm: &mut VmSandbox, qmp: &mut Qmp) -> Result<(), VmError> {
    let _ = qmp.execute("migrate_cancel", json!({})).await;
    let status = qmp.execute("query-status", json!({})).await?;
    if status.get("running").and_then(Value::as_bool) != Some(true) {
        qmp.execute("cont", json!({})).await?;
    }
    reseed(vm).await
}

/// Hands the restored (or continued) VM's init fresh entropy and the time, and reads
/// its Ready.
async fn reseed(vm: &mut VmSandbox) -> Result<(), VmError> {
    let channel = vm.channel.as_mut().ok_or(VmError::NoChannel)?;
    channel::reseed(channel, saved::fresh_entropy()?, saved::unix_time_ms()).await?;
    Ok(channel::expect_ready(channel).await?)
}

impl Qemu {
    /// A VM restored from what [`save`] wrote in `dir` (read, never changed), reseeded,
    /// within the boot timeout.
    pub(in crate::backend::vm) async fn restore(
        &self,
        host: &Host,
        dir: &Path,
    ) -> Result<VmSandbox, VmError> {
        let accel = self.accel(host).await;
        Machine::check(dir, &machine(host, accel)?)?;
        let state = saved::open(dir, STATE_FILE)?;
        let (mut vm, listeners) = self.start(host, accel, true).await?;
        let timeout = host.config.boot_timeout;
        let started = Instant::now();
        let restored = async {
            vm.accept(&listeners.agent).await?;
            let mut qmp = Qmp::new(vm.accept_control(&listeners.qmp).await?);
            let egress = vm.accept_control(&listeners.egress).await?;
            let migrated = async {
                qmp.send_fd(FD_NAME, state.as_fd()).await?;
                let uri = format!("fd:{FD_NAME}");
                qmp.execute("migrate-incoming", json!({ "uri": uri }))
                    .await?;
                migrated(&mut qmp).await?;
                qmp.execute("cont", json!({})).await?;
                Ok::<(), VmError>(())
            };
            // A load that fails ends QEMU.
            tokio::select! {
                done = migrated => done?,
                status = vm.child.wait() => {
                    return Err(BootError::VmmExited(describe(status)).into());
                }
            }
            vm.control = Some(Control::Qmp(qmp));
            reseed(&mut vm).await?;
            // The restored guest serves its tunnel again once told Reset (a session's
            // grant is given again by its owner).
            vm.attach_egress(egress, host.egress.as_deref(), None);
            Ok(())
        };
        let outcome = tokio::time::timeout(timeout, restored).await;
        let vm = vm.booted(outcome, timeout).await?;
        tracing::info!(
            vm = vm.id,
            restore_ms = started.elapsed().as_millis() as u64,
            "QEMU VM restored"
        );
        Ok(vm)
    }
}
