//! The VM backend: each sandbox is a microVM of its own, booted from the image that
//! `sandbox-runner image build` makes, with the agent as the guest's init.
//!
//! One VM per run: QEMU's `microvm` machine with one vCPU, the configured guest memory,
//! no network device, the root image read-only (shared by every VM, never copied) and
//! tmpfs for /tmp and home inside the guest. The VMM process runs in a cgroup of its
//! own with the CPU quota and a memory cap. The agent channel is a virtio serial port
//! that QEMU connects to a unix socket the runner listens on.
//!
//! Nothing outlives a sandbox: destroying it kills QEMU, removes its cgroup and its
//! folder (socket and console log). QEMU gets SIGKILL when the runner dies
//! (`PR_SET_PDEATHSIG`), and a runner that starts again removes what a dead one left
//! (cgroups with their processes, folders).

pub mod firecracker;
mod qemu;

use super::cgroup::{self, Cgroup, CgroupError, CgroupLimits, Hierarchy};
use super::channel::{self, ChannelError};
use super::RunOutcome;
use sandbox_protocol::agent::Job;
use sandbox_protocol::Lang;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{UnixListener, UnixStream};
use tokio::process::Child;
use tokio::sync::OnceCell;

/// How long the agent may take, past the job's own timeout, to report.
const REPORT_GRACE: Duration = Duration::from_secs(10);
/// How long a KVM guest may take to reach its agent before `--accel auto` falls back
/// to TCG (a working KVM boots this kernel in well under a second).
const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many uids VMMs cycle through, from [`VmConfig::vmm_uid_base`] (which is also
/// their group under TCG).
pub const VMM_UIDS: u32 = 100_000;
/// The most bytes of the console log and QEMU's messages put in an error.
const LOG_TAIL: usize = 2048;

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

/// The accelerator in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation.
    Kvm,
    /// QEMU's emulator.
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
    /// Guest memory in MiB.
    pub memory_mb: u64,
    /// The VMM process's cgroup: guest memory plus the VMM's own, CPU quota, threads.
    pub vmm_limits: CgroupLimits,
    /// Size of the guest's /tmp, and of its home folder, in MiB.
    pub tmpfs_mb: u64,
    /// Most processes of the job inside the guest.
    pub pids_max: u64,
    /// How long booting a VM to its agent may take.
    pub boot_timeout: Duration,
    /// The first of the host uids QEMU processes run as, one per VM (modulo
    /// [`VMM_UIDS`]), so that no two VMMs share a uid.
    pub vmm_uid_base: u32,
    /// How Firecracker is run (with `--vmm firecracker`).
    pub firecracker: firecracker::FirecrackerConfig,
}

/// Why a VM sandbox could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// The runner is not root, which the VMM cgroups need.
    #[error("the vm backend needs root (euid 0) to put each VMM in a cgroup")]
    NotRoot,
    /// The VMM binary is not installed.
    #[error("{0} is not on PATH (Debian: apt-get install qemu-system-x86)")]
    NoVmm(&'static str),
    /// A Firecracker binary is missing.
    #[error(
        "{0} not found: install firecracker and jailer from Firecracker's releases \
         (see docs/operations.md), or point --firecracker-bin / --jailer-bin at them"
    )]
    NoFirecracker(PathBuf),
    /// Firecracker runs guests with KVM only.
    #[error("--vmm firecracker needs KVM: --accel tcg is QEMU's alone")]
    FirecrackerTcg,
    /// A file could not be hard-linked into a jail.
    #[error(
        "linking {file} into the jail as {link}: {source} (the jailer needs the image and \
         the state folder on one file system: set RUNNER_STATE_DIR or RUNNER_VM_IMAGE)"
    )]
    HardLink {
        file: PathBuf,
        link: PathBuf,
        source: io::Error,
    },
    /// The image could not be leased (see `image prune`).
    #[error(transparent)]
    ImageLease(#[from] crate::image::ImageError),
    /// Firecracker's API refused a request.
    #[error("Firecracker API: {0}")]
    Api(String),
    /// KVM was asked for and /dev/kvm cannot be used.
    #[error("--accel kvm: opening /dev/kvm: {0}")]
    NoKvm(io::Error),
    /// /dev/kvm is not open to a group QEMU can run in.
    #[error(
        "/dev/kvm has mode {0:o} and group {1}: the VMM runs unprivileged and needs a \
         non-root group with read-write access (Debian's udev rule makes it root:kvm \
         0660; or chgrp kvm /dev/kvm && chmod 0660 /dev/kvm)"
    )]
    KvmGroup(u32, u32),
    /// An image file is missing.
    #[error("VM image file {path}: {source} (build it with `sandbox-runner image build`)")]
    Image { path: PathBuf, source: io::Error },
    /// A cgroup step failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// A folder or socket of the VM could not be made or removed.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The VMM could not be started.
    #[error("starting {0}: {1}")]
    Spawn(String, io::Error),
    /// The VM did not reach its agent; the message holds what the VM and VMM said.
    #[error("the VM did not boot to its agent: {0}")]
    Boot(String),
    /// The exchange with the agent failed.
    #[error(transparent)]
    Channel(#[from] ChannelError),
    /// The VM has no channel to its agent (it never became ready).
    #[error("the VM has no channel to its agent")]
    NoChannel,
}

