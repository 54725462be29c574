//! The `Origin` check on `/mcp`: a browser page from a foreign origin gets 403.
//!
//! This is the DNS-rebinding protection the MCP specification asks of HTTP servers. It runs
//! before authentication, so a foreign page learns nothing else. Requests without an
//! `Origin` header (every non-browser client) pass.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// Which browser origins may call `/mcp` (requests without an `Origin` header always may).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OriginPolicy {
    /// Pages served from this machine: `http(s)://localhost`, `127.0.0.1` and `[::1]`, any port.
    Loopback,
    /// Any origin (`MCP_ALLOWED_ORIGINS=*`).
    Any,
    /// The listed origins, as `scheme://host[:port]`; port `*` matches any port.
    List(Vec<String>),
}

/// One allowed origin, parsed from `scheme://host[:port]` or `scheme://host:*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AllowedOrigin {
    scheme: String,
    host: String,
    /// `None` matches any port.
    port: Option<u16>,
}

/// An origin as a browser sends it.
#[derive(Debug, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    fn parse(value: &str) -> Option<Origin> {
        let (scheme, rest) = value.trim().split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        let authority: axum::http::uri::Authority = rest.parse().ok()?;
        if rest.contains(['/', '@', '?', '#']) {
            return None;
        }
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        Some(Origin {
            scheme,
            host: normalize_host(authority.host()),
            port: authority.port_u16().unwrap_or(default_port),
        })
    }
}

impl AllowedOrigin {
    /// Parses one entry of `MCP_ALLOWED_ORIGINS`; an entry without a port means the scheme's
    /// default port, `:*` any port.
    pub(crate) fn parse(entry: &str) -> Option<AllowedOrigin> {
        let entry = entry.trim();
        if let Some(base) = entry.strip_suffix(":*") {
            let origin = Origin::parse(base)?;
            if base
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            {
                return None;
            }
            return Some(AllowedOrigin {
                scheme: origin.scheme,
                host: origin.host,
                port: None,
            });
        }
        let origin = Origin::parse(entry)?;
        Some(AllowedOrigin {
            scheme: origin.scheme,
            host: origin.host,
            port: Some(origin.port),
        })
    }

    fn matches(&self, origin: &Origin) -> bool {
        self.scheme == origin.scheme
            && self.host == origin.host
            && self.port.is_none_or(|p| p == origin.port)
    }
}

fn normalize_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Whether a request carrying this `Origin` value may proceed.
fn is_allowed(policy: &OriginPolicy, value: &str) -> bool {
    let Some(origin) = Origin::parse(value) else {
        return matches!(policy, OriginPolicy::Any);
    };
    match policy {
        OriginPolicy::Any => true,
        OriginPolicy::Loopback => {
            matches!(origin.host.as_str(), "localhost" | "127.0.0.1" | "::1")
        }
        OriginPolicy::List(entries) => entries
            .iter()
            .filter_map(|e| AllowedOrigin::parse(e))
            .any(|allowed| allowed.matches(&origin)),
    }
}

/// Middleware: 403 for a request whose `Origin` is not allowed.
pub(crate) async fn check_origin(
    State(policy): State<OriginPolicy>,
    request: Request,
    next: Next,
) -> Response {
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .map(|v| v.to_str().unwrap_or(""));
    match origin {
        Some(value) if !is_allowed(&policy, value) => {
            tracing::warn!(origin = value, "refused a request from a foreign origin");
            forbidden()
        }
        _ => next.run(request).await,
    }
}

fn forbidden() -> Response {
    let body = sandbox_protocol::api::ErrorBody::new(
        "forbidden_origin",
        "this Origin may not call the MCP endpoint; add it to MCP_ALLOWED_ORIGINS to allow it",
    );
    // The request body is left unread, so the connection cannot carry another request.
    let close = [(header::CONNECTION, HeaderValue::from_static("close"))];
    (StatusCode::FORBIDDEN, close, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_policy_takes_local_pages_only() {
        let policy = OriginPolicy::Loopback;
        for ok in [
            "http://localhost:5173",
            "https://127.0.0.1",
            "http://[::1]:8080",
        ] {
            assert!(is_allowed(&policy, ok), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "null",
            "",
            "file://",
        ] {
            assert!(!is_allowed(&policy, bad), "{bad}");
        }
    }

    #[test]
    fn listed_origins_match_scheme_host_and_port() {
        let policy = OriginPolicy::List(vec![
            "https://app.example.com".into(),
            "http://dev.example.com:*".into(),
        ]);
        assert!(is_allowed(&policy, "https://app.example.com"));
        assert!(is_allowed(&policy, "https://APP.example.com:443"));
        assert!(!is_allowed(&policy, "https://app.example.com:8443"));
        assert!(!is_allowed(&policy, "http://app.example.com"));
        assert!(is_allowed(&policy, "http://dev.example.com:9999"));
        assert!(!is_allowed(&policy, "http://localhost:3000"));
    }

    #[test]
    fn any_takes_everything() {
        assert!(is_allowed(&OriginPolicy::Any, "http://evil.example"));
        assert!(is_allowed(&OriginPolicy::Any, "null"));
    }

    #[test]
    fn entries_are_validated() {
        assert!(AllowedOrigin::parse("https://a.example:8443").is_some());
        assert!(AllowedOrigin::parse("http://a.example:*").is_some());
        for bad in [
            "a.example",
            "ftp://a.example",
            "https://a.example:1:*",
            "https://a/x",
        ] {
            assert!(AllowedOrigin::parse(bad).is_none(), "{bad}");
        }
    }
}
