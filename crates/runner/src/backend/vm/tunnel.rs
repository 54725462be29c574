//! The runner's end of a QEMU VM's egress tunnel ([`sandbox_protocol::tunnel`]): the
//! stream of the guest's `egress` port, whose connections it hands to the runner's
//! proxy as the VM sandbox's own ([`Egress::serve_streams`]), one in-memory pipe each.
//!
//! One task reads the guest's frames and keeps the connections; one writes frames to the
//! guest; one per connection moves its bytes between its pipe and the stream. The guest
//! is untrusted: a frame that breaks the protocol (bad framing, a window overrun, an id
//! opened twice, a frame only the host sends) ends the tunnel and every connection in it.
//!
//! Without egress the stream is only held (QEMU keeps the port connected) and nothing is
//! ever sent on it: the guest then never makes its listener.

use sandbox_egress::{Egress, SandboxEgress};
use sandbox_protocol::tunnel::{Decoder, Frame, TunnelError, MAX_CONNECTIONS, MAX_DATA, WINDOW};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

/// Frames waiting for the writer.
const QUEUE: usize = 64;
/// Bytes read from the guest's stream at a time.
const READ_CHUNK: usize = 64 * 1024;
/// How long the guest may take to answer a Quiesce.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(5);

/// A VM sandbox's tunnel: its egress handle (grant, counters), and the tasks serving it,
/// aborted when it is dropped.
pub struct Tunnel {
    /// The sandbox's grant and counters.
    pub handle: SandboxEgress,
    egress: Egress,
    quiesce: mpsc::Sender<()>,
    reading: JoinHandle<Result<OwnedReadHalf, TunnelEnd>>,
    writing: JoinHandle<Option<OwnedWriteHalf>>,
    serving: JoinHandle<()>,
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.reading.abort();
        self.writing.abort();
        self.serving.abort();
    }
}

impl Tunnel {
    /// Serves the guest's connections on `stream` with `egress` for the sandbox `handle`
    /// (its grant and counters); the guest is told to start (Reset) at once.
    pub fn open(egress: &Egress, handle: SandboxEgress, stream: UnixStream) -> Tunnel {
        let (streams, handed) = mpsc::channel(MAX_CONNECTIONS);
        let serving = egress.serve_streams(handed, handle.clone());
        let (quiesce, quiesce_rx) = mpsc::channel(1);
        let (read, write) = stream.into_split();
        let (frames, queued) = mpsc::channel(QUEUE);
        let writing = tokio::spawn(write_frames(write, queued));
        let reader = Reader {
            frames,
            streams,
            conns: HashMap::new(),
            tasks: JoinSet::new(),
        };
        let reading = tokio::spawn(async move {
            let end = reader.run(read, quiesce_rx).await;
            if let Err(why) = &end {
                tracing::warn!(%why, "egress: a VM's tunnel ended");
            }
            end
        });
        Tunnel {
            handle,
            egress: egress.clone(),
            quiesce,
            reading,
            writing,
            serving,
        }
    }

    /// Drops every connection and stops both directions at a frame's end, before the
    /// VM is saved. Gives back what [`Tunnel::resume`] takes, if the guest answered in
    /// time (else the tunnel is gone; a restored guest serves no connection until a
    /// runner says Reset on its port again, as a restoring runner does).
    pub async fn quiesce(mut self) -> Option<Quiesced> {
        self.quiesce.send(()).await.ok()?;
        let read = tokio::time::timeout(QUIESCE_TIMEOUT, &mut self.reading)
            .await
            .ok()?
            .ok()?
            .ok()?;
        let write = tokio::time::timeout(QUIESCE_TIMEOUT, &mut self.writing)
            .await
            .ok()?
            .ok()??;
        let stream = read.reunite(write).ok()?;
        Some(Quiesced {
            handle: self.handle.clone(),
            egress: self.egress.clone(),
            stream,
        })
    }
}

/// A quiesced tunnel's parts, to serve again if the save did not happen.
pub struct Quiesced {
    handle: SandboxEgress,
    egress: Egress,
    stream: UnixStream,
}

impl Quiesced {
    /// The tunnel again, with its handle (the guest is told Reset).
    pub fn resume(self) -> Tunnel {
        Tunnel::open(&self.egress, self.handle, self.stream)
    }
}

