//! One program's connection to the proxy, in order: a place among the sandbox's
//! connections, the request head, the grant, the name resolved once and every address
//! checked, the connection to a checked address, then for CONNECT the `200` and the
//! ClientHello's server name checked against the host, and the relay.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::head::{self, HeadError, Request};
use crate::hello;
use crate::policy::Host;
use crate::proxy::Proxy;
use crate::refusal::Refusal;
use crate::relay::{self, Meter, RelayEnd};
use crate::sandbox::SandboxEgress;

/// Most bytes of a refused request's rest read (and dropped) before closing, so that the
/// program reads the answer rather than a reset.
const DRAIN: usize = 64 * 1024;
const DRAIN_TIME: Duration = Duration::from_millis(500);

/// A request read and understood: what it asks, its host and port, and the bytes the
/// program sent after the head.
struct Asked {
    request: Request,
    host: Host,
    port: u16,
    rest: Vec<u8>,
}

/// A program's connection to the proxy: a TCP connection accepted in the sandbox, or a
/// stream that carries one from elsewhere (a VM's tunnel).
pub trait Client: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Client for T {}

/// Serves one connection from a sandbox to its end.
pub(crate) async fn serve<C: Client>(proxy: Arc<Proxy>, sandbox: SandboxEgress, mut client: C) {
    // Held until the connection ends, whatever way.
    let slot = sandbox.open_slot();
    let asked = match read_request(&proxy, &sandbox, &mut client, slot.is_some()).await {
        Ok(asked) => asked,
        Err(Some(refusal)) => return refuse(&proxy, &sandbox, client, None, refusal).await,
        Err(None) => return,
    };
    let Asked {
        request,
        host,
        port,
        rest,
    } = asked;
    let label = proxy.policy.label(&host, port);
    let meter = Meter {
        sandbox: sandbox.clone(),
        host: proxy.metrics.counters(label.as_deref()),
    };
    let origin = match open(&proxy, &sandbox, &request, &host, port).await {
        Ok(origin) => origin,
        Err(refusal) => return refuse(&proxy, &sandbox, client, Some(&meter), refusal).await,
    };
    sandbox.count_connection();
    meter.host.count_connection();
    tracing::info!(host = %host, port, "egress: connected");
    let end = match request {
        Request::Connect { .. } => tunnel(&proxy, client, origin, &meter, &host, port, rest).await,
        Request::Http { forward, .. } => {
            Some(forward_http(&proxy, client, origin, &meter, &forward, &rest).await)
        }
    };
    tracing::debug!(host = %host, port, ?end, "egress: connection ended");
}

/// Reads and parses the head (the connection cap is answered only then, so that the
/// program reads the answer); `Err(None)`: the program sent no request.
async fn read_request<C: Client>(
    proxy: &Proxy,
    sandbox: &SandboxEgress,
    client: &mut C,
    has_slot: bool,
) -> Result<Asked, Option<Refusal>> {
    let (head, rest) = match head::read_head(client, proxy.timeouts.head).await {
        Ok(read) => read,
        Err(HeadError::TooLarge) => return Err(Some(Refusal::HeadTooLarge)),
        Err(HeadError::Timeout(_)) => return Err(Some(Refusal::HeadTimeout)),
        Err(error) => {
            tracing::debug!(%error, "egress: no request");
            return Err(None);
        }
    };
    if !has_slot {
        let max = sandbox.limits().max_connections;
        return Err(Some(Refusal::TooManyConnections { max }));
    }
    let request = head::parse(&head).map_err(|bad| Some(Refusal::BadRequest(bad)))?;
    let (host, port) = match &request {
        Request::Connect { host, port } | Request::Http { host, port, .. } => (host, *port),
    };
    let host = Host::parse(host).map_err(|_| Some(Refusal::BadHost { host: host.clone() }))?;
    Ok(Asked {
        request,
        host,
        port,
        rest,
    })
}

