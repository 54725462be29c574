//! The system-call filter every sandboxed process runs under.
//!
//! A deny list (the calls a program runner never needs, and the ones most kernel
//! escapes go through), refused with EPERM, plus:
//! - `clone` with any namespace flag refused, and a seccomp filter with a
//!   user-notification listener refused;
//! - `clone3` answered ENOSYS (its flags sit in memory a filter cannot read; libc then
//!   falls back to `clone`);
//! - kernel interfaces a sandbox does without answered ENOSYS, as on a kernel built
//!   without them, so that libraries fall back: inotify and fanotify (watches on shared
//!   files would see other tenants, and their instances are per-user kernel counts),
//!   AIO (a host-wide event budget), NUMA memory policy and page moving, `modify_ldt`,
//!   `memfd_secret` and `cachestat`;
//! - `socket` and `socketpair` for any family but Unix, IPv4 and IPv6 answered
//!   EAFNOSUPPORT (vsock is not isolated by the network namespace; netlink, packet and
//!   the rest are kernel surface a code runner never needs);
//! - x32-ABI call numbers refused, since a filter keyed on x86_64 numbers would not see
//!   them. A call from another architecture (i386 via `int 0x80`) kills the process:
//!   seccompiler checks the architecture first.

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// Why the filter could not be built or installed.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// seccompiler refused the rules or the kernel refused the program.
    #[error("seccomp: {0}")]
    Filter(#[from] seccompiler::Error),
    /// seccompiler refused the rules.
    #[error("seccomp rules: {0}")]
    Rules(#[from] seccompiler::BackendError),
}

/// Calls refused outright.
const DENIED: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_lookup_dcookie,
    libc::SYS_vhangup,
    libc::SYS_uselib,
    libc::SYS_ustat,
    libc::SYS_sysfs,
    libc::SYS_personality,
];

/// Calls answered ENOSYS, as by a kernel without them.
const UNAVAILABLE: &[libc::c_long] = &[
    libc::SYS_inotify_init,
    libc::SYS_inotify_init1,
    libc::SYS_inotify_add_watch,
    libc::SYS_inotify_rm_watch,
    libc::SYS_fanotify_init,
    libc::SYS_fanotify_mark,
    libc::SYS_io_setup,
    libc::SYS_io_destroy,
    libc::SYS_io_submit,
    libc::SYS_io_cancel,
    libc::SYS_io_getevents,
    SYS_IO_PGETEVENTS,
    libc::SYS_mbind,
    libc::SYS_set_mempolicy,
    libc::SYS_set_mempolicy_home_node,
    libc::SYS_migrate_pages,
    libc::SYS_move_pages,
    libc::SYS_modify_ldt,
    libc::SYS_memfd_secret,
    SYS_CACHESTAT,
];
/// x86_64 numbers the libc crate does not name.
const SYS_IO_PGETEVENTS: libc::c_long = 333;
const SYS_CACHESTAT: libc::c_long = 451;
/// The socket families a program may use: Unix, IPv4, IPv6.
const SOCKET_FAMILIES: &[libc::c_int] = &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6];
/// `seccomp(2)`'s operation and flag that install a filter with a user-notification
/// listener (which would let a program intercept its children's calls).
const SECCOMP_SET_MODE_FILTER: u64 = 1;
const SECCOMP_FILTER_FLAG_NEW_LISTENER: u64 = 1 << 3;

/// Namespace flags that `clone` may not carry.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
    0x80, // CLONE_NEWTIME
];

/// The programs, in the order they are installed.
pub fn programs() -> Result<[BpfProgram; 5], SeccompError> {
    Ok([
        deny_list()?,
        enosys(&[libc::SYS_clone3])?,
        enosys(UNAVAILABLE)?,
        socket_families()?,
        x32_refused(),
    ])
}

/// Installs the programs on the calling thread; no_new_privs must already be set.
pub fn install(programs: &[BpfProgram; 5]) -> Result<(), SeccompError> {
    for program in programs {
        seccompiler::apply_filter(program)?;
    }
    Ok(())
}

fn deny_list() -> Result<BpfProgram, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let flag = flag as u64;
            let cond = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?;
            SeccompRule::new(vec![cond])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    let listener = vec![
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            SECCOMP_SET_MODE_FILTER,
        )?,
        SeccompCondition::new(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(SECCOMP_FILTER_FLAG_NEW_LISTENER),
            SECCOMP_FILTER_FLAG_NEW_LISTENER,
        )?,
    ];
    rules.insert(libc::SYS_seccomp, vec![SeccompRule::new(listener)?]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )?;
    Ok(filter.try_into()?)
}

/// Each of `calls` answered ENOSYS.
fn enosys(calls: &[libc::c_long]) -> Result<BpfProgram, SeccompError> {
    let rules = calls.iter().map(|&nr| (nr, Vec::new())).collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        TargetArch::x86_64,
    )?;
    Ok(filter.try_into()?)
}

/// `socket` and `socketpair` with a family outside [`SOCKET_FAMILIES`] -> EAFNOSUPPORT.
/// The family is an `int`: the kernel reads the low 32 bits, and so does the filter.
fn socket_families() -> Result<BpfProgram, SeccompError> {
    let other_family = || {
        let conditions = SOCKET_FAMILIES
            .iter()
            .map(|&family| {
                SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, family as u64)
            })
            .collect::<Result<Vec<_>, _>>()?;
        SeccompRule::new(conditions)
    };
    let rules = BTreeMap::from([
        (libc::SYS_socket, vec![other_family()?]),
        (libc::SYS_socketpair, vec![other_family()?]),
    ]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EAFNOSUPPORT as u32),
        TargetArch::x86_64,
    )?;
    Ok(filter.try_into()?)
}

/// `nr >= __X32_SYSCALL_BIT` -> ENOSYS, else allow. Four instructions by hand, since
/// seccompiler matches exact numbers only.
fn x32_refused() -> BpfProgram {
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let ld_nr = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let jge = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    let ret = (libc::BPF_RET | libc::BPF_K) as u16;
    vec![
        sock_filter {
            code: ld_nr,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: jge,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: ret,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
        sock_filter {
            code: ret,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_compile() {
        let [deny, clone3, unavailable, sockets, x32] = programs().expect("filters build");
        assert!(deny.len() > DENIED.len());
        assert!(!clone3.is_empty());
        assert!(unavailable.len() > UNAVAILABLE.len());
        assert!(!sockets.is_empty());
        assert_eq!(x32.len(), 4);
    }
}
