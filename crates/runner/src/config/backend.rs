//! The backend's own settings, made from the sandbox flags once they are checked: the
//! process backend's ([`ProcessConfig`]) or the vm backend's ([`VmConfig`]).

use super::{PackagesConfig, SandboxArgs, VMM_UID_OFFSET};
use crate::backend::cgroup::CgroupLimits;
use crate::backend::process::ProcessConfig;
use crate::backend::vm::firecracker::FirecrackerConfig;
use crate::backend::vm::VmConfig;
use crate::languages::Languages;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The CFS period every sandbox's CPU quota is expressed in.
pub(super) const CPU_PERIOD_US: u64 = 100_000;
/// Threads a VMM process may have (QEMU uses a handful).
const VMM_PIDS_MAX: u64 = 64;
/// Most open files per process of a process sandbox.
const NOFILE: u64 = 1024;
/// How long making a process sandbox may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(10);

impl SandboxArgs {
    /// The cgroup limits of one sandbox (on the host, or inside a VM guest).
    fn sandbox_limits(&self) -> CgroupLimits {
        CgroupLimits {
            memory_bytes: self.memory_mb * 1024 * 1024,
            cpu_quota_us: (self.cpus * CPU_PERIOD_US as f64).round() as u64,
            cpu_period_us: CPU_PERIOD_US,
            pids_max: self.pids_max,
        }
    }

    pub(super) fn process_config(
        &self,
        packages: &PackagesConfig,
        languages: Arc<Languages>,
    ) -> ProcessConfig {
        let mib = 1024 * 1024;
        ProcessConfig {
            cgroup_mount: self.cgroup_root.clone(),
            state_dir: self.state_dir.clone(),
            id_base: self.id_base,
            limits: self.sandbox_limits(),
            tmpfs_bytes: self.tmpfs_mb * mib,
            nofile: NOFILE,
            create_timeout: CREATE_TIMEOUT,
            unsafe_no_resource_limits: self.unsafe_no_resource_limits,
            packages: packages.set.as_ref().map(|set| set.dir.clone()),
            warm_imports: packages.warm_imports.clone(),
            languages,
            templates: self.templates,
            agent: self.sandbox_agent.clone(),
        }
    }

    /// A VM's memory: the sandbox's, plus the guest's own.
    fn guest_memory_mb(&self) -> u64 {
        self.memory_mb + self.vm_guest_overhead_mb
    }

    pub(super) fn vm_config(
        &self,
        packages: &PackagesConfig,
        languages: Arc<Languages>,
    ) -> VmConfig {
        VmConfig {
            vmm: self.vmm,
            accel: self.accel,
            image_dir: self.vm_image.clone(),
            cgroup_mount: self.cgroup_root.clone(),
            state_dir: self.state_dir.clone(),
            guest_memory_mb: self.guest_memory_mb(),
            sandbox_limits: self.sandbox_limits(),
            // The outer bound: the VM's one vCPU, fully (the sandbox's share of it is
            // enforced inside the guest, where the program can be shown it).
            vmm_limits: CgroupLimits {
                memory_bytes: (self.guest_memory_mb() + self.vmm_overhead_mb) * 1024 * 1024,
                cpu_quota_us: CPU_PERIOD_US,
                cpu_period_us: CPU_PERIOD_US,
                pids_max: VMM_PIDS_MAX,
            },
            tmpfs_mb: self.tmpfs_mb,
            warm_imports: packages.warm_imports.clone(),
            languages,
            boot_timeout: Duration::from_millis(self.vm_boot_timeout_ms),
            vmm_uid_base: self.id_base + VMM_UID_OFFSET,
            firecracker: FirecrackerConfig {
                binary: on_path(&self.firecracker_bin),
                jailer: (!self.firecracker_without_jailer).then(|| on_path(&self.jailer_bin)),
                snapshots: self.vm_snapshots,
            },
        }
    }
}

/// `name` found on PATH when it is a bare name; the path itself otherwise (or when not
/// found: the backend then says it is missing).
fn on_path(name: &Path) -> PathBuf {
    if name.components().count() != 1 {
        return name.to_owned();
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
        .unwrap_or_else(|| name.to_owned())
}
