//! The guest's end of the egress tunnel ([`sandbox_protocol::tunnel`]): a listener at the
//! proxy's address inside the sandbox's network namespace, whose connections go to the
//! runner's proxy over the virtio serial port named `egress`, on a thread of the init's
//! own (the sandbox's freezer never stops it).
//!
//! Nothing is served until the runner says [`Frame::Reset`]: a runner without egress
//! never does, and the sandbox then has no listener at all. The first Reset makes the
//! listener (the thread enters the sandbox's network namespace for that, and stays
//! there: it touches nothing else of the network). Until the runner's next Reset, after
//! a [`Frame::Quiesce`] (a save), or when the host side goes away, every connection is
//! dropped and new ones are closed at once.
//!
//! Every buffer is bounded: a connection's bytes on their way to the program by the
//! runner's window, those on their way up by [`WINDOW`] of credit and by [`OUT_HIGH`]
//! of frames waiting for the port, connections by [`MAX_CONNECTIONS`].

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sandbox_protocol::tunnel::{
    Decoder, Frame, MAX_CONNECTIONS, MAX_DATA, PORT_NAME, PROXY_ADDR, WINDOW,
};
use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

/// Frames waiting for the port beyond which no connection is read.
const OUT_HIGH: usize = 512 * 1024;
/// How long to wait before reading the port again once its host side has gone.
const HOST_GONE_WAIT: Duration = Duration::from_millis(100);

/// One program's connection.
struct Conn {
    stream: TcpStream,
    /// Bytes from the runner on their way to the program.
    to_program: VecDeque<u8>,
    /// Bytes sent up and not yet credited.
    in_flight: usize,
    /// The program's end of the file was seen (and said).
    read_done: bool,
    /// The runner said it sends no more.
    host_done: bool,
    /// Our writing side was shut down (after `host_done`, once drained).
    shut: bool,
}

/// What one poll found ready.
struct Ready {
    port: PollFlags,
    listener: bool,
    conns: Vec<(u32, PollFlags)>,
}

/// The tunnel's state.
pub(super) struct Tunnel {
    port: File,
    netns: File,
    listener: Option<TcpListener>,
    decoder: Decoder,
    out: VecDeque<u8>,
    conns: BTreeMap<u32, Conn>,
    next_id: u32,
    /// Nothing served: before the first Reset, after a Quiesce, once the host is gone.
    quiesced: bool,
}

impl Tunnel {
    /// The tunnel over `port` (opened non-blocking) for the sandbox whose network
    /// namespace `netns` is.
    pub(super) fn new(port: File, netns: File) -> Tunnel {
        Tunnel {
            port,
            netns,
            listener: None,
            decoder: Decoder::default(),
            out: VecDeque::new(),
            conns: BTreeMap::new(),
            next_id: 1,
            quiesced: true,
        }
    }

    /// Serves until the port fails or the runner breaks the protocol.
    pub(super) fn run(mut self) -> io::Result<()> {
        loop {
            let ready = self.wait()?;
            if ready.port.contains(PollFlags::POLLOUT) {
                self.write_port()?;
            }
            if ready
                .port
                .intersects(PollFlags::POLLIN | PollFlags::POLLHUP)
            {
                self.read_port()?;
            }
            if ready.listener {
                self.accept();
            }
            for (id, flags) in ready.conns {
                self.serve_conn(id, flags);
            }
        }
    }

