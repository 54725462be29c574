//! Copying bytes both ways between a program and a destination, each byte counted against
//! the sandbox's budget, until both sides close, the budget runs out, or nothing moves for
//! the idle time.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::metrics::HostCounters;
use crate::sandbox::{Direction, SandboxEgress};

const CHUNK: usize = 16 * 1024;

/// Where bytes are counted: the sandbox's budget and counters, and its host's metrics.
pub(crate) struct Meter {
    pub(crate) sandbox: SandboxEgress,
    pub(crate) host: Arc<HostCounters>,
}

/// How a relay ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RelayEnd {
    /// Both sides closed, or one failed.
    Closed,
    /// The sandbox's bytes ran out.
    BytesUsedUp,
    /// Nothing moved either way for the idle time (or a side stopped reading).
    Idle,
}

/// Writes `bytes` as far as the budget lets; `Ok(false)` when it cut them short.
async fn send<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
    meter: &Meter,
    direction: Direction,
    idle: Duration,
) -> Result<bool, RelayEnd> {
    let allowed = meter.sandbox.take_bytes(bytes.len(), direction);
    meter.host.count_bytes(allowed, direction == Direction::In);
    match tokio::time::timeout(idle, writer.write_all(&bytes[..allowed])).await {
        Ok(Ok(())) => Ok(allowed == bytes.len()),
        Ok(Err(_)) => Err(RelayEnd::Closed),
        Err(_) => Err(RelayEnd::Idle),
    }
}

/// Sends `first` (what the program sent before the relay began) to the origin, then
/// copies both ways.
pub(crate) async fn relay_after<C, O>(
    client: C,
    mut origin: O,
    first: &[u8],
    meter: &Meter,
    idle: Duration,
) -> RelayEnd
where
    C: AsyncRead + AsyncWrite + Unpin,
    O: AsyncRead + AsyncWrite + Unpin,
{
    match send(&mut origin, first, meter, Direction::Out, idle).await {
        Ok(true) => relay(client, origin, meter, idle).await,
        Ok(false) => RelayEnd::BytesUsedUp,
        Err(end) => end,
    }
}

/// Copies both ways until the end (see [`RelayEnd`]).
pub(crate) async fn relay<C, O>(client: C, origin: O, meter: &Meter, idle: Duration) -> RelayEnd
where
    C: AsyncRead + AsyncWrite + Unpin,
    O: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut origin_read, mut origin_write) = tokio::io::split(origin);
    let mut up = vec![0u8; CHUNK];
    let mut down = vec![0u8; CHUNK];
    let (mut up_open, mut down_open) = (true, true);
    while up_open || down_open {
        let step = tokio::select! {
            read = client_read.read(&mut up), if up_open => match read {
                Ok(0) | Err(_) => {
                    up_open = false;
                    let _ = origin_write.shutdown().await;
                    Ok(true)
                }
                Ok(n) => send(&mut origin_write, &up[..n], meter, Direction::Out, idle).await,
            },
            read = origin_read.read(&mut down), if down_open => match read {
                Ok(0) | Err(_) => {
                    down_open = false;
                    let _ = client_write.shutdown().await;
                    Ok(true)
                }
                Ok(n) => send(&mut client_write, &down[..n], meter, Direction::In, idle).await,
            },
            () = tokio::time::sleep(idle) => Err(RelayEnd::Idle),
        };
        match step {
            Ok(true) => {}
            Ok(false) => return RelayEnd::BytesUsedUp,
            Err(end) => return end,
        }
    }
    RelayEnd::Closed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::Limits;

    fn meter(max_bytes: u64) -> Meter {
        let sandbox = SandboxEgress::new(Limits {
            max_bytes,
            max_connections: 1,
        });
        Meter {
            sandbox,
            host: Arc::default(),
        }
    }

    #[tokio::test]
    async fn copies_both_ways_and_counts() {
        let (client, mut program) = tokio::io::duplex(1024);
        let (origin, mut server) = tokio::io::duplex(1024);
        let meter = meter(1000);
        let relaying = relay(client, origin, &meter, Duration::from_secs(5));
        let talking = async {
            program.write_all(b"hello").await.unwrap();
            let mut got = [0u8; 5];
            server.read_exact(&mut got).await.unwrap();
            server.write_all(b"world!").await.unwrap();
            drop(server);
            let mut answer = Vec::new();
            program.read_to_end(&mut answer).await.unwrap();
            drop(program);
            answer
        };
        let (end, answer) = tokio::join!(relaying, talking);
        assert_eq!(end, RelayEnd::Closed);
        assert_eq!(answer, b"world!");
        let usage = meter.sandbox.usage();
        assert_eq!((usage.bytes_out, usage.bytes_in), (5, 6));
    }

    #[tokio::test]
    async fn stops_when_the_bytes_run_out() {
        let (client, mut program) = tokio::io::duplex(1024);
        let (origin, mut server) = tokio::io::duplex(1024);
        let meter = meter(8);
        let relaying = relay(client, origin, &meter, Duration::from_secs(5));
        let talking = async {
            program.write_all(b"0123456789").await.unwrap();
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            got
        };
        let (end, got) = tokio::join!(relaying, talking);
        assert_eq!(end, RelayEnd::BytesUsedUp);
        assert_eq!(got, b"01234567");
        assert!(meter.sandbox.bytes_used_up());
    }

    #[tokio::test]
    async fn ends_when_idle() {
        let (client, _program) = tokio::io::duplex(1024);
        let (origin, _server) = tokio::io::duplex(1024);
        let end = relay(client, origin, &meter(10), Duration::from_millis(50)).await;
        assert_eq!(end, RelayEnd::Idle);
    }
}