/// Checks the grant and the addresses, and connects: everything that can be refused with
/// an answer happens before the program hears `200`.
async fn open(
    proxy: &Proxy,
    sandbox: &SandboxEgress,
    request: &Request,
    host: &Host,
    port: u16,
) -> Result<TcpStream, Refusal> {
    let target = target_text(host, port);
    if sandbox.bytes_used_up() {
        return Err(Refusal::BytesUsedUp {
            max: sandbox.limits().max_bytes,
        });
    }
    let grant = sandbox.grant();
    if !grant.allows(host, port) {
        return Err(Refusal::NotGranted {
            target,
            allowed: grant.names(),
        });
    }
    if let Request::Http {
        host_header: Some(header),
        ..
    } = request
    {
        if !same_host(header, host, port) {
            return Err(Refusal::HostMismatch {
                header: header.clone(),
                target,
            });
        }
    }
    let addresses = match host {
        Host::Address(ip) => vec![*ip],
        Host::Name(name) => resolve(proxy, name).await?,
    };
    connect(proxy, &addresses, port, &target).await
}

/// Resolves `name` once and keeps the addresses that pass the check; refuses when none does.
async fn resolve(proxy: &Proxy, name: &str) -> Result<Vec<IpAddr>, Refusal> {
    let unresolved = |error: String| Refusal::Unresolved {
        host: name.to_string(),
        error,
    };
    let lookup = tokio::time::timeout(proxy.timeouts.connect, proxy.resolver.lookup(name)).await;
    let addresses = match lookup {
        Ok(Ok(addresses)) if !addresses.is_empty() => addresses,
        Ok(Ok(_)) => return Err(unresolved("no address".into())),
        Ok(Err(error)) => return Err(unresolved(error.to_string())),
        Err(_) => {
            return Err(unresolved(format!(
                "no answer within {:?}",
                proxy.timeouts.connect
            )))
        }
    };
    let mut passed = Vec::new();
    let mut first_refused = None;
    for ip in addresses {
        match proxy.addresses.check(ip) {
            Ok(()) => passed.push(ip),
            Err(why) => {
                tracing::warn!(host = name, %ip, %why, "egress: address refused");
                first_refused.get_or_insert((ip, why));
            }
        }
    }
    match (passed.is_empty(), first_refused) {
        (true, Some((ip, why))) => Err(Refusal::Address {
            host: name.to_string(),
            ip,
            why,
        }),
        _ => Ok(passed),
    }
}

/// Connects to the first checked address that answers, within the connect time in all.
async fn connect(
    proxy: &Proxy,
    addresses: &[IpAddr],
    port: u16,
    target: &str,
) -> Result<TcpStream, Refusal> {
    let unreachable = |error: String| Refusal::Unreachable {
        target: target.to_string(),
        error,
    };
    let deadline = tokio::time::Instant::now() + proxy.timeouts.connect;
    let mut last_error = String::from("no address");
    for ip in addresses {
        let address = SocketAddr::new(*ip, port);
        match tokio::time::timeout_at(deadline, proxy.dialer.dial(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(error)) => last_error = format!("{address}: {error}"),
            Err(_) => {
                return Err(unreachable(format!(
                    "no connection within {:?}",
                    proxy.timeouts.connect
                )))
            }
        }
    }
    Err(unreachable(last_error))
}

/// CONNECT: `200`, then the ClientHello's server name must be the host.
async fn tunnel<C: Client>(
    proxy: &Proxy,
    mut client: C,
    origin: TcpStream,
    meter: &Meter,
    host: &Host,
    port: u16,
    early: Vec<u8>,
) -> Option<RelayEnd> {
    let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
    client.write_all(established).await.ok()?;
    let (hello, name) =
        match hello::read_client_hello(&mut client, early, proxy.timeouts.hello).await {
            Ok(read) => read,
            Err(error) => return refuse_tunnel(meter, host, port, &error.to_string()),
        };
    if let Some(why) = server_name_refusal(host, name.as_deref()) {
        return refuse_tunnel(meter, host, port, &why);
    }
    Some(relay::relay_after(client, origin, &hello, meter, proxy.timeouts.idle).await)
}

