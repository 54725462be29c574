//! The sandbox's `/proc`: a new instance for its PID namespace, with the host-wide
//! information files and folders masked, the per-user-namespace counts zeroed and
//! `/proc/sys` read-only.
//!
//! Nothing here asks the new instance what it holds: a lookup in a fresh `/proc` makes
//! its inode, so the 60-odd `stat`s of the checks cost a sandbox more than the masks'
//! mounts did (a third of the tree's making, measured). Which masked files only root may
//! open is read once from the host's `/proc` ([`HostView`]); whether an entry exists is
//! what the mount (or the write) answers, in the one call it makes anyway.

use super::{make_dir, mount_at, remount, HostView, Stage};
use crate::error::JailError;
use nix::errno::Errno;
use nix::mount::MsFlags;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Host-wide files in /proc that tell of the host or of other tenants, shown empty
/// (runc's and crun's masked paths, and more of the same kind).
const MASKED_PROC_FILES: &[&str] = &[
    "cmdline",
    "config.gz",
    "kallsyms",
    "kcore",
    "keys",
    "key-users",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "schedstat",
    "latency_stats",
    "modules",
    "kmsg",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
    "sysrq-trigger",
    "iomem",
    "ioports",
    "vmallocinfo",
    "slabinfo",
    "pagetypeinfo",
    "buddyinfo",
    "zoneinfo",
    "interrupts",
    "softirqs",
    "locks",
    "diskstats",
    "partitions",
    "swaps",
    "devices",
    "mtrr",
    "dma",
    "misc",
    "consoles",
    "bootconfig",
    "mdstat",
    "execdomains",
    "crypto",
    "program_cpu",
];
/// Host-wide folders in /proc, shown empty.
const MASKED_PROC_DIRS: &[&str] = &[
    "acpi",
    "asound",
    "scsi",
    "bus",
    "fs",
    "irq",
    "driver",
    "tty",
    "pressure",
    "dynamic_debug",
    "device-tree",
];
/// Per-user-namespace counts set to zero in every sandbox's user namespace: a second
/// bar, behind the seccomp filter, against the kernel objects a sandbox may not make.
const ZERO_USER_COUNTS: &[&str] = &[
    "max_inotify_instances",
    "max_inotify_watches",
    "max_fanotify_groups",
    "max_fanotify_marks",
    "max_user_namespaces",
    "max_mnt_namespaces",
    "max_pid_namespaces",
    "max_net_namespaces",
    "max_ipc_namespaces",
    "max_uts_namespaces",
    "max_cgroup_namespaces",
    "max_time_namespaces",
];

/// A new /proc for the sandbox's PID namespace (see the module documentation).
pub(super) fn build_proc(root: &Path, stage: &Stage, host: &HostView) -> Result<(), JailError> {
    let proc_dir = root.join("proc");
    make_dir(&proc_dir, 0o555)?;
    let noexec = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_at(Some("proc"), &proc_dir, Some("proc"), noexec, None)?;
    zero_user_counts(&proc_dir)?;
    for name in MASKED_PROC_FILES {
        if !host.proc_file_is_closed(name) {
            mask(&proc_dir.join(name), &stage.blank())?;
        }
    }
    for name in MASKED_PROC_DIRS {
        mask(&proc_dir.join(name), &stage.empty_dir())?;
    }
    let sys = proc_dir.join("sys");
    mount_at(
        Some(&sys),
        &sys,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    remount(&sys, MsFlags::MS_RDONLY | noexec)
}

/// Writes 0 to each of [`ZERO_USER_COUNTS`] this kernel has, for the sandbox's user
/// namespace (its root may: it holds CAP_SYS_RESOURCE there until the privileges drop).
fn zero_user_counts(proc_dir: &Path) -> Result<(), JailError> {
    for name in ZERO_USER_COUNTS {
        let path = proc_dir.join("sys/user").join(name);
        match fs::write(&path, "0") {
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            result => result.map_err(|source| super::prepare(&path, source))?,
        }
    }
    Ok(())
}

/// Shows `source` (an empty file or folder of the stage) in place of `target`, when the
/// kernel has `target`. The source is read-only to everyone (0444, 0555), on the
/// stage's read-only, nosuid, noexec mount, whose flags a bind keeps: nothing can write
/// or change it, so no remount is needed. A file masked onto a folder (or the reverse)
/// fails: the lists say which is which.
fn mask(target: &Path, source: &Path) -> Result<(), JailError> {
    match mount_at(Some(source), target, None, MsFlags::MS_BIND, None) {
        Err(JailError::Mount {
            source: Errno::ENOENT,
            ..
        }) => Ok(()),
        result => result,
    }
}

/// The masked files of the host's `/proc` that only root may read or write (such as
/// `kcore` or `kmsg`): closed to the sandbox user already, they are left unmasked. The
/// modes of `/proc`'s files are the kernel's, the same in every instance of it.
pub(super) fn closed_proc_files() -> Vec<&'static str> {
    MASKED_PROC_FILES
        .iter()
        .copied()
        .filter(|name| {
            fs::symlink_metadata(Path::new("/proc").join(name))
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o006 == 0)
        })
        .collect()
}
