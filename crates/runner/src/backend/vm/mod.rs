//! The VM backend: each sandbox is a microVM of its own, booted from the image that
//! `sandbox-runner image build` makes, with the agent as the guest's init.
//!
//! One VM per run, under QEMU's `microvm` machine or Firecracker: one vCPU, the
//! configured guest memory, no network device, the root image read-only (shared by every
//! VM, never copied) and tmpfs for /tmp and home inside the guest. The VMM process runs
//! as a uid of its own in a cgroup of its own, with the CPU quota and a memory cap.
//!
//! Nothing outlives a sandbox: destroying it kills the VMM, removes its cgroup and its
//! folder (sockets and console log). The VMM gets SIGKILL when the runner dies
//! (`PR_SET_PDEATHSIG`; a jailed Firecracker excepted, see `host.rs`), and a runner that
//! starts again removes what a dead one left (cgroups with their processes, folders).
//!
//! What both VMMs share:
//! - `mod.rs`: the configuration ([`VmConfig`], [`Vmm`], [`AccelChoice`]) and
//!   [`VmBackend`], which checks the host, then hands each creation to the VMM in use;
//! - `error.rs`: [`VmError`], a variant per step that can fail;
//! - `image.rs`: [`VmImage`], the image's files and the lease that keeps it from being
//!   pruned;
//! - `host.rs`: the runner's VM folders and, per VM, an id, a folder, a cgroup and a uid,
//!   and starting the VMM inside them;
//! - `sandbox.rs`: [`VmSandbox`]: reaching the agent within the boot timeout, the job,
//!   destroying the VM;
//! - `saved.rs`: a VM saved whole, as a folder: the machine it was (`vm.json`), which a
//!   restore must match, and what a restored guest gets first (entropy, the time);
//! - `qmp.rs`: QEMU's machine protocol, by which a QEMU VM is saved and restored;
//! - `tunnel.rs`: a QEMU VM's egress tunnel, whose connections the runner's proxy serves
//!   as the VM sandbox's own (the guest has no network card).
//!
//! A VM can be saved whole into a folder ([`VmSandbox::save`]) and restored from it
//! ([`VmBackend::restore`]), by each VMM's own means (QEMU's migration to a file,
//! Firecracker's snapshot API): its memory, processes and devices, with fresh entropy
//! and the host's time in every restored guest.
//!
//! Each VMM, a type of its own:
//! - `qemu/`: [`qemu::Qemu`], QEMU's `microvm` under KVM or TCG (the accelerator probe,
//!   the boot; `command.rs`, its command line; `save.rs`, save and restore); the agent
//!   channel is a virtio serial port QEMU connects to a unix socket the runner listens
//!   on, QMP another;
//! - `firecracker/`: [`firecracker::Firecracker`], under its jailer, configured over its
//!   API, refilled from a snapshot template; the agent channel is vsock.

mod error;
pub mod firecracker;
mod host;
mod image;
pub mod qemu;
mod qmp;
mod sandbox;
mod saved;
mod tunnel;

pub use error::{ApiError, BootError, VmError};
pub use image::VmImage;
pub use sandbox::{VmSandbox, REPORT_GRACE};

use crate::backend::cgroup::CgroupLimits;
use crate::languages::{Language, Languages};
use firecracker::Firecracker;
use host::Host;
use qemu::Qemu;
use sandbox::Control;
use sandbox_egress::Egress;
use sandbox_protocol::Lang;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How many uids VMMs cycle through, from [`VmConfig::vmm_uid_base`] (which is also
/// their group under TCG).
pub const VMM_UIDS: u32 = 100_000;

/// Which virtual machine monitor runs the VMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Vmm {
    /// QEMU's `microvm` machine (KVM or TCG).
    Qemu,
    /// Firecracker (needs KVM).
    Firecracker,
}

/// How the VMM runs guest code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AccelChoice {
    /// KVM when a guest boots with it, TCG otherwise (probed once, at the first VM).
    Auto,
    /// Hardware virtualisation.
    Kvm,
    /// QEMU's emulator: slow, works everywhere.
    Tcg,
}

/// How VM sandboxes are made.
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// The VMM.
    pub vmm: Vmm,
    /// The accelerator, or how to choose it.
    pub accel: AccelChoice,
    /// The image folder (`vmlinux`, `initrd.img`, `rootfs.ext4`).
    pub image_dir: PathBuf,
    /// Where the cgroup hierarchies are mounted.
    pub cgroup_mount: PathBuf,
    /// The runner's state folder; `vm/` below it holds each VM's socket and console.
    pub state_dir: PathBuf,
    /// Guest memory in MiB: the sandbox's memory limit, plus room for the guest's
    /// kernel and init.
    pub guest_memory_mb: u64,
    /// The limits of the sandbox's cgroup inside the guest (the guest kernel's cgroup
    /// v2): what the program gets.
    pub sandbox_limits: CgroupLimits,
    /// The VMM process's cgroup on the host, the outer bound: guest memory plus the
    /// VMM's own, one CPU (the guest's one vCPU), threads.
    pub vmm_limits: CgroupLimits,
    /// Size of the sandbox's /tmp, and of its home folder, in MiB.
    pub tmpfs_mb: u64,
    /// Modules a warm Python interpreter imports while it waits.
    pub warm_imports: Vec<String>,
    /// The languages offered: what a VM prepared for one starts.
    pub languages: Arc<Languages>,
    /// How long booting a VM to its agent may take.
    pub boot_timeout: Duration,
    /// The first of the host uids VMM processes run as, one per VM (modulo
    /// [`VMM_UIDS`]), so that no two VMMs share a uid.
    pub vmm_uid_base: u32,
    /// How Firecracker is run (with `--vmm firecracker`).
    pub firecracker: firecracker::FirecrackerConfig,
}

