//! Binding the MCP server's port, with an error that says what to do when it is taken.

use std::io;
use std::net::SocketAddr;
use tokio::net::TcpListener;

/// Why the MCP server could not listen.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Another process holds the port.
    #[error(
        "port {} on {} is already in use (another sandbox-mcp, or another server): stop \
         that process, or choose another port with PORT=<port> or --port <port> \
         (0 takes any free port)",
        .0.port(), .0.ip()
    )]
    InUse(SocketAddr),
    /// Any other failure to bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address concerned.
        addr: SocketAddr,
        /// What failed underneath.
        source: io::Error,
    },
}

/// Binds `addr`; a port in use is told apart from other failures.
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), ListenError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| match source.kind() {
            io::ErrorKind::AddrInUse => ListenError::InUse(addr),
            _ => ListenError::Bind { addr, source },
        })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ListenError::Bind { addr, source })?;
    Ok((listener, bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_taken_port_says_how_to_choose_another() {
        let (_held, addr) = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let e = bind(addr).await.unwrap_err();
        let message = e.to_string();
        assert!(matches!(e, ListenError::InUse(_)), "{message}");
        assert!(message.contains(&format!("port {} on 127.0.0.1", addr.port())));
        assert!(message.contains("PORT=<port>") && message.contains("--port"));
    }
}