fn io_error<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> VmError + 'a {
    move |source| VmError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// The three files a VM boots from, and the lease that keeps the image from being pruned
/// while this runner uses it.
#[derive(Debug)]
pub struct VmImage {
    /// The kernel.
    pub kernel: PathBuf,
    /// The initramfs (the agent as init, and modules).
    pub initrd: PathBuf,
    /// The read-only root image.
    pub rootfs: PathBuf,
    /// Held while the image is in use (`None`: a folder not made by `image build`,
    /// which pruning never touches).
    _lease: Option<crate::image::Lease>,
}

impl VmImage {
    /// Finds the image's files in `dir`, following a `current` link once, so that a
    /// later build does not change the image under a running runner.
    pub fn open(dir: &Path) -> Result<VmImage, VmError> {
        let dir = fs::canonicalize(dir).map_err(|source| VmError::Image {
            path: dir.to_owned(),
            source,
        })?;
        let file = |name: &str| {
            let path = dir.join(name);
            fs::metadata(&path)
                .map(|_| path.clone())
                .map_err(|source| VmError::Image { path, source })
        };
        let leased = dir.join(crate::image::INFO_FILE).exists();
        Ok(VmImage {
            kernel: file(crate::image::KERNEL_FILE)?,
            initrd: file(crate::image::INITRD_FILE)?,
            rootfs: file(crate::image::ROOTFS_FILE)?,
            _lease: match leased {
                true => Some(crate::image::lease(&dir)?),
                false => None,
            },
        })
    }
}

/// Makes VM sandboxes.
pub struct VmBackend {
    config: VmConfig,
    image: VmImage,
    hierarchy: Arc<Hierarchy>,
    /// This runner's folder of VM folders.
    instance_dir: PathBuf,
    accel: OnceCell<Accel>,
    /// Extra kernel command line for TCG guests (their clock calibration).
    tcg_cmdline: String,
    next_id: AtomicU64,
    /// Firecracker's snapshot template, made at the first creation (`None`: snapshots
    /// are off, or the template could not be made and VMs boot cold).
    template: OnceCell<Option<firecracker::Template>>,
}

