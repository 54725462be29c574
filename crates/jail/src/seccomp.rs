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

/// The filter: its parts chained into one program (see [`chain`]).
pub fn program() -> Result<BpfProgram, SeccompError> {
    Ok(chain(parts()?))
}

/// The parts, each a program of its own with one action for what it matches. They
/// match disjoint calls, so the order in which they run changes no answer.
fn parts() -> Result<[BpfProgram; 5], SeccompError> {
    Ok([
        deny_list()?,
        enosys(&[libc::SYS_clone3])?,
        enosys(UNAVAILABLE)?,
        socket_families()?,
        x32_refused(),
    ])
}

/// Installs the program on the calling thread; no_new_privs must already be set.
pub fn install(program: &BpfProgram) -> Result<(), SeccompError> {
    Ok(seccompiler::apply_filter(program)?)
}

/// One program that runs `parts` in turn: where a part would allow the call, it goes on
/// to the next part instead; the last part's allow is the program's. Each part's
/// `return ALLOW` becomes a jump of the same length to the end of that part, so every
/// other jump in it still lands where it did.
///
/// One filter rather than five stacked: the kernel checks, JIT-compiles, and frees a
/// filter per install (a sixth of a sandbox's making under load, by `perf`, went to the
/// five), and runs every stacked filter on each call its cache does not allow outright.
/// Stacked filters answer the most severe of their actions; the parts here match
/// disjoint calls (and each checks the architecture first, to the same end), so the
/// first part that does not allow a call gives the same answer.
fn chain(parts: [BpfProgram; 5]) -> BpfProgram {
    let allow = sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    };
    let last = parts.len() - 1;
    let mut program = Vec::new();
    for (index, part) in parts.into_iter().enumerate() {
        let len = part.len();
        program.extend(part.into_iter().enumerate().map(|(at, insn)| {
            let is_allow = (insn.code, insn.k) == (allow.code, allow.k);
            if index == last || !is_allow {
                return insn;
            }
            sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JA) as u16,
                jt: 0,
                jf: 0,
                k: (len - at - 1) as u32,
            }
        }));
    }
    program
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
    fn parts_compile() {
        let [deny, clone3, unavailable, sockets, x32] = parts().expect("filters build");
        assert!(deny.len() > DENIED.len());
        assert!(!clone3.is_empty());
        assert!(unavailable.len() > UNAVAILABLE.len());
        assert!(!sockets.is_empty());
        assert_eq!(x32.len(), 4);
    }

    #[test]
    fn the_chain_allows_only_at_its_end_and_keeps_every_part_s_length() {
        let parts = parts().expect("filters build");
        let lens: Vec<usize> = parts.iter().map(Vec::len).collect();
        let program = chain(parts.clone());
        assert_eq!(program.len(), lens.iter().sum::<usize>());
        assert!(program.len() <= 4096, "BPF_MAXINSNS");
        let ret_allow = |insn: &sock_filter| {
            insn.code == (libc::BPF_RET | libc::BPF_K) as u16 && insn.k == libc::SECCOMP_RET_ALLOW
        };
        let last_start = program.len() - lens[4];
        assert!(program[..last_start].iter().all(|insn| !ret_allow(insn)));
        // Each part's allows became jumps to the next part's first instruction.
        let mut start = 0;
        for (part, len) in parts.iter().zip(&lens).take(4) {
            for (at, insn) in part.iter().enumerate() {
                let chained = &program[start + at];
                if ret_allow(insn) {
                    assert_eq!(chained.code, (libc::BPF_JMP | libc::BPF_JA) as u16);
                    assert_eq!(start + at + 1 + chained.k as usize, start + len);
                } else {
                    assert_eq!((chained.code, chained.k), (insn.code, insn.k));
                }
            }
            start += len;
        }
    }
}
