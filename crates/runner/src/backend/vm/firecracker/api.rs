//! A client of one Firecracker's API: HTTP/1 over its unix socket, one connection per
//! VM, JSON bodies; anything but a 2xx becomes an error with Firecracker's message.

use crate::backend::vm::{ApiError, BootError, VmError};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::net::UnixStream;
use tokio::process::Child;

/// How long Firecracker may take to open its API socket.
const API_WAIT: Duration = Duration::from_secs(5);

/// A connection to one Firecracker's API socket.
pub struct Api {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Api {
    /// Connects, waiting for Firecracker to open the socket; fails early if the VMM
    /// (or the jailer before it) exits.
    pub(super) async fn connect(socket: &Path, vmm: &mut Child) -> Result<Api, VmError> {
        let deadline = Instant::now() + API_WAIT;
        let stream = loop {
            match UnixStream::connect(socket).await {
                Ok(stream) => break stream,
                Err(e) if Instant::now() >= deadline => {
                    return Err(BootError::ApiSocket {
                        path: socket.to_owned(),
                        waited: API_WAIT,
                        source: e,
                    }
                    .into())
                }
                Err(_) => {}
            }
            if let Ok(Some(status)) = vmm.try_wait() {
                return Err(BootError::VmmExited(status.to_string()).into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|source| ApiError::Http {
                request: "connecting".into(),
                source,
            })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "Firecracker API connection ended");
            }
        });
        Ok(Api { sender })
    }

    /// Sends one request; anything but a 2xx is an error with Firecracker's message.
    pub(super) async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Value,
    ) -> Result<(), VmError> {
        let request = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(hyper::header::HOST, "localhost")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|source| ApiError::Request {
                request: format!("{method} {path}"),
                source,
            })?;
        let http = |source| ApiError::Http {
            request: format!("{method} {path}"),
            source,
        };
        let sender = &mut self.sender;
        sender.ready().await.map_err(http)?;
        let response = sender.send_request(request).await.map_err(http)?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        Err(ApiError::Refused {
            request: format!("{method} {path}"),
            status,
            fault: fault_message(status, &body),
        }
        .into())
    }
}

/// Firecracker's error body is `{"fault_message": "..."}`.
fn fault_message(status: StatusCode, body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("fault_message")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body).trim().to_owned();
            if text.is_empty() {
                status.canonical_reason().unwrap_or("no message").to_owned()
            } else {
                text
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firecrackers_fault_message_is_what_an_error_says() {
        let body = br#"{"fault_message":"Invalid kernel path"}"#;
        assert_eq!(
            fault_message(StatusCode::BAD_REQUEST, body),
            "Invalid kernel path"
        );
        assert_eq!(fault_message(StatusCode::BAD_REQUEST, b""), "Bad Request");
    }
}
