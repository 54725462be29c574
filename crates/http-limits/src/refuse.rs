//! Connections over the cap: a 503 written straight to the socket, then closed.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// How long a refused connection may take to hear its 503 and hang up.
const REFUSAL_TIME: Duration = Duration::from_secs(1);
/// At most this many bytes of a refused client's request are read (and thrown away).
const DRAIN_BYTES: usize = 64 * 1024;

/// Refused connections being answered; bounded, so that refusing costs little too.
pub(crate) struct Refusals {
    max_connections: usize,
    in_flight: Arc<Semaphore>,
}

impl Refusals {
    /// Answers at most as many refused connections at once as are served.
    pub(crate) fn new(max_connections: usize) -> Self {
        Refusals {
            max_connections,
            in_flight: Arc::new(Semaphore::new(max_connections)),
        }
    }

    /// Answers 503 on `stream` in a task of `tasks`, or just closes it when too many
    /// refusals are already in flight.
    pub(crate) fn refuse(&self, stream: TcpStream, tasks: &mut JoinSet<()>) {
        tracing::warn!(
            max_connections = self.max_connections,
            "connection refused: too many open"
        );
        if let Ok(permit) = self.in_flight.clone().try_acquire_owned() {
            tasks.spawn(answer_busy(stream, self.max_connections, permit));
        }
    }
}

async fn answer_busy(mut stream: TcpStream, max_connections: usize, _permit: OwnedSemaphorePermit) {
    let response = busy_response(max_connections);
    let exchange = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        // Reading what the client sends until it hangs up keeps the kernel from answering
        // its request with a reset, which could destroy the 503 before it is read.
        let mut buf = [0u8; 4096];
        let mut drained = 0;
        while drained < DRAIN_BYTES {
            match stream.read(&mut buf).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_TIME, exchange).await;
}

fn busy_response(max_connections: usize) -> String {
    let body = serde_json::json!({"error": {
        "code": "too_many_connections",
        "message": format!(
            "this server is serving as many connections as it may ({max_connections}); retry in a second"
        ),
    }})
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}