impl VmBackend {
    /// Checks what the backend needs (root, the VMM, the image, cgroups), cleans up after
    /// dead runners, and makes this runner's state folder.
    pub fn new(config: VmConfig) -> Result<Self, VmError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(VmError::NotRoot);
        }
        match config.vmm {
            Vmm::Qemu => {
                if !on_path(qemu::QEMU) {
                    return Err(VmError::NoVmm(qemu::QEMU));
                }
                if config.accel == AccelChoice::Kvm {
                    open_kvm().map_err(VmError::NoKvm)?;
                }
            }
            Vmm::Firecracker => check_firecracker(&config)?,
        }
        let image = VmImage::open(&config.image_dir)?;
        let instance = cgroup::instance_name();
        let hierarchy = Hierarchy::open(&config.cgroup_mount, &instance)?;
        let removed = hierarchy.remove_stale()?;
        if removed > 0 {
            tracing::warn!(removed, "removed VMs left behind by a runner that died");
        }
        let vm_root = config.state_dir.join("vm");
        remove_stale_dirs(&vm_root, &instance)?;
        let instance_dir = vm_root.join(&instance);
        fs::create_dir_all(&instance_dir).map_err(io_error("creating", &instance_dir))?;
        let accel = OnceCell::new();
        if config.accel == AccelChoice::Tcg {
            let _ = accel.set(Accel::Tcg);
        } else if config.accel == AccelChoice::Kvm || config.vmm == Vmm::Firecracker {
            let _ = accel.set(Accel::Kvm);
        }
        tracing::info!(
            vmm = ?config.vmm,
            image = %image.rootfs.display(),
            accel = ?config.accel,
            "vm backend ready"
        );
        Ok(VmBackend {
            tcg_cmdline: tsc_cmdline(),
            config,
            image,
            hierarchy: Arc::new(hierarchy),
            instance_dir,
            accel,
            next_id: AtomicU64::new(1),
            template: OnceCell::new(),
        })
    }

    /// Boots one VM (or restores one from the snapshot) and waits for its agent's Ready
    /// (and, with `prepare`, for its interpreter to wait for the program).
    pub async fn create(&self, prepare: Option<Lang>) -> Result<VmSandbox, VmError> {
        match self.config.vmm {
            Vmm::Qemu => {
                let accel = *self.accel.get_or_init(|| self.detect_accel()).await;
                self.boot(accel, self.config.boot_timeout, prepare).await
            }
            Vmm::Firecracker => self.create_firecracker(prepare).await,
        }
    }

    /// A new VM's id, cgroup and user; its folder (`dir_for` its name) is made and
    /// handed to the user.
    async fn allocate(
        &self,
        dir_for: impl FnOnce(&str) -> PathBuf,
        gid: u32,
    ) -> Result<Allocated, VmError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let name = format!("vm{id}");
        let dir = dir_for(&name);
        fs::create_dir_all(&dir).map_err(io_error("creating", &dir))?;
        let mut leftovers = Leftovers {
            cgroup: None,
            dir: Some(dir.clone()),
        };
        let hierarchy = self.hierarchy.clone();
        let limits = self.config.vmm_limits;
        let cgroup_name = name.clone();
        let cgroup = tokio::task::spawn_blocking(move || hierarchy.create(&cgroup_name, &limits))
            .await
            .map_err(|e| VmError::Boot(format!("cgroup task: {e}")))??;
        let procs = cgroup.procs_files();
        leftovers.cgroup = Some(cgroup);
        let user = VmmUser {
            uid: self.config.vmm_uid_base + (id % u64::from(VMM_UIDS)) as u32,
            gid,
        };
        user.own(&dir)?;
        Ok(Allocated {
            id,
            name,
            dir,
            leftovers,
            procs,
            user,
        })
    }

    /// For `--accel auto`: KVM if /dev/kvm opens and a guest boots with it in time.
    /// A nested host can offer /dev/kvm on which a standard guest never boots, so
    /// only a real boot tells.
    async fn detect_accel(&self) -> Accel {
        if let Err(e) = open_kvm() {
            tracing::info!(reason = %e, "accel: tcg (no usable /dev/kvm)");
            return Accel::Tcg;
        }
        match self.boot(Accel::Kvm, KVM_PROBE_TIMEOUT, None).await {
            Ok(probe) => {
                probe.destroy().await;
                tracing::info!("accel: kvm (a probe VM booted)");
                Accel::Kvm
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "accel: tcg (/dev/kvm opens, but a probe VM failed with KVM or did \
                     not reach its agent within {KVM_PROBE_TIMEOUT:?}); set --accel to \
                     skip the probe"
                );
                Accel::Tcg
            }
        }
    }

    async fn boot(
        &self,
        accel: Accel,
        timeout: Duration,
        prepare: Option<Lang>,
    ) -> Result<VmSandbox, VmError> {
        let gid = match accel {
            Accel::Kvm => kvm_gid()?,
            Accel::Tcg => self.config.vmm_uid_base,
        };
        let vm = self
            .allocate(|name| self.instance_dir.join(name), gid)
            .await?;
        let socket = vm.dir.join("agent.sock");
        let listener = UnixListener::bind(&socket).map_err(io_error("listening on", &socket))?;
        vm.user.own(&socket)?;
        let console = vm.dir.join("console.log");
        let cmdline = self.cmdline(accel);
        let spec = qemu::QemuSpec {
            image: &self.image,
            accel,
            memory_mb: self.config.memory_mb,
            socket: &socket,
            console: &console,
            cmdline: &cmdline,
        };
        let cmd = qemu::command(&spec);
        let log = Stdio::from(create_file(&vm.dir.join("vmm.log"))?);
        let child = spawn_in_cgroup(cmd, &vm.procs, Some(vm.user), Stdio::null(), log)?;
        let mut sandbox = VmSandbox {
            id: vm.id,
            child,
            channel: None,
            leftovers: vm.leftovers,
        };
        let started = Instant::now();
        let ready = async {
            sandbox.accept(&listener).await?;
            sandbox.ready(prepare).await
        };
        let outcome = tokio::time::timeout(timeout, ready).await;
        let sandbox = sandbox.booted(outcome, timeout).await?;
        tracing::debug!(
            vm = vm.id,
            ?accel,
            boot_ms = started.elapsed().as_millis() as u64,
            "VM ready"
        );
        Ok(sandbox)
    }

    /// The guest kernel's command line, without the VMM's own part.
    fn common_cmdline(&self) -> String {
        format!(
            "console=ttyS0 quiet panic=-1 rdinit=/init sandbox.tmpfs_mb={} sandbox.pids_max={}",
            self.config.tmpfs_mb, self.config.pids_max
        )
    }

    fn cmdline(&self, accel: Accel) -> String {
        let mut cmdline = self.common_cmdline();
        if accel == Accel::Tcg {
            cmdline.push(' ');
            cmdline.push_str(&self.tcg_cmdline);
        }
        cmdline.push_str(" -- ");
        cmdline.push_str(sandbox_agent::init::INIT_ARG);
        cmdline
    }

    /// Kills every VMM process of this runner (their runs fail at once).
    pub fn kill_all(&self) {
        self.hierarchy.kill_all();
    }

    /// Removes this runner's cgroup folders and state folder (every sandbox must be
    /// destroyed first).
    pub fn shutdown(&self) {
        if let Err(e) = self.hierarchy.remove_instance() {
            tracing::warn!(error = %e, "cgroup folders left behind");
        }
        if let Err(e) = fs::remove_dir_all(&self.instance_dir) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(error = %e, dir = %self.instance_dir.display(), "VM state left behind");
            }
        }
    }
}

