//! Bearer-token authentication, as an axum middleware (the check is http-bearer's, shared
//! with sandbox-mcp).

use super::error::ApiError;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_bearer::Bearer;
use std::sync::Arc;

/// The token requests must carry.
#[derive(Clone)]
pub struct Token(pub Arc<str>);

/// Lets a request through only with `Authorization: Bearer <token>`.
pub async fn require_bearer(
    State(token): State<Token>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    match http_bearer::check(request.headers(), &token.0) {
        Bearer::Valid => Ok(next.run(request).await),
        Bearer::Wrong => Err(ApiError::Unauthorized("the bearer token is wrong")),
        Bearer::Missing => Err(ApiError::Unauthorized(
            "Authorization: Bearer <SANDBOX_RUNNER_TOKEN> is required",
        )),
    }
}
