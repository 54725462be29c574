//! The request head a program sends the proxy: read (bounded in size and time) and parsed.
//!
//! Two forms are served: `CONNECT host:port` (a tunnel, for TLS) and a plain HTTP request
//! in absolute form (`GET http://host[:port]/path HTTP/1.1`), forwarded in origin form
//! with `Connection: close` (one request per connection) and without the proxy's own
//! headers.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Most bytes of a request head, request line included.
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// Why no request head could be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeadError {
    #[error("the request head is over {MAX_HEAD} bytes")]
    TooLarge,
    #[error("the request head did not arrive within {0:?}")]
    Timeout(Duration),
    #[error("the connection closed before the request head ended")]
    Closed,
    #[error("reading the request head: {0}")]
    Io(#[from] std::io::Error),
}

/// What a request head cannot be served for (answered 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadRequest {
    #[error("egress: not an HTTP/1 request head ({0})")]
    Malformed(&'static str),
    #[error("egress: for https, ask for a tunnel with CONNECT host:443 (HTTPS_PROXY does)")]
    HttpsWithoutConnect,
    #[error("egress: only http:// URLs and CONNECT tunnels go through this proxy")]
    Scheme,
}

/// A request the proxy serves.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// A tunnel to `host:port`.
    Connect { host: String, port: u16 },
    /// A plain HTTP request: its Host header (when given), and the head to send the origin.
    Http {
        host: String,
        port: u16,
        host_header: Option<String>,
        forward: Vec<u8>,
    },
}

/// Reads up to the blank line ending a head; returns the head and any bytes after it.
pub(crate) async fn read_head<R: AsyncRead + Unpin>(
    stream: &mut R,
    timeout: Duration,
) -> Result<(Vec<u8>, Vec<u8>), HeadError> {
    let reading = async {
        let mut buffer = Vec::with_capacity(1024);
        let mut chunk = [0u8; 2048];
        loop {
            let read = stream.read(&mut chunk).await?;
            if read == 0 {
                return Err(HeadError::Closed);
            }
            let searched_from = buffer.len().saturating_sub(3);
            buffer.extend_from_slice(&chunk[..read]);
            if let Some(at) = find_end(&buffer[searched_from..]) {
                let end = searched_from + at;
                if end > MAX_HEAD {
                    return Err(HeadError::TooLarge);
                }
                let rest = buffer.split_off(end);
                return Ok((buffer, rest));
            }
            if buffer.len() > MAX_HEAD {
                return Err(HeadError::TooLarge);
            }
        }
    };
    tokio::time::timeout(timeout, reading)
        .await
        .map_err(|_| HeadError::Timeout(timeout))?
}

/// The index just past the first `\r\n\r\n`.
fn find_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// Parses a head read by [`read_head`].
pub(crate) fn parse(head: &[u8]) -> Result<Request, BadRequest> {
    let text = std::str::from_utf8(head).map_err(|_| BadRequest::Malformed("not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) if !m.is_empty() && !t.is_empty() => (m, t, v),
        _ => {
            return Err(BadRequest::Malformed(
                "the request line is not METHOD TARGET VERSION",
            ))
        }
    };
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(BadRequest::Malformed(
            "the version is not HTTP/1.0 or HTTP/1.1",
        ));
    }
    let headers = parse_headers(lines)?;
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(target)?;
        let port = port.ok_or(BadRequest::Malformed("CONNECT needs host:port"))?;
        return Ok(Request::Connect { host, port });
    }
    let (authority, path) = absolute_form(target)?;
    let (host, port) = split_authority(authority)?;
    let host_header = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|h| h.1);
    let forward = origin_head(method, path, version, authority, &headers);
    Ok(Request::Http {
        host,
        port: port.unwrap_or(80),
        host_header: host_header.map(str::to_string),
        forward,
    })
}

fn parse_headers<'a>(
    lines: impl Iterator<Item = &'a str>,
) -> Result<Vec<(&'a str, &'a str)>, BadRequest> {
    let mut headers = Vec::new();
    for line in lines.filter(|line| !line.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or(BadRequest::Malformed("a header without `:`"))?;
        if name.is_empty() || name.contains([' ', '\t']) {
            return Err(BadRequest::Malformed("a header name with spaces"));
        }
        headers.push((name, value.trim()));
    }
    Ok(headers)
}

/// `http://authority/path` into the authority and the path (`/` when none).
fn absolute_form(target: &str) -> Result<(&str, &str), BadRequest> {
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(BadRequest::Malformed(
            "a proxy request's target is an absolute URL",
        ));
    };
    if scheme.eq_ignore_ascii_case("https") {
        return Err(BadRequest::HttpsWithoutConnect);
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(BadRequest::Scheme);
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err(BadRequest::Malformed("user information in the URL"));
    }
    Ok((authority, if path.is_empty() { "/" } else { path }))
}

