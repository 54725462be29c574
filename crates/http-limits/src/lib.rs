//! http-limits: serves an axum [`Router`] on a [`TcpListener`] with limits against slow and
//! greedy clients, for both sandbox-runner and sandbox-mcp.
//!
//! `axum::serve` sets no timer, so a client that sends its headers one byte a minute holds
//! a connection forever, and it caps neither header size nor connections. [`serve`] runs
//! hyper's HTTP/1 server itself with these [`Limits`]:
//!
//! | Limit | Default | Over it | sandbox-runner | sandbox-mcp |
//! |---|---|---|---|---|
//! | header read timeout (also the idle keep-alive timeout) | 10 s | connection closed | `RUNNER_HEADER_TIMEOUT_MS` | `MCP_HEADER_TIMEOUT_MS` |
//! | header size, request line included | 16 KiB | 431 | `RUNNER_MAX_HEADER_BYTES` | `MCP_MAX_HEADER_BYTES` |
//! | connections open at once | 512 | 503, connection closed | `RUNNER_MAX_CONNECTIONS` | `MCP_MAX_CONNECTIONS` |
//! | reading the whole request body | 30 s | 408, connection closed | `RUNNER_BODY_TIMEOUT_MS` | `MCP_BODY_TIMEOUT_MS` |
//!
//! Each variable has a flag of the same name in kebab case (`--header-timeout-ms`, ...).
//! Error bodies are JSON: `{"error": {"code", "message"}}`.
//!
//! On shutdown [`serve`] stops accepting (the listener is closed), lets the requests in
//! flight finish, and closes idle connections; it returns when every connection is closed.
//! It has no grace period of its own: a caller that wants one races [`serve`] against a
//! timer, and dropping the future closes whatever connections are left.
//!
//! It is not for body size limits (each service knows its own, and answers 413 in its own
//! words), authentication, or TLS (put a proxy in front), and it speaks HTTP/1.1 only.

mod args;
mod body;
mod refuse;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// How long the client has to send a request's headers, by default.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head (request line and headers) accepted by default, in bytes.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;
/// The most connections served at once by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// How long the client has to send a whole request body, by default.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The smallest header limit that still fits a real client's request.
pub const MIN_HEADER_BYTES: usize = 1024;

/// How long to wait after an accept error that is not about one connection (out of file
/// descriptors, say) before accepting again.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// The limits [`serve`] applies; [`Limits::default`] gives the defaults above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Time to receive a request's headers; a connection that takes longer is closed. It
    /// also closes keep-alive connections idle for that long.
    pub header_read_timeout: Duration,
    /// Largest request head in bytes; a larger one gets 431.
    pub max_header_bytes: usize,
    /// Connections served at once; one more gets 503 and is closed.
    pub max_connections: usize,
    /// Time to receive a whole request body, counted from its headers; a slower body gets
    /// 408. Only bodies a handler reads are timed.
    pub body_read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
        }
    }
}

/// A limit that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// A timeout of zero would refuse every request.
    #[error("{0} must be at least 1 ms")]
    ZeroTimeout(&'static str),
    /// Too small a header limit refuses every real client.
    #[error("the header size limit must be at least {MIN_HEADER_BYTES} bytes, not {0}")]
    HeaderTooSmall(usize),
    /// Zero connections would serve nobody.
    #[error("the connection limit must be at least 1")]
    NoConnections,
}

impl Limits {
    /// Refuses limits that would refuse every request.
    pub fn validate(self) -> Result<Self, LimitError> {
        if self.header_read_timeout.is_zero() {
            return Err(LimitError::ZeroTimeout("the header read timeout"));
        }
        if self.body_read_timeout.is_zero() {
            return Err(LimitError::ZeroTimeout("the body read timeout"));
        }
        if self.max_header_bytes < MIN_HEADER_BYTES {
            return Err(LimitError::HeaderTooSmall(self.max_header_bytes));
        }
        if self.max_connections == 0 {
            return Err(LimitError::NoConnections);
        }
        Ok(self)
    }
}

/// Serves `router` on `listener` with `limits` until `shutdown` completes, then stops
/// accepting and returns once the requests in flight have finished.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let service = TowerToHyperService::new(body::with_deadline(router, limits.body_read_timeout));
    let http = Arc::new(http1_builder(&limits));
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = refuse::Refusals::new(limits.max_connections);
    let stop = CancellationToken::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let connection = serve_connection(stream, service.clone(), http.clone(), stop.clone(), permit);
                        connections.spawn(connection);
                    }
                    Err(_) => refusals.refuse(stream, &mut connections),
                },
                Err(error) => {
                    if !is_connection_error(&error) {
                        tracing::error!(%error, "accepting a connection failed; retrying in a second");
                        tokio::select! {
                            () = &mut shutdown => break,
                            () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                        }
                    }
                }
            },
            Some(done) = connections.join_next(), if !connections.is_empty() => log_panic(done),
        }
    }
    drop(listener);
    stop.cancel();
    while let Some(done) = connections.join_next().await {
        log_panic(done);
    }
}

fn http1_builder(limits: &Limits) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes);
    http
}

/// Serves one connection; on `stop`, finishes the request in flight and closes.
async fn serve_connection(
    stream: TcpStream,
    service: TowerToHyperService<Router>,
    http: Arc<http1::Builder>,
    stop: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    // An answer goes out in several writes (a head, then its body or its events): with
    // Nagle's algorithm on, the last one waits for the client's delayed ACK (40 ms on
    // Linux) once calls come back to back. Failing to set it changes nothing else.
    let _ = stream.set_nodelay(true);
    let connection = http.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    let served = tokio::select! {
        served = connection.as_mut() => served,
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.as_mut().await
        }
    };
    if let Err(error) = served {
        tracing::debug!(%error, "connection ended with an error");
    }
}

/// Errors about one connection, which say nothing about the listener.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

fn log_panic(done: Result<(), tokio::task::JoinError>) {
    if let Err(error) = done {
        if error.is_panic() {
            tracing::error!(%error, "a connection task panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_that_refuse_every_request_are_refused() {
        assert!(Limits::default().validate().is_ok());
        let zero = Limits {
            header_read_timeout: Duration::ZERO,
            ..Limits::default()
        };
        assert!(zero.validate().unwrap_err().to_string().contains("header"));
        let tiny = Limits {
            max_header_bytes: 100,
            ..Limits::default()
        };
        assert!(tiny.validate().unwrap_err().to_string().contains("1024"));
        let none = Limits {
            max_connections: 0,
            ..Limits::default()
        };
        assert!(none.validate().is_err());
    }

    #[tokio::test]
    async fn serve_returns_once_shutdown_completes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(serve(listener, router, Limits::default(), async {
            let _ = stopped.await;
        }));
        let _idle = TcpStream::connect(addr).await.unwrap();
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(5), serving)
            .await
            .expect("an idle connection does not hold the shutdown")
            .unwrap();
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }
}
