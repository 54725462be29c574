//! Bearer-token authentication, as an axum middleware.

use crate::http::ApiError;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The token requests must carry.
#[derive(Clone)]
pub struct Token(pub Arc<str>);

/// Lets a request through only with `Authorization: Bearer <token>`; the comparison
/// takes the same time wherever the first difference is.
pub async fn require_bearer(
    State(token): State<Token>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let given = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(given) if bool::from(given.as_bytes().ct_eq(token.0.as_bytes())) => {
            Ok(next.run(request).await)
        }
        Some(_) => Err(ApiError::Unauthorized("the bearer token is wrong")),
        None => Err(ApiError::Unauthorized(
            "Authorization: Bearer <SANDBOX_RUNNER_TOKEN> is required",
        )),
    }
}
