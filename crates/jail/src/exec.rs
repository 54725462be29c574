//! The jail's last step: the agent executed afresh, from a descriptor of its binary
//! opened before the sandbox's namespaces were made (the binary is not in the
//! sandbox's tree). An exec is a new address space, laid out anew by the kernel
//! (ASLR) and given new random bytes (`AT_RANDOM`), whence the C library draws a new
//! stack canary: the agent shares neither with the process that executed it, nor with
//! anything forked from that process.

use crate::error::JailError;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// The name every agent runs under (its `argv[0]`).
pub const AGENT_NAME: &str = "sandbox-agent";

/// Executes the binary `exe` as `sandbox-agent <args>`, with an empty environment.
/// Returns only on failure, with why.
pub fn exec_agent(exe: &OwnedFd, args: &[&str]) -> JailError {
    let argv: Result<Vec<CString>, _> = std::iter::once(AGENT_NAME)
        .chain(args.iter().copied())
        .map(CString::new)
        .collect();
    let argv = match argv {
        Ok(argv) => argv,
        Err(e) => return JailError::Exec(e.into()),
    };
    let pointers: Vec<*const libc::c_char> = argv
        .iter()
        .map(|arg| arg.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp = [std::ptr::null::<libc::c_char>()];
    // What started the runner may have ignored or blocked signals: the agent, and so
    // every program it starts, begins with each at its default.
    crate::signals::reset();
    // SAFETY: execveat reads argv and envp, both null-terminated arrays of pointers to
    // NUL-terminated strings that outlive the call; on success it does not return.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            exe.as_raw_fd(),
            c"".as_ptr(),
            pointers.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        );
    }
    JailError::Exec(io::Error::last_os_error())
}
