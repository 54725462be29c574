//! Starting one Firecracker VM: its id, cgroup, uid and folders, the agent's listening
//! socket, the VMM (through the jailer or directly) and the connection to its API; then,
//! for a cold boot, the API calls that configure the machine and start it.

use super::api::Api;
use super::layout::Layout;
use super::AGENT_PORT;
use crate::backend::vm::error::io_error;
use crate::backend::vm::host::{create_file, kvm_gid, spawn_in_cgroup, Host, VmmUser};
use crate::backend::vm::{VmError, VmSandbox};
use hyper::Method;
use serde_json::{json, Value};
use std::process::Stdio;
use tokio::net::UnixListener;

/// The guest's vsock address (any value from 3 up; each VM has its own device).
const GUEST_CID: u32 = 3;

/// A Firecracker VM whose VMM runs, before its agent is reached.
pub(super) struct Launched {
    pub(super) sandbox: VmSandbox,
    pub(super) api: Api,
    pub(super) layout: Layout,
    pub(super) listener: UnixListener,
    /// The group every VMM of this backend runs in.
    pub(super) gid: u32,
    /// The user its VMM runs as.
    pub(super) user: VmmUser,
}

/// Allocates a VM, lays out its folder, listens for its agent, starts its VMM and
/// connects to the VMM's API.
pub(super) async fn launch(host: &Host) -> Result<Launched, VmError> {
    let fc = &host.config.firecracker;
    let gid = match fc.jailer {
        // The jailer makes the jail's /dev/kvm for the VMM's user and group.
        Some(_) => host.config.vmm_uid_base,
        None => kvm_gid()?,
    };
    let vm = host
        .allocate(|name| Layout::new(fc, &host.instance_dir, name).dir, gid)
        .await?;
    let layout = Layout::new(fc, &host.instance_dir, &vm.name);
    layout.create(vm.user)?;
    let socket = layout.agent_socket();
    let listener = UnixListener::bind(&socket).map_err(io_error("listening on", &socket))?;
    vm.user.own(&socket)?;
    let (cmd, as_user) = layout.command(fc, vm.user);
    let console = Stdio::from(create_file(&vm.dir.join("console.log"))?);
    let log = Stdio::from(create_file(&vm.dir.join("vmm.log"))?);
    let user = as_user.then_some(vm.user);
    let child = spawn_in_cgroup(cmd, &vm.procs, user, console, log)?;
    let mut sandbox = VmSandbox::started(vm.id, child, vm.leftovers);
    match Api::connect(&layout.api_socket(), &mut sandbox.child).await {
        Ok(api) => Ok(Launched {
            sandbox,
            api,
            layout,
            listener,
            gid,
            user: vm.user,
        }),
        Err(e) => Err(sandbox.fail(e).await),
    }
}

/// Configures a fresh Firecracker for a cold boot and starts the guest.
pub(super) async fn boot_cold(host: &Host, api: &mut Api, layout: &Layout) -> Result<(), VmError> {
    let cmdline = format!(
        "{} -- {}",
        boot_args(&host.common_cmdline()),
        sandbox_agent::init::INIT_ARG
    );
    let image = &host.image;
    let kernel = layout.expose(&image.kernel, sandbox_image::KERNEL_FILE)?;
    let initrd = layout.expose(&image.initrd, sandbox_image::INITRD_FILE)?;
    let rootfs = layout.expose(&image.rootfs, sandbox_image::ROOTFS_FILE)?;
    let memory_mb = host.config.guest_memory_mb;
    for (path, body) in cold_boot_requests(&kernel, &initrd, &rootfs, memory_mb, &cmdline, layout) {
        api.call(Method::PUT, path, body).await?;
    }
    Ok(())
}

/// The kernel command line of a Firecracker guest: `reboot=k` so that the agent's
/// reset at the end ends Firecracker; the agent's channel on vsock.
fn boot_args(common: &str) -> String {
    format!("reboot=k pci=off {common} sandbox.vsock_port={AGENT_PORT}")
}

/// The API calls of a cold boot, in order: machine, kernel, root image, vsock, entropy
/// device, start. No network interface is ever configured.
fn cold_boot_requests(
    kernel: &str,
    initrd: &str,
    rootfs: &str,
    memory_mb: u64,
    cmdline: &str,
    layout: &Layout,
) -> Vec<(&'static str, Value)> {
    vec![
        (
            "/machine-config",
            json!({"vcpu_count": 1, "mem_size_mib": memory_mb, "smt": false}),
        ),
        (
            "/boot-source",
            json!({"kernel_image_path": kernel, "initrd_path": initrd, "boot_args": cmdline}),
        ),
        (
            "/drives/root",
            json!({
                "drive_id": "root",
                "path_on_host": rootfs,
                "is_root_device": false,
                "is_read_only": true
            }),
        ),
        (
            "/vsock",
            json!({"guest_cid": GUEST_CID, "uds_path": layout.vsock_path()}),
        ),
        ("/entropy", json!({})),
        ("/actions", json!({"action_type": "InstanceStart"})),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::layout::tests::config;
    use super::*;
    use std::path::Path;

    #[test]
    fn a_cold_boot_configures_no_network_and_one_vcpu() {
        let layout = Layout::new(&config(true), Path::new("/s/vm/r1"), "vm1");
        let calls = cold_boot_requests("/k", "/i", "/r", 256, "args", &layout);
        let paths: Vec<&str> = calls.iter().map(|(p, _)| *p).collect();
        assert_eq!(
            paths,
            [
                "/machine-config",
                "/boot-source",
                "/drives/root",
                "/vsock",
                "/entropy",
                "/actions"
            ]
        );
        assert!(!paths.iter().any(|p| p.starts_with("/network-interfaces")));
        assert_eq!(calls[0].1["vcpu_count"], 1);
        assert_eq!(calls[0].1["mem_size_mib"], 256);
        assert_eq!(calls[2].1["is_read_only"], true);
        assert_eq!(calls[3].1["uds_path"], "/v.sock");
        assert_eq!(calls[5].1["action_type"], "InstanceStart");
    }
}