    /// Polls the port, the listener and the connections: what each is ready for.
    fn wait(&self) -> io::Result<Ready> {
        let mut port_events = PollFlags::POLLIN;
        if !self.out.is_empty() {
            port_events |= PollFlags::POLLOUT;
        }
        let room = self.out.len() < OUT_HIGH;
        let mut fds = vec![PollFd::new(self.port.as_fd(), port_events)];
        if let Some(listener) = &self.listener {
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
        }
        let ids: Vec<u32> = self.conns.keys().copied().collect();
        for conn in self.conns.values() {
            let mut events = PollFlags::empty();
            if room && !conn.read_done && conn.in_flight < WINDOW {
                events |= PollFlags::POLLIN;
            }
            if room && !conn.to_program.is_empty() {
                events |= PollFlags::POLLOUT;
            }
            fds.push(PollFd::new(conn.stream.as_fd(), events));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let ready = |fd: &PollFd| fd.revents().unwrap_or(PollFlags::empty());
        let port = ready(&fds[0]);
        let first_conn = if self.listener.is_some() { 2 } else { 1 };
        let listener = self.listener.is_some() && !ready(&fds[1]).is_empty();
        let conns = ids
            .into_iter()
            .zip(&fds[first_conn..])
            .map(|(id, fd)| (id, ready(fd)))
            .filter(|(_, flags)| !flags.is_empty())
            .collect();
        Ok(Ready {
            port,
            listener,
            conns,
        })
    }

    fn send(&mut self, frame: &Frame) {
        self.out.extend(frame.encode());
    }

    fn write_port(&mut self) -> io::Result<()> {
        let (front, _) = self.out.as_slices();
        match self.port.write(front) {
            Ok(n) => {
                self.out.drain(..n);
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn read_port(&mut self) -> io::Result<()> {
        let mut buf = vec![0u8; 64 * 1024];
        match self.port.read(&mut buf) {
            // The host side has gone (a VM being saved, or its runner): serve nothing
            // until a runner says Reset again.
            Ok(0) => {
                self.drop_all();
                self.quiesced = true;
                self.out.clear();
                self.decoder = Decoder::default();
                std::thread::sleep(HOST_GONE_WAIT);
                Ok(())
            }
            Ok(n) => {
                self.decoder.push(&buf[..n]);
                while let Some(frame) = self.decoder.next_frame().map_err(io::Error::other)? {
                    self.on_host_frame(frame)?;
                }
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn on_host_frame(&mut self, frame: Frame) -> io::Result<()> {
        match frame {
            Frame::Reset => {
                self.drop_all();
                if self.listener.is_none() {
                    self.listener = Some(listen_in(&self.netns)?);
                }
                self.quiesced = false;
            }
            Frame::Quiesce => {
                self.drop_all();
                self.quiesced = true;
                self.send(&Frame::Quiesced);
            }
            _ if self.quiesced => {}
            Frame::Data(id, bytes) => self.deliver(id, bytes),
            Frame::Credit(id, n) => {
                if let Some(conn) = self.conns.get_mut(&id) {
                    conn.in_flight = conn.in_flight.saturating_sub(n as usize);
                }
            }
            Frame::Eof(id) => {
                if let Some(conn) = self.conns.get_mut(&id) {
                    conn.host_done = true;
                }
                self.finish(id);
            }
            Frame::Close(id) => {
                self.conns.remove(&id);
            }
            Frame::Open(_) | Frame::Quiesced => {
                return Err(io::Error::other("the runner sent a guest's frame"));
            }
        }
        Ok(())
    }

    /// Bytes for a connection's program; a runner that overruns its window loses the
    /// connection.
    fn deliver(&mut self, id: u32, bytes: Vec<u8>) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.host_done || conn.to_program.len() + bytes.len() > WINDOW {
            self.close(id);
            return;
        }
        conn.to_program.extend(bytes);
    }

    fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        let mut accepted = Vec::new();
        while let Ok((stream, _)) = listener.accept() {
            accepted.push(stream);
        }
        for stream in accepted {
            if self.quiesced || self.conns.len() >= MAX_CONNECTIONS {
                continue; // dropped: closed at once
            }
            // Relayed bytes go out as they come (no wait for an ACK on loopback).
            if stream.set_nonblocking(true).is_err() || stream.set_nodelay(true).is_err() {
                continue;
            }
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            self.conns.insert(
                id,
                Conn {
                    stream,
                    to_program: VecDeque::new(),
                    in_flight: 0,
                    read_done: false,
                    host_done: false,
                    shut: false,
                },
            );
            self.send(&Frame::Open(id));
        }
    }

    fn serve_conn(&mut self, id: u32, flags: PollFlags) {
        if flags.contains(PollFlags::POLLOUT) || flags.contains(PollFlags::POLLERR) {
            self.write_conn(id);
        }
        if flags.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            self.read_conn(id);
        }
    }

    fn read_conn(&mut self, id: u32) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.read_done || conn.in_flight >= WINDOW {
            return;
        }
        let mut buf = vec![0u8; MAX_DATA.min(WINDOW - conn.in_flight)];
        match conn.stream.read(&mut buf) {
            Ok(0) => {
                conn.read_done = true;
                self.send(&Frame::Eof(id));
                self.finish(id);
            }
            Ok(n) => {
                conn.in_flight += n;
                buf.truncate(n);
                self.send(&Frame::Data(id, buf));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(_) => self.close(id),
        }
    }

    fn write_conn(&mut self, id: u32) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let (front, _) = conn.to_program.as_slices();
        match conn.stream.write(front) {
            Ok(n) => {
                conn.to_program.drain(..n);
                if n > 0 {
                    self.send(&Frame::Credit(id, n as u32));
                }
                self.finish(id);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(_) => self.close(id),
        }
    }

    /// Shuts down our writing side once the runner is done and everything is written,
    /// and forgets the connection once both sides are done.
    fn finish(&mut self, id: u32) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.host_done && conn.to_program.is_empty() && !conn.shut {
            let _ = conn.stream.shutdown(Shutdown::Write);
            conn.shut = true;
        }
        if conn.read_done && conn.shut {
            self.conns.remove(&id);
        }
    }

    /// Drops a connection and tells the runner.
    fn close(&mut self, id: u32) {
        if self.conns.remove(&id).is_some() {
            self.send(&Frame::Close(id));
        }
    }

    fn drop_all(&mut self) {
        self.conns.clear();
    }
}

/// The listener at the proxy's address in the sandbox's network namespace, which the
/// calling thread enters.
fn listen_in(netns: &File) -> io::Result<TcpListener> {
    nix::sched::setns(netns, nix::sched::CloneFlags::CLONE_NEWNET)?;
    let listener = TcpListener::bind(PROXY_ADDR)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Starts the tunnel's thread where the VMM gives the guest the `egress` port (QEMU);
/// without it (Firecracker) the sandbox has no listener. A failure is written to the
/// console and leaves the sandbox without one: it fails closed.
pub(super) fn start() {
    let Some(device) = super::host::find_port(PORT_NAME) else {
        return;
    };
    let opened = sandbox_netns().and_then(|netns| {
        let port = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&device)?;
        Ok((port, netns))
    });
    let (port, netns) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            eprintln!("sandbox-agent init: no egress tunnel: {e}");
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("egress".into())
        .spawn(move || {
            if let Err(e) = Tunnel::new(port, netns).run() {
                eprintln!("sandbox-agent init: the egress tunnel ended: {e}");
            }
        });
    if let Err(e) = spawned {
        eprintln!("sandbox-agent init: no egress tunnel: {e}");
    }
}

/// The sandbox's network namespace: that of the guest's process that is not in the
/// init's (the sandbox's agent, just started; the guest holds nothing else).
fn sandbox_netns() -> io::Result<File> {
    let own = std::fs::read_link("/proc/self/ns/net")?;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let path = format!("/proc/{pid}/ns/net");
        match std::fs::read_link(&path) {
            Ok(ns) if ns != own => return File::open(&path),
            _ => {}
        }
    }
    Err(io::Error::new(
        ErrorKind::NotFound,
        "no process in the sandbox's network namespace",
    ))
}