/// `host[:port]` or `[v6][:port]` into the host (IPv6 without brackets) and the port.
pub(crate) fn split_authority(authority: &str) -> Result<(String, Option<u16>), BadRequest> {
    let bad = BadRequest::Malformed("not host:port");
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or(bad)?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or(bad)?)),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => None,
        Some(port) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            Some(port.parse::<u16>().ok().filter(|p| *p != 0).ok_or(bad)?)
        }
        Some(_) => return Err(bad),
    };
    if host.is_empty() {
        return Err(bad);
    }
    Ok((host.to_string(), port))
}

/// The head sent to the origin: origin form, a Host header, `Connection: close`, and none
/// of the headers meant for the proxy or for keeping the connection.
fn origin_head(
    method: &str,
    path: &str,
    version: &str,
    authority: &str,
    headers: &[(&str, &str)],
) -> Vec<u8> {
    const DROPPED: [&str; 4] = [
        "connection",
        "proxy-connection",
        "proxy-authorization",
        "keep-alive",
    ];
    let mut head = format!("{method} {path} {version}\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        head.push_str(&format!("Host: {authority}\r\n"));
    }
    for (name, value) in headers {
        if !DROPPED
            .iter()
            .any(|dropped| name.eq_ignore_ascii_case(dropped))
        {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str("Connection: close\r\n\r\n");
    head.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_takes_host_and_port() {
        let request = parse(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n");
        assert_eq!(
            request,
            Ok(Request::Connect {
                host: "pypi.org".into(),
                port: 443
            })
        );
        let request = parse(b"CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n\r\n");
        assert_eq!(
            request,
            Ok(Request::Connect {
                host: "2001:db8::1".into(),
                port: 8443
            })
        );
        assert!(parse(b"CONNECT pypi.org HTTP/1.1\r\n\r\n").is_err());
        assert!(parse(b"CONNECT pypi.org:0 HTTP/1.1\r\n\r\n").is_err());
        assert!(parse(b"CONNECT pypi.org:+443 HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn plain_http_is_forwarded_in_origin_form_with_connection_close() {
        let head = b"GET http://Example.org:8080/a?b=1 HTTP/1.1\r\nHost: Example.org:8080\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nProxy-Authorization: x\r\nAccept: */*\r\n\r\n";
        let Ok(Request::Http {
            host,
            port,
            host_header,
            forward,
        }) = parse(head)
        else {
            panic!("not parsed");
        };
        assert_eq!((host.as_str(), port), ("Example.org", 8080));
        assert_eq!(host_header.as_deref(), Some("Example.org:8080"));
        assert_eq!(
            String::from_utf8(forward).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nHost: Example.org:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn plain_http_without_host_gets_one_and_port_80() {
        let Ok(Request::Http { port, forward, .. }) =
            parse(b"GET http://example.org HTTP/1.0\r\n\r\n")
        else {
            panic!("not parsed");
        };
        assert_eq!(port, 80);
        assert_eq!(
            String::from_utf8(forward).unwrap(),
            "GET / HTTP/1.0\r\nHost: example.org\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn refuses_what_it_does_not_serve() {
        assert_eq!(
            parse(b"GET https://a.org/ HTTP/1.1\r\n\r\n"),
            Err(BadRequest::HttpsWithoutConnect)
        );
        assert_eq!(
            parse(b"GET ftp://a.org/ HTTP/1.1\r\n\r\n"),
            Err(BadRequest::Scheme)
        );
        assert!(parse(b"GET / HTTP/1.1\r\nHost: a.org\r\n\r\n").is_err());
        assert!(parse(b"GET http://u:p@a.org/ HTTP/1.1\r\n\r\n").is_err());
        assert!(parse(b"GET http://a.org/ HTTP/2\r\n\r\n").is_err());
        assert!(parse(b"GET http://a.org/ HTTP/1.1\r\nbad header\r\n\r\n").is_err());
        assert!(parse(b"\xff\xfe\r\n\r\n").is_err());
    }

    #[tokio::test]
    async fn reads_a_head_and_keeps_what_follows() {
        let mut input: &[u8] = b"POST http://a.org/ HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody";
        let (head, rest) = read_head(&mut input, Duration::from_secs(1)).await.unwrap();
        assert!(head.ends_with(b"\r\n\r\n"));
        assert_eq!(rest, b"body");
    }

    #[tokio::test]
    async fn a_head_has_a_size_limit() {
        let big = format!(
            "GET http://a.org/ HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD)
        );
        let mut input = big.as_bytes();
        let result = read_head(&mut input, Duration::from_secs(1)).await;
        assert!(matches!(result, Err(HeadError::TooLarge)), "{result:?}");
    }

    #[tokio::test]
    async fn a_head_has_a_time_limit() {
        let (mut client, mut server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, b"GET http://a.org/ HTTP/1.1\r\n")
            .await
            .unwrap();
        let result = read_head(&mut server, Duration::from_millis(100)).await;
        assert!(matches!(result, Err(HeadError::Timeout(_))), "{result:?}");
    }
}
