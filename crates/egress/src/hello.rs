//! The TLS ClientHello a program sends first through a CONNECT tunnel, and the server name
//! (SNI) in it, read by hand: records of type handshake (22), gathered until the
//! ClientHello is whole (it may span several records), then its extensions walked to
//! `server_name` (type 0, host_name entries).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Most bytes read while waiting for a whole ClientHello (records with their headers).
pub(crate) const MAX_HELLO: usize = 64 * 1024;
const RECORD_HEADER: usize = 5;
const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const SERVER_NAME: u16 = 0;

/// Why a ClientHello's server name cannot be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HelloError {
    #[error("the first bytes are not a TLS handshake")]
    NotTls,
    #[error("the ClientHello is malformed ({0})")]
    Malformed(&'static str),
    #[error("the ClientHello is over {MAX_HELLO} bytes")]
    TooLarge,
    #[error("no whole ClientHello within {0:?}")]
    Timeout(Duration),
    #[error("the connection closed before the ClientHello ended")]
    Closed,
}

/// Reads until a whole ClientHello arrived, starting from `early` (bytes the program sent
/// right behind its CONNECT); returns every byte read (to send on to the server) and the
/// server name it carries, if any.
pub(crate) async fn read_client_hello<R: AsyncRead + Unpin>(
    stream: &mut R,
    early: Vec<u8>,
    timeout: Duration,
) -> Result<(Vec<u8>, Option<String>), HelloError> {
    let reading = async {
        let mut buffer = early;
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(hello) = client_hello(&buffer)? {
                let name = server_name(&hello)?;
                return Ok((buffer, name));
            }
            if buffer.len() >= MAX_HELLO {
                return Err(HelloError::TooLarge);
            }
            let read = stream
                .read(&mut chunk)
                .await
                .map_err(|_| HelloError::Closed)?;
            if read == 0 {
                return Err(HelloError::Closed);
            }
            buffer.extend_from_slice(&chunk[..read]);
        }
    };
    tokio::time::timeout(timeout, reading)
        .await
        .map_err(|_| HelloError::Timeout(timeout))?
}

/// The ClientHello's body once the records read so far hold all of it; `None`: read more.
fn client_hello(records: &[u8]) -> Result<Option<Vec<u8>>, HelloError> {
    let mut handshake = Vec::new();
    let mut rest = records;
    while rest.len() >= RECORD_HEADER {
        if rest[0] != HANDSHAKE || rest[1] != 3 {
            return Err(HelloError::NotTls);
        }
        let length = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if length == 0 {
            return Err(HelloError::Malformed("an empty record"));
        }
        let Some(fragment) = rest.get(RECORD_HEADER..RECORD_HEADER + length) else {
            break;
        };
        handshake.extend_from_slice(fragment);
        rest = &rest[RECORD_HEADER + length..];
        if handshake.len() >= 4 {
            if handshake[0] != CLIENT_HELLO {
                return Err(HelloError::NotTls);
            }
            let body = usize::from(handshake[1]) << 16
                | usize::from(handshake[2]) << 8
                | usize::from(handshake[3]);
            if body > MAX_HELLO {
                return Err(HelloError::TooLarge);
            }
            if handshake.len() >= 4 + body {
                return Ok(Some(handshake[4..4 + body].to_vec()));
            }
        }
    }
    if !rest.is_empty() && rest[0] != HANDSHAKE {
        return Err(HelloError::NotTls);
    }
    Ok(None)
}

/// A cursor over a ClientHello's fields.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        if self.0.len() < n {
            return Err(HelloError::Malformed(what));
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn u8_len(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let n = self.take(1, what)?[0];
        self.take(usize::from(n), what)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, HelloError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u16_len(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let n = self.u16(what)?;
        self.take(usize::from(n), what)
    }
}

/// The host_name of the server_name extension, if the ClientHello has one.
fn server_name(hello: &[u8]) -> Result<Option<String>, HelloError> {
    let mut fields = Fields(hello);
    fields.take(2 + 32, "version and random")?;
    fields.u8_len("session id")?;
    fields.u16_len("cipher suites")?;
    fields.u8_len("compression methods")?;
    if fields.0.is_empty() {
        return Ok(None);
    }
    let mut extensions = Fields(fields.u16_len("extensions")?);
    while !extensions.0.is_empty() {
        let kind = extensions.u16("extension type")?;
        let data = extensions.u16_len("extension")?;
        if kind == SERVER_NAME {
            return host_name(data).map(Some);
        }
    }
    Ok(None)
}