impl VmConfig {
    /// The offered language a VM is prepared for (none: a bare VM).
    pub fn language(&self, prepare: Option<&Lang>) -> Option<&Language> {
        prepare.and_then(|lang| self.languages.get(lang.as_str()).ok())
    }
}

/// What a VM is made ready for: the language whose interpreter waits for the program
/// (none: a bare VM) and whether a Python one imports the warm imports first (the
/// pool asks for those for programs that use the data stack, see
/// [`DataStack`](crate::data_stack::DataStack)).
#[derive(Debug, Clone, Default)]
pub(crate) struct Prepare {
    lang: Option<Lang>,
    warm: bool,
}

/// Makes VM sandboxes: the host side both VMMs share, and the VMM in use.
pub struct VmBackend {
    host: Host,
    vmm: Monitor,
}

/// The VMM in use, with what it keeps between VMs.
enum Monitor {
    Qemu(Qemu),
    Firecracker(Firecracker),
}

impl VmBackend {
    /// Checks what the backend needs (root, the VMM, the image, cgroups), cleans up after
    /// dead runners, and makes this runner's state folder.
    pub fn new(config: VmConfig, egress: Option<Arc<Egress>>) -> Result<Self, VmError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(VmError::NotRoot);
        }
        match config.vmm {
            Vmm::Qemu => Qemu::check(&config)?,
            Vmm::Firecracker => Firecracker::check(&config)?,
        }
        let vmm = match config.vmm {
            Vmm::Qemu => Monitor::Qemu(Qemu::new(&config)),
            Vmm::Firecracker => Monitor::Firecracker(Firecracker::new()),
        };
        let host = Host::open(config, egress)?;
        tracing::info!(
            vmm = ?host.config.vmm,
            image = %host.image.rootfs.display(),
            accel = ?host.config.accel,
            "vm backend ready"
        );
        Ok(VmBackend { host, vmm })
    }

    /// Boots one VM (or restores one from the snapshot) and waits for its agent's Ready
    /// (and, with `prepare`, for its interpreter to wait for the program, having imported
    /// the warm imports if `warm`).
    pub async fn create(&self, prepare: Option<Lang>, warm: bool) -> Result<VmSandbox, VmError> {
        let prepare = Prepare {
            lang: prepare,
            warm,
        };
        match &self.vmm {
            Monitor::Qemu(qemu) => qemu.create(&self.host, prepare).await,
            Monitor::Firecracker(firecracker) => firecracker.create(&self.host, prepare).await,
        }
    }

    /// A VM restored from what [`VmSandbox::save`] wrote in `dir` (only read: a fork
    /// restores one folder several times at once), with fresh entropy and the host's
    /// time, within the boot timeout; refused if this backend would not make the same
    /// machine (VMM, accelerator, guest memory, image).
    pub async fn restore(&self, dir: &Path) -> Result<VmSandbox, VmError> {
        match &self.vmm {
            Monitor::Qemu(qemu) => qemu.restore(&self.host, dir).await,
            Monitor::Firecracker(firecracker) => firecracker.restore(&self.host, dir).await,
        }
    }

    /// Kills every VMM process of this runner (their runs fail at once).
    pub fn kill_all(&self) {
        self.host.kill_all();
    }

    /// Removes this runner's cgroup folders and state folder (every sandbox must be
    /// destroyed first).
    pub fn shutdown(&self) {
        self.host.shutdown();
    }
}

impl VmSandbox {
    /// Saves the VM whole (the guest's memory and devices, with its VMM's own
    /// snapshot) into `dir`, a folder of the runner's, empty: the bytes written. The VM
    /// is spent after it. After an error a QEMU VM runs on as it was (the save is undone)
    /// and a Firecracker one is spent. `None`: this VM cannot be saved (nothing done).
    pub async fn save(&mut self, dir: &Path) -> Result<Option<u64>, VmError> {
        match self.control.take() {
            Some(Control::Qmp(qmp)) => qemu::save(self, qmp, dir).await.map(Some),
            Some(Control::Firecracker { api, root, jailed }) => {
                firecracker::save(self, &api, &root, jailed, dir)
                    .await
                    .map(Some)
            }
            None => Ok(None),
        }
    }
}
