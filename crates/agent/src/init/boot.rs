//! The boot steps of the guest's init: the kernel's file systems, the modules, the
//! switch to the root image, and the end of the VM.

use super::error::InitError;
use super::settings::Settings;
use nix::mount::{mount, MsFlags};
use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the initramfs keeps the modules to load.
const MODULES_DIR: &str = "/modules";
/// Where the root image is mounted before it becomes the root.
const NEW_ROOT: &str = "/newroot";
/// The root image: the first virtio block device.
pub(super) const ROOT_DEVICE: &str = "/dev/vda";
/// How long a device may take to appear after its driver is loaded.
const DEVICE_WAIT: Duration = Duration::from_secs(10);

pub(super) fn mount_fs(
    what: &'static str,
    fstype: &str,
    target: &str,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), InitError> {
    make_dir(Path::new(target))?;
    mount(Some(what), target, Some(fstype), flags, data).map_err(|source| InitError::Mount {
        what,
        target: target.into(),
        source,
    })
}

pub(super) fn mount_kernel_file_systems() -> Result<(), InitError> {
    let hardened = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    mount_fs("devtmpfs", "devtmpfs", "/dev", MsFlags::MS_NOSUID, None)?;
    mount_fs("proc", "proc", "/proc", hardened | MsFlags::MS_NODEV, None)?;
    mount_fs("sysfs", "sysfs", "/sys", hardened | MsFlags::MS_NODEV, None)
}

/// Loads every `.ko` of the initramfs in file-name order (the image build numbers them
/// so that dependencies come first), then deletes it to give the memory back.
pub(super) fn load_modules() -> Result<(), InitError> {
    let entries = match fs::read_dir(MODULES_DIR) {
        Ok(entries) => entries,
        // A kernel with the drivers built in needs no modules.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(InitError::Read {
                path: MODULES_DIR.into(),
                source,
            })
        }
    };
    let mut modules: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    modules.sort();
    for path in modules {
        load_module(&path)?;
        let _ = fs::remove_file(&path);
    }
    Ok(())
}

fn load_module(path: &Path) -> Result<(), InitError> {
    let module_error = |source| InitError::Module {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(module_error)?;
    let no_params = c"";
    // SAFETY: finit_module reads the module from the open descriptor and the
    // NUL-terminated parameter string, both valid for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_finit_module,
            file.as_raw_fd(),
            no_params.as_ptr(),
            0,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(module_error(e));
        }
    }
    Ok(())
}

pub(super) fn wait_for(path: &Path, what: &str) -> Result<(), InitError> {
    let deadline = Instant::now() + DEVICE_WAIT;
    while !path.exists() {
        if Instant::now() >= deadline {
            return Err(InitError::NoDevice(what.to_owned()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Mounts the root image read-only, moves the kernel file systems into it, and makes
/// it the root (what `switch_root` does; the initramfs stays, it is a few MiB).
pub(super) fn switch_root() -> Result<(), InitError> {
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NODEV | MsFlags::MS_NOSUID;
    mount_fs("/dev/vda", "ext4", NEW_ROOT, flags, None)?;
    for dir in ["/dev", "/proc", "/sys"] {
        let target = format!("{NEW_ROOT}{dir}");
        mount(
            Some(dir),
            target.as_str(),
            None::<&str>,
            MsFlags::MS_MOVE,
            None::<&str>,
        )
        .map_err(|source| InitError::Mount {
            what: "a kernel file system (move)",
            target: target.clone().into(),
            source,
        })?;
    }
    nix::unistd::chdir(NEW_ROOT).map_err(InitError::SwitchRoot)?;
    mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(InitError::SwitchRoot)?;
    nix::unistd::chroot(".").map_err(InitError::SwitchRoot)?;
    nix::unistd::chdir("/").map_err(InitError::SwitchRoot)
}

/// Ends the VM: a reset where the VMM has no power-off device (a vsock guest runs under
/// Firecracker, which exits when its guest resets, and on x86 halts on a power-off),
/// else a power-off (QEMU's microvm has ACPI).
pub(super) fn power_off() -> ! {
    let reset = fs::read_to_string("/proc/cmdline").map_or(true, |cmdline| {
        Settings::parse(&cmdline).vsock_port.is_some()
    });
    let first = if reset {
        libc::RB_AUTOBOOT
    } else {
        libc::RB_POWER_OFF
    };
    // SAFETY: reboot() takes a command constant and touches no memory of ours; as PID 1
    // with CAP_SYS_BOOT it ends the machine and does not return.
    unsafe {
        libc::reboot(first);
        // Only if that failed.
        libc::reboot(libc::RB_AUTOBOOT);
    }
    // Only if both failed: an init must not exit. The host kills the VMM anyway.
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

pub(super) fn read(path: &str) -> Result<String, InitError> {
    fs::read_to_string(path).map_err(|source| InitError::Read {
        path: path.into(),
        source,
    })
}

pub(super) fn write(path: &str, value: &str) -> Result<(), InitError> {
    fs::write(path, value).map_err(|source| InitError::Write {
        path: path.into(),
        source,
    })
}

pub(super) fn make_dir(path: &Path) -> Result<(), InitError> {
    match fs::create_dir_all(path) {
        Ok(()) => Ok(()),
        // A read-only root already holds the folders it needs.
        Err(_) if path.is_dir() => Ok(()),
        Err(source) => Err(InitError::CreateDir {
            path: path.to_owned(),
            source,
        }),
    }
}