/// Why a tunnel's TLS server name is refused, if it is: it must be the CONNECT host (case
/// and a trailing dot aside); only a tunnel to an IP literal may go without one.
fn server_name_refusal(host: &Host, name: Option<&str>) -> Option<String> {
    match (name, host) {
        (None, Host::Address(_)) => None,
        (None, Host::Name(_)) => Some("the TLS ClientHello has no server name".to_string()),
        (Some(name), host) => {
            let bare = name.strip_suffix('.').unwrap_or(name);
            let same = bare.eq_ignore_ascii_case(&host.to_string());
            (!same).then(|| format!("the TLS server name {name} is not the CONNECT host"))
        }
    }
}

fn refuse_tunnel(meter: &Meter, host: &Host, port: u16, why: &str) -> Option<RelayEnd> {
    tracing::warn!(host = %host, port, why, "egress: tunnel closed");
    meter.sandbox.count_refused();
    meter.host.count_refused();
    None
}

/// Plain HTTP: the rewritten head and whatever followed it, then the relay.
async fn forward_http<C: Client>(
    proxy: &Proxy,
    client: C,
    origin: TcpStream,
    meter: &Meter,
    forward: &[u8],
    rest: &[u8],
) -> RelayEnd {
    let first = [forward, rest].concat();
    relay::relay_after(client, origin, &first, meter, proxy.timeouts.idle).await
}

/// Answers a refusal, logs and counts it, and closes after dropping what the program sent.
async fn refuse<C: Client>(
    proxy: &Proxy,
    sandbox: &SandboxEgress,
    mut client: C,
    meter: Option<&Meter>,
    refusal: Refusal,
) {
    if refusal.is_refusal() {
        tracing::warn!(reason = %refusal, "egress: refused");
        sandbox.count_refused();
        match meter {
            Some(meter) => meter.host.count_refused(),
            None => proxy.metrics.counters(None).count_refused(),
        }
    } else {
        tracing::info!(reason = %refusal, "egress: request not served");
    }
    if client.write_all(&refusal.answer()).await.is_err() {
        return;
    }
    let _ = client.shutdown().await;
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    let draining = async {
        while drained < DRAIN {
            match client.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, draining).await;
}

/// `host:port`, with brackets around an IPv6 address.
fn target_text(host: &Host, port: u16) -> String {
    match host {
        Host::Address(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        host => format!("{host}:{port}"),
    }
}

/// Whether a Host header names the request's host and port.
fn same_host(header: &str, host: &Host, port: u16) -> bool {
    let Ok((name, header_port)) = head::split_authority(header) else {
        return false;
    };
    header_port.unwrap_or(80) == port && Host::parse(&name).is_ok_and(|named| named == *host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> Host {
        Host::parse(text).unwrap()
    }

    #[test]
    fn the_server_name_must_be_the_connect_host() {
        assert_eq!(
            server_name_refusal(&host("pypi.org"), Some("pypi.org")),
            None
        );
        assert_eq!(
            server_name_refusal(&host("pypi.org"), Some("PyPI.org.")),
            None
        );
        let fronted = server_name_refusal(&host("pypi.org"), Some("evil.example"));
        assert_eq!(
            fronted.as_deref(),
            Some("the TLS server name evil.example is not the CONNECT host")
        );
        assert!(server_name_refusal(&host("pypi.org"), None).is_some());
        assert!(server_name_refusal(&host("pypi.org"), Some("pypi.org.evil")).is_some());
        assert_eq!(server_name_refusal(&host("192.0.2.1"), None), None);
        assert!(server_name_refusal(&host("192.0.2.1"), Some("pypi.org")).is_some());
    }

    #[test]
    fn the_host_header_must_name_the_url_host_and_port() {
        assert!(same_host("pypi.org", &host("pypi.org"), 80));
        assert!(same_host("PyPI.org.:80", &host("pypi.org"), 80));
        assert!(same_host("pypi.org:8080", &host("pypi.org"), 8080));
        assert!(!same_host("pypi.org", &host("pypi.org"), 8080));
        assert!(!same_host("evil.example", &host("pypi.org"), 80));
        assert!(same_host("[2001:db8::1]:80", &host("2001:db8::1"), 80));
        assert!(!same_host("", &host("pypi.org"), 80));
    }
}
