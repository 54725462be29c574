//! Firecracker: one microVM per sandbox, started through its jailer (or directly where
//! the operator says so), configured over its API socket, with the agent on vsock.
//!
//! The agent connects from the guest to port [`AGENT_PORT`] of the host; Firecracker
//! turns that into a connection to the unix socket `<uds_path>_<port>`, which the
//! runner listens on before the VM starts.
//!
//! **Snapshots.** With snapshots on, the backend boots one template VM, waits for its
//! agent, tells it a snapshot is coming (the agent then lets its connection go and keeps
//! reconnecting), pauses it and snapshots it (the guest's memory and the VM's state),
//! then kills it. Every later sandbox is restored from that snapshot: the restored agent
//! reconnects, and the runner hands it fresh entropy from the host before anything else
//! ([`Reseed`](sandbox_protocol::agent::Reseed)), which the agent credits to the guest
//! kernel's pool and reseeds its generator with. So siblings share no random-number
//! state, the hazard Firecracker's snapshot documentation warns of; and nothing else
//! they share is secret: the template never ran a job, started no interpreter, holds no
//! token. Interpreters (Prepare) start after the restore.
//!
//! - `mod.rs`: [`FirecrackerConfig`], the checks at start, and [`Firecracker`], which
//!   makes each sandbox (restored or cold) and the template;
//! - `layout.rs`: the jail (or folder) of one VM, and the jailer's command line;
//! - `api.rs`: the client of Firecracker's API socket;
//! - `snapshot.rs`: the template's snapshot, taken and restored;
//! - `save.rs`: a session's VM saved whole and restored (untested without KVM);
//! - `launch.rs`: starting one VMM, and the API calls of a cold boot.

mod api;
mod launch;
mod layout;
mod save;
mod snapshot;

pub(super) use save::save;

use super::error::io_error;
use super::host::{open_kvm, Host};
use super::saved;
use super::{AccelChoice, Prepare, VmConfig, VmError, VmImage, VmSandbox};
use crate::backend::channel;
use launch::Launched;
use snapshot::Template;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio::sync::OnceCell;

/// The vsock port of the host the agent connects to.
pub const AGENT_PORT: u32 = 1024;

/// How Firecracker is run.
#[derive(Debug, Clone)]
pub struct FirecrackerConfig {
    /// The `firecracker` binary.
    pub binary: PathBuf,
    /// The `jailer` binary; `None` runs Firecracker directly (the operator's choice).
    pub jailer: Option<PathBuf>,
    /// Refill the pool by restoring a snapshot rather than by booting.
    pub snapshots: bool,
}

/// How a Firecracker VM starts.
enum Start<'a> {
    /// Boots the kernel.
    Cold,
    /// Restores the template's snapshot.
    Restore(&'a Template),
}

/// The Firecracker side of the backend: the snapshot template, made at the first
/// creation.
pub struct Firecracker {
    /// `None`: snapshots are off, or the template could not be made and VMs boot cold.
    template: OnceCell<Option<Template>>,
}

impl Firecracker {
    /// Checks what `--vmm firecracker` needs: its binaries, KVM, and for the jailer the
    /// image on the state folder's file system (files are hard-linked into each jail).
    pub(super) fn check(config: &VmConfig) -> Result<(), VmError> {
        use std::os::unix::fs::MetadataExt;
        let fc = &config.firecracker;
        for binary in std::iter::once(&fc.binary).chain(fc.jailer.as_ref()) {
            if !binary.is_file() {
                return Err(VmError::NoFirecracker(binary.clone()));
            }
        }
        if config.accel == AccelChoice::Tcg {
            return Err(VmError::FirecrackerTcg);
        }
        open_kvm().map_err(VmError::NoKvm)?;
        if fc.jailer.is_some() {
            fs::create_dir_all(&config.state_dir)
                .map_err(io_error("creating", &config.state_dir))?;
            let device = |path: &Path| {
                fs::metadata(path)
                    .map(|m| m.dev())
                    .map_err(io_error("reading", path))
            };
            let image = VmImage::open(&config.image_dir)?;
            if device(&image.rootfs)? != device(&config.state_dir)? {
                return Err(VmError::HardLink {
                    file: image.rootfs,
                    link: config.state_dir.clone(),
                    source: io::Error::from(io::ErrorKind::CrossesDevices),
                });
            }
        }
        Ok(())
    }