/// Why the tunnel ended.
#[derive(Debug, thiserror::Error)]
enum TunnelEnd {
    #[error("the guest broke the protocol: {0}")]
    Protocol(String),
    #[error("reading the guest's port: {0}")]
    Read(#[from] std::io::Error),
    #[error("the guest's port closed")]
    Closed,
}

impl From<TunnelError> for TunnelEnd {
    fn from(e: TunnelError) -> TunnelEnd {
        TunnelEnd::Protocol(e.to_string())
    }
}

/// What the reader keeps of one connection.
struct Conn {
    /// Bytes and the end for the proxy's side (`None` once the guest said Eof).
    inbound: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// Bytes from the guest not yet delivered to the proxy's side.
    unacked: Arc<AtomicUsize>,
    /// The bytes the guest may still be sent.
    credit: Arc<Semaphore>,
    task: AbortHandle,
}

struct Reader {
    frames: mpsc::Sender<Frame>,
    streams: mpsc::Sender<DuplexStream>,
    conns: HashMap<u32, Conn>,
    /// Each connection's task; its output is its id, once it has ended.
    tasks: JoinSet<u32>,
}

impl Reader {
    /// Serves until the guest breaks the protocol or its port closes, or, asked to
    /// quiesce, until the guest has answered: then gives the read half back. The stream
    /// is read into a decoder (a read is cancel-safe, a frame half read is kept).
    async fn run(
        mut self,
        mut read: OwnedReadHalf,
        mut quiesce: mpsc::Receiver<()>,
    ) -> Result<OwnedReadHalf, TunnelEnd> {
        self.send(Frame::Reset).await?;
        let mut stream = GuestStream {
            decoder: Decoder::default(),
            buf: vec![0u8; READ_CHUNK],
        };
        loop {
            while let Some(frame) = stream.decoder.next_frame()? {
                self.on_guest_frame(frame).await?;
            }
            tokio::select! {
                got = stream.fill(&mut read) => got?,
                Some(()) = quiesce.recv() => {
                    self.quiesce(&mut read, &mut stream).await?;
                    return Ok(read);
                }
                Some(ended) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Ok(id) = ended {
                        self.conns.remove(&id);
                    }
                }
            }
        }
    }

    async fn send(&self, frame: Frame) -> Result<(), TunnelEnd> {
        self.frames.send(frame).await.map_err(|_| TunnelEnd::Closed)
    }

    async fn on_guest_frame(&mut self, frame: Frame) -> Result<(), TunnelEnd> {
        match frame {
            Frame::Open(id) => self.open(id).await?,
            Frame::Data(id, bytes) => self.data(id, bytes).await?,
            Frame::Credit(id, n) => {
                if let Some(conn) = self.conns.get(&id) {
                    let n = n as usize;
                    if conn.credit.available_permits() + n > WINDOW {
                        return Err(TunnelEnd::Protocol(format!(
                            "credit beyond the window on {id}"
                        )));
                    }
                    conn.credit.add_permits(n);
                }
            }
            Frame::Eof(id) => {
                if let Some(conn) = self.conns.get_mut(&id) {
                    conn.inbound = None;
                }
            }
            Frame::Close(id) => {
                if let Some(conn) = self.conns.remove(&id) {
                    conn.task.abort();
                }
            }
            Frame::Quiesced => {}
            Frame::Reset | Frame::Quiesce => {
                return Err(TunnelEnd::Protocol("a host's frame from the guest".into()));
            }
        }
        Ok(())
    }

    async fn open(&mut self, id: u32) -> Result<(), TunnelEnd> {
        if self.conns.contains_key(&id) {
            return Err(TunnelEnd::Protocol(format!("connection {id} opened twice")));
        }
        let (ours, theirs) = tokio::io::duplex(WINDOW);
        if self.conns.len() >= MAX_CONNECTIONS || self.streams.try_send(theirs).is_err() {
            return self.send(Frame::Close(id)).await;
        }
        let (inbound, inbound_rx) = mpsc::unbounded_channel();
        let unacked = Arc::new(AtomicUsize::new(0));
        let credit = Arc::new(Semaphore::new(WINDOW));
        let pump = Pump {
            id,
            frames: self.frames.clone(),
            unacked: unacked.clone(),
            credit: credit.clone(),
        };
        let task = self.tasks.spawn(pump.run(ours, inbound_rx));
        self.conns.insert(
            id,
            Conn {
                inbound: Some(inbound),
                unacked,
                credit,
                task,
            },
        );
        Ok(())
    }

    async fn data(&mut self, id: u32, bytes: Vec<u8>) -> Result<(), TunnelEnd> {
        let Some(conn) = self.conns.get(&id) else {
            // A connection the runner has ended: the guest learns it from its Close.
            return Ok(());
        };
        let unacked = conn.unacked.fetch_add(bytes.len(), Ordering::SeqCst) + bytes.len();
        if unacked > WINDOW {
            return Err(TunnelEnd::Protocol(format!("window overrun on {id}")));
        }
        match &conn.inbound {
            Some(inbound) => {
                // The pump may have ended: the guest learns it from its Close.
                let _ = inbound.send(bytes);
                Ok(())
            }
            None => Err(TunnelEnd::Protocol(format!("data after the end on {id}"))),
        }
    }

