//! What a VM takes from the host, the same for both VMMs: the runner's folder of VM
//! folders, and for each VM an id, a folder, a cgroup with the VMM's limits and a uid
//! of its own; starting the VMM inside them; the group /dev/kvm belongs to. A runner
//! that starts again first removes what a dead one left (cgroups, folders).

use super::error::io_error;
use super::sandbox::{Leftovers, VmSandbox};
use super::{BootError, Prepare, VmConfig, VmError, VmImage, VMM_UIDS};
use crate::backend::cgroup::{self, Hierarchy};
use sandbox_egress::Egress;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::process::Child;

/// The host side of the backend, shared by the VMMs.
pub(super) struct Host {
    pub(super) config: VmConfig,
    pub(super) image: VmImage,
    hierarchy: Arc<Hierarchy>,
    /// This runner's folder of VM folders.
    pub(super) instance_dir: PathBuf,
    next_id: AtomicU64,
    /// The runner's egress proxy, where the operator opened hosts: a QEMU VM's tunnel is
    /// served by it.
    pub(super) egress: Option<Arc<Egress>>,
}

impl Host {
    /// Leases the image, opens the cgroup hierarchy, removes what dead runners left,
    /// and makes this runner's state folder.
    pub(super) fn open(config: VmConfig, egress: Option<Arc<Egress>>) -> Result<Host, VmError> {
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
        Ok(Host {
            config,
            image,
            hierarchy: Arc::new(hierarchy),
            instance_dir,
            next_id: AtomicU64::new(1),
            egress,
        })
    }

    /// A new VM's id, cgroup and user; its folder (`dir_for` its name) is made and
    /// handed to the user.
    pub(super) async fn allocate(
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
            .map_err(BootError::CgroupTask)??;
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

    /// Waits for `sandbox`'s agent's Ready, then with `prepare` for its interpreter to
    /// wait for the program (a Python one having imported the warm imports if asked).
    pub(super) async fn ready(
        &self,
        sandbox: &mut VmSandbox,
        prepare: &Prepare,
    ) -> Result<(), VmError> {
        let language = self.config.language(prepare.lang.as_ref());
        let warm_imports = match prepare.warm {
            true => self.config.warm_imports.as_slice(),
            false => &[],
        };
        sandbox.ready(language, warm_imports).await
    }

    /// The guest kernel's command line, without the VMM's own part.
    pub(super) fn common_cmdline(&self) -> String {
        let limits = &self.config.sandbox_limits;
        format!(
            "console=ttyS0 quiet panic=-1 rdinit=/init sandbox.tmpfs_mb={} sandbox.memory_mb={} \
             sandbox.cpu_quota_us={} sandbox.cpu_period_us={} sandbox.pids_max={}",
            self.config.tmpfs_mb,
            limits.memory_bytes / (1024 * 1024),
            limits.cpu_quota_us,
            limits.cpu_period_us,
            limits.pids_max,
        )
    }

    /// Kills every VMM process of this runner (their runs fail at once).
    pub(super) fn kill_all(&self) {
        self.hierarchy.kill_all();
    }

    /// Removes this runner's cgroup folders and state folder (every sandbox must be
    /// destroyed first).
    pub(super) fn shutdown(&self) {
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

/// Removes the VM folders of runner instances that are no longer alive.
fn remove_stale_dirs(vm_root: &Path, instance: &str) -> Result<(), VmError> {
    let entries = match fs::read_dir(vm_root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("reading", vm_root)(e)),
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != instance && !crate::backend::cgroup::instance_alive(&name) {
            let path = entry.path();
            fs::remove_dir_all(&path).map_err(io_error("removing stale", &path))?;
        }
    }
    Ok(())
}

/// The unprivileged user and group a VMM runs as: a uid of its own, so that no two
/// VMMs can signal or trace each other; the group that owns /dev/kvm under KVM.
#[derive(Debug, Clone, Copy)]
pub(super) struct VmmUser {
    pub(super) uid: u32,
    pub(super) gid: u32,
}

impl VmmUser {
    /// Hands `path` to this user.
    pub(super) fn own(&self, path: &Path) -> Result<(), VmError> {
        nix::unistd::chown(path, Some(self.uid.into()), Some(self.gid.into()))
            .map_err(|e| io_error("handing to the VMM user", path)(e.into()))
    }
}

/// What every VM has before its VMM starts.
pub(super) struct Allocated {
    pub(super) id: u64,
    /// `vm<id>`.
    pub(super) name: String,
    pub(super) dir: PathBuf,
    pub(super) leftovers: Leftovers,
    /// The `cgroup.procs` files of its cgroup.
    pub(super) procs: Vec<PathBuf>,
    pub(super) user: VmmUser,
}

pub(super) fn create_file(path: &Path) -> Result<fs::File, VmError> {
    fs::File::create(path).map_err(io_error("creating", path))
}

/// Opens /dev/kvm for reading and writing, as a VMM would.
pub(super) fn open_kvm() -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
}

/// The group that owns /dev/kvm, which must be able to read and write it.
pub(super) fn kvm_gid() -> Result<u32, VmError> {
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
pub(super) fn spawn_in_cgroup(
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
    let child = cmd
        .spawn()
        .map_err(|source| VmError::Spawn { program, source })?;
    drop(procs);
    Ok(child)
}
