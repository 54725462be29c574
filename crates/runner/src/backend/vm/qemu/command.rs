//! The QEMU command line of one VM sandbox: the `microvm` machine with one vCPU, no
//! network device, the root image read-only, the agent channel on a virtio serial port
//! and the egress tunnel on another (always there, so that a saved VM restores under a
//! runner with egress or without; served only with it), QMP on a socket the runner
//! listens on; the same machine, waiting for its state, for a restore.

use super::Accel;
use crate::backend::vm::VmImage;
use sandbox_protocol::tunnel::PORT_NAME;
use std::ffi::OsString;
use std::path::Path;
use tokio::process::Command;

/// The QEMU binary looked up on PATH.
pub const QEMU: &str = "qemu-system-x86_64";
/// Translation cache of TCG, in MiB (QEMU's default is far larger, and counts against
/// the VMM's memory cap: only what is used is resident). A guest's boot with the
/// prepared Python and its data stack translates about 75 MiB of code: in a cache
/// smaller than that, QEMU flushes the whole cache when it is full, and the first run
/// then translates again the kernel, agent and interpreter code the boot had
/// translated (measured: 64 MiB was full at rest, and a warm `print(1)` paid it).
const TCG_CACHE_MB: u32 = 128;

/// What one VM is made of.
pub struct QemuSpec<'a> {
    /// Kernel, initramfs and root image.
    pub image: &'a VmImage,
    /// KVM or TCG.
    pub accel: Accel,
    /// Guest memory in MiB.
    pub memory_mb: u64,
    /// The runner's listening socket, which QEMU connects the agent's port to.
    pub socket: &'a Path,
    /// The runner's listening socket, which QEMU connects the egress port to.
    pub egress: &'a Path,
    /// The runner's listening socket for QMP.
    pub qmp: &'a Path,
    /// Wait for the state of a saved VM (given later over QMP) instead of booting.
    pub incoming: bool,
    /// Where the guest's serial console is written.
    pub console: &'a Path,
    /// The guest kernel's command line.
    pub cmdline: &'a str,
}

/// The QEMU command that boots `spec`.
pub fn command(spec: &QemuSpec) -> Command {
    let mut cmd = Command::new(QEMU);
    let (accel, cpu) = match spec.accel {
        Accel::Kvm => ("kvm".to_owned(), "host"),
        Accel::Tcg => (format!("tcg,tb-size={TCG_CACHE_MB}"), "max"),
    };
    cmd.args(["-M", "microvm,x-option-roms=off,rtc=on"])
        .args(["-accel", &accel, "-cpu", cpu])
        .arg("-m")
        .arg(format!("{}M", spec.memory_mb))
        .args([
            "-smp",
            "1",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
        ])
        .args(["-no-reboot", "-nic", "none"])
        // Deny what a VMM never needs, should the guest ever take QEMU over.
        .args([
            "-sandbox",
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        ])
        .arg("-serial")
        .arg(option("file:", spec.console))
        .arg("-kernel")
        .arg(&spec.image.kernel)
        .arg("-initrd")
        .arg(&spec.image.initrd)
        .args(["-append", spec.cmdline])
        .arg("-drive")
        .arg(option(
            "id=root,format=raw,if=none,readonly=on,file=",
            &spec.image.rootfs,
        ))
        .args(["-device", "virtio-blk-device,drive=root"])
        .args(["-device", "virtio-serial-device"])
        .arg("-chardev")
        .arg(option("socket,id=agent,path=", spec.socket))
        .args(["-device", "virtserialport,chardev=agent,name=agent"])
        .arg("-chardev")
        .arg(option("socket,id=egress,path=", spec.egress))
        .arg("-device")
        .arg(format!("virtserialport,chardev=egress,name={PORT_NAME}"))
        .args(["-device", "virtio-rng-device"])
        .arg("-chardev")
        .arg(option("socket,id=qmp,path=", spec.qmp))
        .args(["-mon", "chardev=qmp,mode=control"]);
    if spec.incoming {
        cmd.args(["-incoming", "defer"]);
    }
    cmd
}

/// `prefix` and a path, with the commas of the path doubled as QEMU's option syntax
/// requires.
fn option(prefix: &str, path: &Path) -> OsString {
    let mut s = OsString::from(prefix);
    let escaped = path.to_string_lossy().replace(',', ",,");
    s.push(escaped);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Command) -> Vec<String> {
        cmd.as_std()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_restore_is_the_booted_machine_waiting_for_its_state() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["vmlinux", "initrd.img", "rootfs.ext4"] {
            std::fs::write(dir.path().join(name), name).unwrap();
        }
        let image = VmImage::open(dir.path()).unwrap();
        let spec = |incoming| QemuSpec {
            image: &image,
            accel: Accel::Tcg,
            memory_mb: 400,
            socket: Path::new("/vm/1/agent.sock"),
            egress: Path::new("/vm/1/egress.sock"),
            qmp: Path::new("/vm/1/qmp.sock"),
            console: Path::new("/vm/1/console.log"),
            cmdline: "quiet",
            incoming,
        };
        let booted = args(&command(&spec(false)));
        let restored = args(&command(&spec(true)));
        assert_eq!(restored[..booted.len()], booted[..], "the same machine");
        assert_eq!(restored[booted.len()..], ["-incoming", "defer"]);
        let qmp = booted
            .iter()
            .position(|a| a == "socket,id=qmp,path=/vm/1/qmp.sock");
        let qmp = qmp.expect("QMP on the runner's socket");
        assert_eq!(booted[qmp - 1], "-chardev");
        assert_eq!(
            booted[qmp + 1..qmp + 3],
            ["-mon", "chardev=qmp,mode=control"]
        );
        // The seccomp sandbox stays: a save goes through a descriptor, never `exec:`.
        assert!(booted.iter().any(|a| a.contains("spawn=deny")));
    }

    #[test]
    fn commas_in_paths_are_escaped() {
        let o = option("file:", Path::new("/a,b/c"));
        assert_eq!(o, "file:/a,,b/c");
    }
}
