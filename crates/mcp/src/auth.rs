//! Bearer-token authentication on `/mcp` (the check is http-bearer's, shared with the
//! runner).

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_bearer::Bearer;

use crate::config::AuthToken;

/// Middleware: 401 with `WWW-Authenticate: Bearer` unless the request carries the token.
pub(crate) async fn require_bearer(
    State(token): State<AuthToken>,
    request: Request,
    next: Next,
) -> Response {
    if http_bearer::check(request.headers(), token.expose()) == Bearer::Valid {
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
