//! Descriptors passed over a Unix socket (`SCM_RIGHTS`): the runner hands a template a
//! sandbox's channel, standard error and control socket this way, and the template hands
//! the runner a pidfd of the sandbox it cloned.

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// One message as it arrived.
#[derive(Debug)]
pub struct Received {
    /// How many bytes of it were read (0 with no descriptor: end of file).
    pub bytes: usize,
    /// Whether it was longer than the buffer (the rest is lost).
    pub truncated: bool,
    /// The descriptors it carried, close-on-exec, each owned here.
    pub fds: Vec<OwnedFd>,
}

/// Receives one message into `data`, with up to `N` descriptors; a call interrupted by
/// a signal is made again.
pub fn receive<const N: usize>(socket: RawFd, data: &mut [u8]) -> io::Result<Received> {
    loop {
        let mut space = nix::cmsg_space!([RawFd; N]);
        let mut iov = [IoSliceMut::new(data)];
        let msg = match recvmsg::<()>(
            socket,
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => msg,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        let mut raw = Vec::new();
        for cmsg in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(received) = cmsg {
                raw.extend(received);
            }
        }
        // SAFETY: each descriptor arrived with this message and nothing else owns it.
        let fds = raw
            .into_iter()
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect();
        return Ok(Received {
            bytes: msg.bytes,
            truncated: msg.flags.contains(MsgFlags::MSG_TRUNC),
            fds,
        });
    }
}

/// Sends `data` with `fds` as one message (no SIGPIPE: a peer that has gone is an error).
pub fn send(socket: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    sendmsg::<()>(
        socket,
        &[IoSlice::new(data)],
        &[ControlMessage::ScmRights(fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use std::os::fd::AsRawFd;

    #[test]
    fn descriptors_and_bytes_arrive_together_and_end_of_file_is_empty() {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .expect("socketpair");
        let file = std::fs::File::open("/dev/null").expect("/dev/null");
        send(
            a.as_raw_fd(),
            b"hello",
            &[file.as_raw_fd(), file.as_raw_fd()],
        )
        .expect("send");
        let mut data = [0u8; 3];
        let got = receive::<2>(b.as_raw_fd(), &mut data).expect("receive");
        assert_eq!((got.bytes, got.truncated, got.fds.len()), (3, true, 2));
        assert_eq!(&data, b"hel");
        drop((a, got));
        let got = receive::<2>(b.as_raw_fd(), &mut data).expect("receive");
        assert_eq!((got.bytes, got.fds.len()), (0, 0));
    }
}
