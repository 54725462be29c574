//! The QEMU command line of one VM sandbox: the `microvm` machine with one vCPU, no
//! network device, the root image read-only, the agent channel on a virtio serial port.

use super::Accel;
use crate::backend::vm::VmImage;
use std::ffi::OsString;
use std::path::Path;
use tokio::process::Command;

/// The QEMU binary looked up on PATH.
pub const QEMU: &str = "qemu-system-x86_64";
/// Translation cache of TCG, in MiB (QEMU's default is far larger, and counts against
/// the VMM's memory cap).
const TCG_CACHE_MB: u32 = 64;

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
        .args(["-device", "virtio-rng-device"]);
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

    #[test]
    fn commas_in_paths_are_escaped() {
        let o = option("file:", Path::new("/a,b/c"));
        assert_eq!(o, "file:/a,,b/c");
    }
}
