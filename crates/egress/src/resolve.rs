//! Name resolution, behind a trait so that tests can answer for names of their own.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

/// What a [`Resolve`] returns: the addresses of a name.
pub type Lookup<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Resolves a host name to its addresses. The proxy asks once per request and connects to
/// one of the addresses it checked.
pub trait Resolve: Send + Sync + std::fmt::Debug {
    /// The addresses of `name` (an ASCII name, lower case, no trailing dot).
    fn lookup<'a>(&'a self, name: &'a str) -> Lookup<'a>;
}

/// Resolves as the host does: getaddrinfo, so /etc/hosts, then resolv.conf.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup<'a>(&'a self, name: &'a str) -> Lookup<'a> {
        Box::pin(async move {
            let addresses = tokio::net::lookup_host((name, 0)).await?;
            Ok(addresses.map(|address| address.ip()).collect())
        })
    }
}
