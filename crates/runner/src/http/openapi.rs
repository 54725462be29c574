//! The API described once, from the code: `GET /openapi.json` (no token) serves an
//! OpenAPI 3.1 document made from the handlers' `#[utoipa::path]` attributes, the wire
//! types' schemas (`sandbox-protocol`'s, with its `openapi` feature) and, for each route,
//! the error codes it can answer (`answers.rs`, from [`super::codes`]), so that clients
//! in any language can be generated from it and checked against it.
//!
//! The router's routes and the document's paths are held together by a unit test that
//! reads the routes from the router itself (`http/tests/openapi.rs`);
//! `crates/runner/tests/openapi.rs` validates the document a real runner serves.

use axum::Json;
use sandbox_protocol::api::ErrorBody;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// What the document says of the API as a whole.
const ABOUT: &str = "sandbox-runner, the isolation service: it runs programs in fresh \
sandboxes (`POST /run`) and in sessions, sandboxes that live across runs (`/sessions`). \
`GET /health` lists the languages it offers and the limits every sandbox runs under.\n\n\
Every error answer is `{\"error\": {\"code\", \"message\"}}` with a stable code; each \
operation lists the codes it can answer, by status. Besides: an unknown path gets 404 \
`not_found`, a method a path does not take 405 `method_not_allowed`, and a request head \
over `RUNNER_MAX_HEADER_BYTES` 431 (without a body). A 429, or a 503 other than from \
`/health`, never started the program: the request may go to another runner.\n\n\
`GET /health`, `GET /health/live`, `GET /metrics` and this document need no token; the \
other operations need `Authorization: Bearer <SANDBOX_RUNNER_TOKEN>` (unless the runner \
serves with `--no-auth`, on loopback).";

/// The document's derivation: every route of [`super::router`].
#[derive(OpenApi)]
#[openapi(
    info(title = "sandbox-runner", description = ABOUT),
    paths(
        super::run::run,
        super::sessions::create,
        super::sessions::info,
        super::sessions::update,
        super::sessions::close,
        super::sessions::run,
        super::sessions::list,
        super::sessions::download,
        super::sessions::upload,
        super::processes::start,
        super::processes::list,
        super::output::output,
        super::processes::stdin,
        super::processes::signal,
        super::snapshots::pause,
        super::snapshots::resume,
        super::snapshots::snapshot,
        super::snapshots::fork,
        super::snapshots::list,
        super::snapshots::remove,
        super::snapshots::export,
        super::snapshots::import,
        super::tool_results::answer,
        super::health::health,
        super::health::live,
        super::health::metrics,
        openapi_json,
    ),
    components(schemas(ErrorBody)),
    modifiers(&BearerToken),
    tags(
        (name = "runs", description = "A program in a fresh sandbox, destroyed after it"),
        (name = "sessions", description = "Sandboxes that live across runs: their runs and files"),
        (name = "processes", description = "Commands that keep running in a session's sandbox between calls: their output, input and signals"),
        (name = "tools", description = "Tools a run's caller offers its program: the answers to its calls"),
        (name = "snapshots", description = "Sessions' files kept on the runner's disk to start sessions from, moved between runners as tar archives"),
        (name = "service", description = "Health, metrics and this document (no token)"),
    )
)]
struct Api;

/// The document `GET /openapi.json` serves.
pub fn document() -> utoipa::openapi::OpenApi {
    Api::openapi()
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    tag = "service",
    responses((status = 200, description = "This document (OpenAPI 3.1)", body = Object))
)]
pub(super) async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(document())
}

/// The bearer token of the operations that carry a `security` requirement.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some("The runner's SANDBOX_RUNNER_TOKEN"))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}
