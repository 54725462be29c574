//! The sandbox's network: its loopback interface only.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Brings the loopback interface up, so that a program can talk to itself over
/// localhost: the process backend's network namespace and a VM guest both start with
/// `lo` down and nothing else.
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: socket() takes plain integers and returns a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket() and is owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS fills the ifreq we own, whose name is NUL-terminated (zeroed
    // beyond "lo").
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the flags member of the union is the one SIOCGIFFLAGS just filled.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own, naming lo with its new flags.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
