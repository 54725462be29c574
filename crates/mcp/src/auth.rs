//! Bearer-token authentication on `/mcp`.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use subtle::ConstantTimeEq;

use crate::config::AuthToken;

/// Whether the headers carry `Authorization: Bearer <token>`; compared in constant time.
fn is_authorized(headers: &HeaderMap, token: &AuthToken) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let value = value.as_bytes();
    let Some(scheme) = value.get(..7) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return false;
    }
    let presented = value[7..].trim_ascii();
    presented.ct_eq(token.expose().as_bytes()).into()
}

/// Middleware: 401 with `WWW-Authenticate: Bearer` unless the request carries the token.
pub(crate) async fn require_bearer(
    State(token): State<AuthToken>,
    request: Request,
    next: Next,
) -> Response {
    if is_authorized(request.headers(), &token) {
        return next.run(request).await;
    }
    tracing::info!(method = %request.method(), "refused a request without a valid bearer token");
    unauthorized()
}

fn unauthorized() -> Response {
    let body = sandbox_protocol::api::ErrorBody::new(
        "unauthorized",
        "send Authorization: Bearer <MCP_AUTH_TOKEN>",
    );
    let challenge = HeaderValue::from_static(r#"Bearer realm="sandbox-mcp""#);
    // The request body is left unread, so the connection cannot carry another request.
    let close = HeaderValue::from_static("close");
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::WWW_AUTHENTICATE, challenge),
            (header::CONNECTION, close),
        ],
        Json(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn only_the_exact_token_passes() {
        let token = AuthToken::new("0123456789abcdef").unwrap();
        assert!(is_authorized(&headers("Bearer 0123456789abcdef"), &token));
        assert!(is_authorized(&headers("bearer 0123456789abcdef"), &token));
        for bad in [
            "Bearer 0123456789abcdeF",
            "Bearer 0123456789abcde",
            "Bearer 0123456789abcdef0",
            "Basic 0123456789abcdef",
            "Bearer",
            "",
        ] {
            assert!(!is_authorized(&headers(bad), &token), "{bad:?}");
        }
        assert!(!is_authorized(&HeaderMap::new(), &token));
    }
}