/// A TCG guest's kernel can hang calibrating its clock against the emulated PIT; told
/// the TSC rate (the host's, which TCG passes through), it skips the calibration. And
/// since the emulated CPU does not claim an invariant TSC, the kernel would fall back
/// to a jiffies clock (4 ms steps, lost ticks when QEMU is throttled) unless told the
/// TSC is reliable, which the host's TSC, read through TCG, is.
fn tsc_cmdline() -> String {
    let khz = fs::read_to_string("/proc/cpuinfo").ok().and_then(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("cpu MHz"))
            .and_then(|rest| {
                rest.trim_start_matches([' ', '\t', ':'])
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map(|mhz| (mhz * 1000.0).round() as u64)
    });
    match khz {
        Some(khz) => format!("tsc_early_khz={khz} tsc=reliable"),
        None => "tsc=reliable".to_owned(),
    }
}

fn open_kvm() -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Removes the VM folders of runner instances that are no longer alive.
fn remove_stale_dirs(vm_root: &Path, instance: &str) -> Result<(), VmError> {
    let entries = match fs::read_dir(vm_root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("reading", vm_root)(e)),
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let alive = name
            .strip_prefix('r')
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if name != instance && !alive {
            let path = entry.path();
            fs::remove_dir_all(&path).map_err(io_error("removing stale", &path))?;
        }
    }
    Ok(())
}

