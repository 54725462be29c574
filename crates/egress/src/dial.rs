//! Opening the connection to a checked address, behind a trait so that tests can see
//! every address the proxy would connect to (and keep it on loopback).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;

use tokio::net::TcpStream;

/// What a [`Dial`] returns: the connection to one address.
pub type Dialing<'a> = Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send + 'a>>;

/// Connects to an address the proxy checked (never a name: the proxy resolved it).
pub trait Dial: Send + Sync + std::fmt::Debug {
    /// A TCP connection to `address`.
    fn dial(&self, address: SocketAddr) -> Dialing<'_>;
}

/// Connects on the host's network, with Nagle's algorithm off (the proxy relays what it
/// reads as it reads it: a small write must not wait for the last one's ACK).
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpDialer;

impl Dial for TcpDialer {
    fn dial(&self, address: SocketAddr) -> Dialing<'_> {
        Box::pin(async move {
            let stream = TcpStream::connect(address).await?;
            stream.set_nodelay(true)?;
            Ok(stream)
        })
    }
}