    /// Ends every connection, says Quiesce (the writer's last frame) and reads until
    /// the guest's Quiesced (its frames before it are dropped).
    async fn quiesce(
        &mut self,
        read: &mut OwnedReadHalf,
        stream: &mut GuestStream,
    ) -> Result<(), TunnelEnd> {
        self.tasks.abort_all();
        self.conns.clear();
        self.send(Frame::Quiesce).await?;
        loop {
            while let Some(frame) = stream.decoder.next_frame()? {
                if frame == Frame::Quiesced {
                    return Ok(());
                }
            }
            stream.fill(read).await?;
        }
    }
}

/// One connection's bytes between its pipe to the proxy and the guest.
struct Pump {
    id: u32,
    frames: mpsc::Sender<Frame>,
    unacked: Arc<AtomicUsize>,
    credit: Arc<Semaphore>,
}

impl Pump {
    /// Both directions until both have ended; if either failed, the guest is told the
    /// connection is gone (after a clean end both ways it has seen both Eofs, and a Close
    /// would drop what it has not yet written to the program). Its output is its id.
    async fn run(self, pipe: DuplexStream, inbound: mpsc::UnboundedReceiver<Vec<u8>>) -> u32 {
        let (from_proxy, to_proxy) = tokio::io::split(pipe);
        let ended = tokio::join!(self.up(from_proxy), self.down(to_proxy, inbound));
        if ended != (Some(()), Some(())) {
            let _ = self.frames.send(Frame::Close(self.id)).await;
        }
        self.id
    }

    /// The proxy's bytes to the guest, within the guest's credit: each read takes at
    /// most what the guest may still be sent, and gives back what it did not use.
    async fn up(&self, mut from_proxy: ReadHalf<DuplexStream>) -> Option<()> {
        let mut buf = vec![0u8; MAX_DATA];
        loop {
            self.credit.acquire().await.ok()?.forget();
            // Only this task takes permits: what is available now stays so.
            let more = self.credit.available_permits().min(MAX_DATA - 1);
            let granted = match self.credit.try_acquire_many(more as u32) {
                Ok(permits) => {
                    permits.forget();
                    1 + more
                }
                Err(_) => 1,
            };
            let n = from_proxy.read(&mut buf[..granted]).await.ok()?;
            self.credit.add_permits(granted - n);
            if n == 0 {
                self.frames.send(Frame::Eof(self.id)).await.ok()?;
                return Some(());
            }
            self.frames
                .send(Frame::Data(self.id, buf[..n].to_vec()))
                .await
                .ok()?;
        }
    }

    /// The guest's bytes to the proxy, each delivery credited back.
    async fn down(
        &self,
        mut to_proxy: WriteHalf<DuplexStream>,
        mut inbound: mpsc::UnboundedReceiver<Vec<u8>>,
    ) -> Option<()> {
        while let Some(bytes) = inbound.recv().await {
            to_proxy.write_all(&bytes).await.ok()?;
            self.unacked.fetch_sub(bytes.len(), Ordering::SeqCst);
            let credit = Frame::Credit(self.id, bytes.len() as u32);
            self.frames.send(credit).await.ok()?;
        }
        to_proxy.shutdown().await.ok()
    }
}

/// Writes the frames in order until a Quiesce, its last, and then gives the write half
/// back; `None` if writing failed or no more frames can come.
async fn write_frames(
    mut write: OwnedWriteHalf,
    mut queued: mpsc::Receiver<Frame>,
) -> Option<OwnedWriteHalf> {
    while let Some(frame) = queued.recv().await {
        write.write_all(&frame.encode()).await.ok()?;
        if frame == Frame::Quiesce {
            return Some(write);
        }
    }
    None
}

/// The guest's bytes, read as they come and split into frames.
struct GuestStream {
    decoder: Decoder,
    buf: Vec<u8>,
}

impl GuestStream {
    /// Reads what the guest sent next into the decoder.
    async fn fill(&mut self, read: &mut OwnedReadHalf) -> Result<(), TunnelEnd> {
        match read.read(&mut self.buf).await? {
            0 => Err(TunnelEnd::Closed),
            n => {
                self.decoder.push(&self.buf[..n]);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
#[path = "tunnel_tests.rs"]
mod tests;