/// The unprivileged user and group a VMM runs as: a uid of its own, so that no two
/// VMMs can signal or trace each other; the group that owns /dev/kvm under KVM.
#[derive(Debug, Clone, Copy)]
struct VmmUser {
    uid: u32,
    gid: u32,
}

impl VmmUser {
    /// Hands `path` to this user.
    fn own(&self, path: &Path) -> Result<(), VmError> {
        nix::unistd::chown(path, Some(self.uid.into()), Some(self.gid.into()))
            .map_err(|e| io_error("handing to the VMM user", path)(e.into()))
    }
}

/// What every VM has before its VMM starts.
struct Allocated {
    id: u64,
    /// `vm<id>`.
    name: String,
    dir: PathBuf,
    leftovers: Leftovers,
    /// The `cgroup.procs` files of its cgroup.
    procs: Vec<PathBuf>,
    user: VmmUser,
}

fn create_file(path: &Path) -> Result<fs::File, VmError> {
    fs::File::create(path).map_err(io_error("creating", path))
}

/// Checks what `--vmm firecracker` needs: its binaries, KVM, and for the jailer the
/// image on the state folder's file system (files are hard-linked into each jail).
fn check_firecracker(config: &VmConfig) -> Result<(), VmError> {
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
        fs::create_dir_all(&config.state_dir).map_err(io_error("creating", &config.state_dir))?;
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

/// The group that owns /dev/kvm, which must be able to read and write it.
fn kvm_gid() -> Result<u32, VmError> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata("/dev/kvm").map_err(io_error("reading", Path::new("/dev/kvm")))?;
    if meta.mode() & 0o060 != 0o060 || meta.gid() == 0 {
        return Err(VmError::KvmGroup(meta.mode() & 0o777, meta.gid()));
    }
    Ok(meta.gid())
}

/// Starts the VMM in its cgroup (it joins before exec, so that every thread it makes is
/// counted), killed with the runner, as `user` (never root) unless it is the jailer,
/// which drops to the VMM's user itself. The death signal does not survive the jailer's
/// change of user: a jailed VMM outlives a killed runner until its agent notices (it
/// then resets the VM, which ends Firecracker) or the next runner removes its cgroup.
fn spawn_in_cgroup(
    mut cmd: tokio::process::Command,
    procs: &[PathBuf],
    user: Option<VmmUser>,
    stdout: Stdio,
    stderr: Stdio,
) -> Result<Child, VmError> {
    let procs: Vec<OwnedFd> = procs
        .iter()
        .map(|p| {
            fs::OpenOptions::new()
                .write(true)
                .open(p)
                .map(OwnedFd::from)
                .map_err(io_error("opening", p))
        })
        .collect::<Result<_, _>>()?;
    let raw: Vec<i32> = procs.iter().map(|fd| fd.as_raw_fd()).collect();
    cmd.env_clear()
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true);
    if let Some(user) = user {
        cmd.uid(user.uid).gid(user.gid);
    }
    // SAFETY: the closure runs in the forked child before exec and only calls write
    // and prctl, which are async-signal-safe, on descriptors opened before the fork;
    // it allocates nothing. It runs after the switch to `user` (so the death signal
    // is not cleared by it); the cgroup files were opened as root.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &raw {
                // "0" moves the writing process itself into the cgroup.
                if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    let child = cmd.spawn().map_err(|e| VmError::Spawn(program, e))?;
    drop(procs);
    Ok(child)
}

/// What a VM leaves on the host until it is destroyed: its cgroup and its folder.
/// Removed on destroy, and on drop should a sandbox be dropped without it.
struct Leftovers {
    cgroup: Option<Cgroup>,
    dir: Option<PathBuf>,
}

impl Leftovers {
    fn remove(&mut self) {
        if let Some(cgroup) = self.cgroup.take() {
            if let Err(e) = cgroup.kill_and_remove() {
                tracing::error!(error = %e, "VM cgroup left behind");
            }
        }
        if let Some(dir) = self.dir.take() {
            if let Err(e) = fs::remove_dir_all(&dir) {
                tracing::error!(error = %e, dir = %dir.display(), "VM folder left behind");
            }
        }
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        self.remove();
    }
}

