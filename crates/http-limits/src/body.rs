//! The request-body deadline: a body not received within the limit ends in an error for the
//! handler reading it, and the answer becomes 408 whatever the handler made of that error.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;

/// The error a late body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
struct BodyTimedOut(Duration);

/// `router` with every request body bound to arrive within `timeout`.
pub(crate) fn with_deadline(router: Router, timeout: Duration) -> Router {
    router.layer(axum::middleware::from_fn_with_state(timeout, deadline))
}

async fn deadline(State(timeout): State<Duration>, request: Request, next: Next) -> Response {
    if http_body::Body::is_end_stream(request.body()) {
        return next.run(request).await;
    }
    let expired = Arc::new(AtomicBool::new(false));
    let flag = expired.clone();
    let request = request.map(|inner| {
        Body::new(DeadlineBody {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            expired: flag,
        })
    });
    let response = next.run(request).await;
    if expired.load(Ordering::Acquire) {
        tracing::info!(?timeout, "request body too slow: 408");
        return too_slow(timeout);
    }
    response
}

fn too_slow(timeout: Duration) -> Response {
    let body = serde_json::json!({"error": {
        "code": "body_timeout",
        "message": format!(
            "the request body did not arrive within {} ms; send it faster or in one go",
            timeout.as_millis()
        ),
    }});
    let mut response = (StatusCode::REQUEST_TIMEOUT, axum::Json(body)).into_response();
    // The rest of the body is unread: the connection cannot carry another request.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A body that fails once its deadline has passed.
struct DeadlineBody {
    inner: Body,
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
    expired: Arc<AtomicBool>,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Release);
            let error = axum::Error::new(BodyTimedOut(this.timeout));
            return Poll::Ready(Some(Err(error)));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
