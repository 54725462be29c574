//! Bearer-token authentication on `/mcp` (the check is http-bearer's, shared with the
//! runner), and what clients that look for OAuth are told: there is none.
//!
//! A refused request gets 401 with a JSON body that names `MCP_AUTH_TOKEN`, and no
//! `WWW-Authenticate` challenge: MCP clients read a `Bearer` challenge as the start of an
//! OAuth flow (discovery, dynamic client registration), which this server does not offer.
//! The OAuth discovery documents (`/.well-known/oauth-protected-resource`,
//! `/.well-known/oauth-authorization-server`, `/.well-known/openid-configuration`, with or
//! without a path suffix) and every other unknown path answer 404 without asking for a
//! token, so a client that looks finds no authorization server.

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
        "send Authorization: Bearer <MCP_AUTH_TOKEN>: this server uses a static bearer \
         token, not OAuth",
    );
    // The request body is left unread, so the connection cannot carry another request.
    let close = HeaderValue::from_static("close");
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONNECTION, close)],
        Json(body),
    )
        .into_response()
}

/// Any path but `/mcp` and `/health`, the OAuth discovery documents among them: 404, no
/// token asked.
pub(crate) async fn not_found(uri: axum::http::Uri) -> Response {
    let oauth = uri.path().starts_with("/.well-known/");
    let message = if oauth {
        "no OAuth here: this server takes a static bearer token \
         (Authorization: Bearer <MCP_AUTH_TOKEN>) on /mcp"
    } else {
        "no such endpoint: this server serves /mcp (MCP over Streamable HTTP) and /health"
    };
    let body = sandbox_protocol::api::ErrorBody::new("not_found", message);
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}