/// One warm VM: its QEMU process, the channel to its agent, and what to remove.
pub struct VmSandbox {
    id: u64,
    child: Child,
    channel: Option<UnixStream>,
    leftovers: Leftovers,
}

impl VmSandbox {
    /// Accepts the VMM's connection to the agent's channel; fails early if the VMM
    /// exits.
    async fn accept(&mut self, listener: &UnixListener) -> Result<(), VmError> {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            status = self.child.wait() => {
                return Err(VmError::Boot(format!("the VMM exited ({})", describe(status))));
            }
        };
        let (channel, _) =
            accepted.map_err(|e| VmError::Boot(format!("accepting the VMM: {e}")))?;
        self.channel = Some(channel);
        Ok(())
    }

    /// Reads the agent's Ready (twice with `prepare`); fails early if the VMM exits.
    async fn ready(&mut self, prepare: Option<Lang>) -> Result<(), VmError> {
        let channel = self.channel.as_mut().ok_or(VmError::NoChannel)?;
        let ready = async {
            channel::expect_ready(channel).await?;
            match prepare {
                Some(lang) => channel::prepare(channel, lang).await,
                None => Ok(()),
            }
        };
        tokio::select! {
            ready = ready => ready.map_err(|e| VmError::Boot(e.to_string())),
            status = self.child.wait() => {
                Err(VmError::Boot(format!("the VMM exited ({})", describe(status))))
            }
        }
    }

    /// What a boot bounded by `timeout` came to: the sandbox, or the error with what the
    /// VM said (the VM is then destroyed).
    async fn booted(
        self,
        outcome: Result<Result<(), VmError>, tokio::time::error::Elapsed>,
        timeout: Duration,
    ) -> Result<VmSandbox, VmError> {
        match outcome {
            Ok(Ok(())) => Ok(self),
            Ok(Err(e)) => Err(self.fail(e).await),
            Err(_) => {
                let e = VmError::Boot(format!("no Ready from the agent within {timeout:?}"));
                Err(self.fail(e).await)
            }
        }
    }

    /// Destroys a VM that failed to boot, and puts what QEMU and the guest's console
    /// said into the error.
    async fn fail(mut self, e: VmError) -> VmError {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        let said = self.last_words();
        self.destroy().await;
        match (e, said.is_empty()) {
            (e, true) => e,
            (VmError::Boot(m), false) => VmError::Boot(format!("{m}; the VM said: {said}")),
            (e, false) => VmError::Boot(format!("{e}; the VM said: {said}")),
        }
    }

    /// The ends of the VMM's messages and of the guest console.
    fn last_words(&self) -> String {
        let Some(dir) = &self.leftovers.dir else {
            return String::new();
        };
        ["vmm.log", "console.log"]
            .iter()
            .filter_map(|name| fs::read(dir.join(name)).ok())
            .map(|bytes| {
                let tail = &bytes[bytes.len().saturating_sub(LOG_TAIL)..];
                String::from_utf8_lossy(tail).trim().to_owned()
            })
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// Sends the job and waits for the result. The VM is spent: destroy must follow.
    pub async fn run(&mut self, job: Job) -> Result<RunOutcome, VmError> {
        let channel = self.channel.as_mut().ok_or(VmError::NoChannel)?;
        let job = channel::run_job(channel, &job, REPORT_GRACE).await?;
        // The agent is alone in its kernel: its count of OOM kills is exact.
        let oom_killed = job.oom_killed.unwrap_or(false);
        Ok(RunOutcome { job, oom_killed })
    }

    /// Kills QEMU, then removes the VM's cgroup and folder.
    pub async fn destroy(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        let mut leftovers = Leftovers {
            cgroup: self.leftovers.cgroup.take(),
            dir: self.leftovers.dir.take(),
        };
        let id = self.id;
        if let Err(e) = tokio::task::spawn_blocking(move || leftovers.remove()).await {
            tracing::error!(vm = id, error = %e, "VM removal task failed");
        }
    }
}

fn describe(status: io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(e) => e.to_string(),
    }
}