fn host_name(extension: &[u8]) -> Result<String, HelloError> {
    let mut list = Fields(Fields(extension).u16_len("server name list")?);
    while !list.0.is_empty() {
        let kind = list.take(1, "server name type")?[0];
        let name = list.u16_len("server name")?;
        if kind == 0 {
            let name =
                std::str::from_utf8(name).map_err(|_| HelloError::Malformed("server name"))?;
            return Ok(name.to_string());
        }
    }
    Err(HelloError::Malformed(
        "a server_name extension without a host name",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello's handshake message with these extensions.
    fn hello(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(0);
        body.extend([0, 2, 0x13, 0x01]);
        body.extend([1, 0]);
        let mut list = Vec::new();
        for (kind, data) in extensions {
            list.extend(kind.to_be_bytes());
            list.extend((data.len() as u16).to_be_bytes());
            list.extend(data);
        }
        body.extend((list.len() as u16).to_be_bytes());
        body.extend(list);
        let mut message = vec![CLIENT_HELLO];
        message.extend(&(body.len() as u32).to_be_bytes()[1..]);
        message.extend(body);
        message
    }

    fn sni(name: &str) -> (u16, Vec<u8>) {
        let mut entry = vec![0];
        entry.extend((name.len() as u16).to_be_bytes());
        entry.extend(name.as_bytes());
        let mut data = (entry.len() as u16).to_be_bytes().to_vec();
        data.extend(entry);
        (SERVER_NAME, data)
    }

    fn records(message: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for fragment in message.chunks(size) {
            out.extend([HANDSHAKE, 3, 1]);
            out.extend((fragment.len() as u16).to_be_bytes());
            out.extend(fragment);
        }
        out
    }

    async fn read(bytes: &[u8]) -> Result<(Vec<u8>, Option<String>), HelloError> {
        let mut input = bytes;
        read_client_hello(&mut input, Vec::new(), Duration::from_secs(1)).await
    }

    #[tokio::test]
    async fn finds_the_server_name() {
        let bytes = records(&hello(&[(10, vec![0, 2, 0, 29]), sni("pypi.org")]), 16384);
        let (read_bytes, name) = read(&bytes).await.unwrap();
        assert_eq!(name.as_deref(), Some("pypi.org"));
        assert_eq!(read_bytes, bytes);
    }

    #[tokio::test]
    async fn gathers_a_hello_over_several_records() {
        let bytes = records(
            &hello(&[(21, vec![0; 3000]), sni("files.pythonhosted.org")]),
            100,
        );
        let (_, name) = read(&bytes).await.unwrap();
        assert_eq!(name.as_deref(), Some("files.pythonhosted.org"));
    }

    #[tokio::test]
    async fn starts_from_the_early_bytes() {
        let bytes = records(&hello(&[sni("pypi.org")]), 16384);
        let (early, mut rest) = bytes.split_at(10);
        let read = read_client_hello(&mut rest, early.to_vec(), Duration::from_secs(1)).await;
        assert_eq!(read, Ok((bytes.clone(), Some("pypi.org".to_string()))));
    }

    #[tokio::test]
    async fn no_server_name_is_none() {
        let (_, name) = read(&records(&hello(&[(10, vec![0, 2, 0, 29])]), 16384))
            .await
            .unwrap();
        assert_eq!(name, None);
    }

    #[tokio::test]
    async fn refuses_what_is_not_a_hello() {
        assert_eq!(
            read(b"GET / HTTP/1.1\r\n\r\n").await,
            Err(HelloError::NotTls)
        );
        assert_eq!(
            read(&records(&[2, 0, 0, 0], 100)).await,
            Err(HelloError::NotTls)
        );
        let mut truncated = hello(&[sni("a.org")]);
        truncated.truncate(20);
        truncated[3] = 16;
        assert!(matches!(
            read(&records(&truncated, 100)).await,
            Err(HelloError::Malformed(_))
        ));
        assert_eq!(
            read(&records(&hello(&[]), 100)[..30]).await,
            Err(HelloError::Closed)
        );
    }
}
