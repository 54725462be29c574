//! The start-up line: every setting the runner took (never the token), and its
//! backend's own.

use super::{BackendConfig, EgressConfig, RunnerConfig};
use crate::backend::vm::{VmConfig, Vmm};
use std::fmt;

/// The backend's own settings, for the start-up line.
struct BackendSummary<'a>(&'a BackendConfig);

impl fmt::Display for BackendSummary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            BackendConfig::Process(p) => write!(
                f,
                "memory_bytes={} cpu_quota={}us/{}us pids_max={} tmpfs_bytes={} id_base={} \
                 state_dir={} cgroup_root={}",
                p.limits.memory_bytes,
                p.limits.cpu_quota_us,
                p.limits.cpu_period_us,
                p.limits.pids_max,
                p.tmpfs_bytes,
                p.id_base,
                p.state_dir.display(),
                p.cgroup_mount.display(),
            ),
            BackendConfig::Vm(vm) => write_vm(f, vm),
        }
    }
}

fn write_vm(f: &mut fmt::Formatter<'_>, vm: &VmConfig) -> fmt::Result {
    write!(
        f,
        "vmm={:?} accel={:?} vm_image={} guest_memory_mb={} sandbox_memory_bytes={} \
         sandbox_cpu_quota={}us/{}us vmm_memory_cap_bytes={} vm_boot_timeout={:?} \
         sandbox_pids_max={} tmpfs_mb={} state_dir={} cgroup_root={}",
        vm.vmm,
        vm.accel,
        vm.image_dir.display(),
        vm.guest_memory_mb,
        vm.sandbox_limits.memory_bytes,
        vm.sandbox_limits.cpu_quota_us,
        vm.sandbox_limits.cpu_period_us,
        vm.vmm_limits.memory_bytes,
        vm.boot_timeout,
        vm.sandbox_limits.pids_max,
        vm.tmpfs_mb,
        vm.state_dir.display(),
        vm.cgroup_mount.display(),
    )?;
    if vm.vmm != Vmm::Firecracker {
        return Ok(());
    }
    let fc = &vm.firecracker;
    write!(
        f,
        " firecracker={} jailer={} vm_snapshots={}",
        fc.binary.display(),
        fc.jailer
            .as_ref()
            .map_or("NONE (--firecracker-without-jailer)".into(), |j| j
                .display()
                .to_string()),
        fc.snapshots
    )
}

/// The egress settings, for the start-up line.
struct EgressSummary<'a>(&'a EgressConfig);

impl fmt::Display for EgressSummary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let egress = self.0;
        if !egress.is_on() {
            return write!(f, "egress=off");
        }
        write!(
            f,
            "egress_allow={} egress_allow_cidrs={} egress_default={:?} egress_max_bytes={} \
             egress_max_connections={}",
            egress.policy.names().join(","),
            egress.policy.ranges().join(","),
            egress.default,
            egress.max_bytes,
            egress.max_connections,
        )
    }
}

impl fmt::Display for RunnerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.sandbox;
        write!(
            f,
            "listen={} auth={} backend={:?} pool_size={} queue_size={} queue_timeout={:?} \
             default_timeout={:?} max_timeout={:?} output_cap_bytes={} code_cap_bytes={} \
             shutdown_grace={:?} header_timeout={:?} max_header_bytes={} max_connections={} \
             body_timeout={:?} {} {}",
            self.listen,
            if self.token.is_some() {
                "bearer"
            } else {
                "none"
            },
            s.backend.kind(),
            self.pool.size,
            self.pool.queue_size,
            self.pool.queue_timeout,
            s.default_timeout,
            s.max_timeout,
            s.output_cap_bytes,
            self.code_cap_bytes,
            self.shutdown_grace,
            self.http.header_read_timeout,
            self.http.max_header_bytes,
            self.http.max_connections,
            self.http.body_read_timeout,
            BackendSummary(&s.backend),
            EgressSummary(&s.egress),
        )
    }
}