    /// The Firecracker side, with no template yet.
    pub(super) fn new() -> Firecracker {
        Firecracker {
            template: OnceCell::new(),
        }
    }

    /// A Firecracker sandbox: restored from the template when snapshots are on and the
    /// template could be made, booted cold otherwise.
    pub(super) async fn create(&self, host: &Host, prepare: Prepare) -> Result<VmSandbox, VmError> {
        let template = match host.config.firecracker.snapshots {
            true => self.template.get_or_init(|| make_template(host)).await,
            false => &None,
        };
        let start = match template {
            Some(template) => Start::Restore(template),
            None => Start::Cold,
        };
        let timeout = host.config.boot_timeout;
        let machine = save::machine(host)?;
        let launched = launch::launch(host).await?;
        let control = save::control(&launched);
        let Launched {
            mut sandbox,
            mut api,
            layout,
            listener,
            ..
        } = launched;
        sandbox.machine = Some(machine);
        sandbox.control = Some(control);
        let started = Instant::now();
        let ready = async {
            match start {
                Start::Cold => {
                    launch::boot_cold(host, &mut api, &layout).await?;
                    sandbox.accept(&listener).await?;
                }
                Start::Restore(template) => {
                    template.restore(&mut api, &layout).await?;
                    sandbox.accept(&listener).await?;
                    let channel = sandbox.channel.as_mut().ok_or(VmError::NoChannel)?;
                    let entropy = saved::fresh_entropy()?;
                    channel::reseed(channel, entropy, saved::unix_time_ms()).await?;
                }
            }
            host.ready(&mut sandbox, &prepare).await
        };
        let outcome = tokio::time::timeout(timeout, ready).await;
        let sandbox = sandbox.booted(outcome, timeout).await?;
        tracing::debug!(
            vm = sandbox.id,
            restored = template.is_some(),
            ready_ms = started.elapsed().as_millis() as u64,
            "Firecracker VM ready"
        );
        Ok(sandbox)
    }
}

/// Boots the template VM to its agent and snapshots it; `None` (every VM then boots
/// cold) if that fails.
async fn make_template(host: &Host) -> Option<Template> {
    match tokio::time::timeout(host.config.boot_timeout, take_template(host)).await {
        Ok(Ok(template)) => Some(template),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "no snapshot template: every VM boots cold");
            None
        }
        Err(_) => {
            tracing::warn!("the snapshot template took too long: every VM boots cold");
            None
        }
    }
}

async fn take_template(host: &Host) -> Result<Template, VmError> {
    let Launched {
        mut sandbox,
        mut api,
        layout,
        listener,
        gid,
        ..
    } = launch::launch(host).await?;
    let taken = async {
        launch::boot_cold(host, &mut api, &layout).await?;
        sandbox.accept(&listener).await?;
        sandbox.ready(None, &[]).await?;
        let channel = sandbox.channel.as_mut().ok_or(VmError::NoChannel)?;
        channel::announce_snapshot(channel, false).await?;
        // The agent now keeps reconnecting: nobody listens until a restored VM's
        // runner does.
        sandbox.channel = None;
        drop(listener);
        let _ = fs::remove_file(layout.agent_socket());
        Template::take(&mut api, &layout, &host.instance_dir.join("template"), gid).await
    };
    let result = taken.await;
    match result {
        Ok(template) => {
            sandbox.destroy().await;
            Ok(template)
        }
        Err(e) => Err(sandbox.fail(e).await),
    }
}
