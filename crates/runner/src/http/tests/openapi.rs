//! The OpenAPI document against the router itself: the routes are read from the router
//! (its paths from axum's own listing, their methods by asking), never from a list
//! written here, and every error the API answers is named in the document.

use super::*;
use crate::deps::DepsRefusal;
use crate::pool::AcquireError;
use crate::session::SessionError;
use axum::http::Method;
use sandbox_packages::DepsError;
use sandbox_protocol::agent::FileFailure;
use std::collections::BTreeSet;

/// A route: its method (lower case, as OpenAPI writes it) and its path template.
type Route = (String, String);

/// The paths `router` routes, as axum's `Debug` form of a router lists them (the nodes
/// of its path router, before its fallback's), in OpenAPI's template form (`{*path}`
/// is `{path}`).
fn routed_paths(router: &Router) -> BTreeSet<String> {
    let text = format!("{router:?}");
    let (routes, _) = text
        .split_once("fallback_router")
        .unwrap_or_else(|| panic!("axum's Debug form of a router changed: {text}"));
    let paths: BTreeSet<String> = routes
        .split("RouteId(")
        // A node's entry reads `3): "/run", ...`; a route's `3): MethodRouter(...`.
        .filter_map(|entry| entry.split_once("): \""))
        .filter_map(|(_, rest)| rest.split('"').next())
        .map(|path| path.replace("{*", "{"))
        .collect();
    assert!(
        !paths.is_empty(),
        "no path found in axum's Debug form of the router: {text}"
    );
    paths
}

/// The routes of `router`: each of its paths with each method it does not refuse with
/// 405 (asked with the token, an unknown session and a made-up file path).
async fn routes_of(router: &Router) -> BTreeSet<Route> {
    let mut routes = BTreeSet::new();
    for path in routed_paths(router) {
        let uri = path
            .replace("{id}", "no-such-session")
            .replace("{path}", "a/b.txt");
        for method in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::PATCH,
        ] {
            let request = Request::builder()
                .method(method.clone())
                .uri(&uri)
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Body::empty())
                .expect("request");
            let (status, _, _) = send(router, request).await;
            if status != StatusCode::METHOD_NOT_ALLOWED {
                routes.insert((method.as_str().to_lowercase(), path.clone()));
            }
        }
    }
    routes
}

/// The document as JSON.
fn document() -> Value {
    serde_json::to_value(crate::http::openapi::document()).expect("the document is JSON")
}

/// The routes the document describes.
fn documented(document: &Value) -> BTreeSet<Route> {
    let paths = document["paths"].as_object().expect("paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            let methods = item.as_object().expect("a path item");
            methods
                .keys()
                .filter(|key| !matches!(key.as_str(), "parameters" | "summary" | "description"))
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect()
}

/// Every (status, code) the document names as an error answer.
fn documented_codes(document: &Value) -> BTreeSet<(u16, String)> {
    let mut codes = BTreeSet::new();
    for item in document["paths"].as_object().expect("paths").values() {
        for operation in item.as_object().expect("a path item").values() {
            let Some(responses) = operation["responses"].as_object() else {
                continue;
            };
            for (status, response) in responses {
                let examples = &response["content"]["application/json"]["examples"];
                for code in examples.as_object().into_iter().flat_map(|e| e.keys()) {
                    codes.insert((status.parse().expect("a status"), code.clone()));
                }
            }
        }
    }
    codes
}

#[tokio::test]
async fn every_route_of_the_router_is_in_the_document_and_nothing_else() {
    let router = router_with(&Fake::new(), 1, 4).await;
    let routes = routes_of(&router).await;
    assert!(
        routes.contains(&("post".to_owned(), "/run".to_owned())),
        "{routes:?}"
    );
    assert_eq!(documented(&document()), routes);
}

#[tokio::test]
async fn a_starting_runner_serves_the_document_and_routes_nothing_it_leaves_out() {
    let argv = ["sandbox-runner", "--token", TOKEN];
    let config = Cli::parse_from(argv).serve.validate().expect("config");
    let base = Base::new(&config, Arc::new(Lifecycle::with_id("s".into())), None);
    let starting = starting(&config, "fake", &base);
    let documented = documented(&document());
    for route in routes_of(&starting).await {
        assert!(documented.contains(&route), "{route:?} is not documented");
    }
    let get = Request::get("/openapi.json")
        .body(Body::empty())
        .expect("request");
    let (status, _, served) = send(&starting, get).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(served, document());
}

#[tokio::test]
async fn the_document_is_served_without_a_token_as_openapi_3_1() {
    let router = router_with(&Fake::new(), 1, 4).await;
    let get = Request::get("/openapi.json")
        .body(Body::empty())
        .expect("request");
    let (status, _, served) = send(&router, get).await;
    assert_eq!(status, StatusCode::OK, "{served}");
    assert_eq!(served, document());
    assert!(
        served["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        served["openapi"]
    );
    let run = &served["paths"]["/run"]["post"];
    assert_eq!(
        run["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/RunRequest"
    );
    let ids: Vec<&str> = served["paths"]
        .as_object()
        .expect("paths")
        .values()
        .flat_map(|item| item.as_object().expect("a path item").values())
        .filter_map(|operation| operation["operationId"].as_str())
        .collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "operation ids are unique: {ids:?}");
    let limits = &served["components"]["schemas"]["Limits"]["properties"];
    assert!(limits["answerMarginMs"].is_object(), "{limits}");
}

/// Every error answer, one of each kind (but the fallback's 404 and 405, which the
/// document's description names for every path).
fn every_error() -> Vec<ApiError> {
    let io = || std::io::Error::other("x");
    let file = |failure| ApiError::Session(SessionError::File(failure, "x".into()));
    let bad_metadata =
        sandbox_packages::parse_script_metadata("# /// script\n# dependencies = 5\n# ///\n")
            .expect_err("a bad block");
    let deps = [
        DepsError::from(bad_metadata),
        DepsError::TooMany {
            what: "x".into(),
            max: 1,
        },
        DepsError::Denied {
            package: "x".into(),
            reason: "x".into(),
        },
        DepsError::NotFound {
            package: "x".into(),
            message: "x".into(),
        },
        DepsError::Conflict { detail: "x".into() },
        DepsError::OutOfMemory {
            requested: "x".into(),
        },
        DepsError::Timeout {
            requested: "x".into(),
            timeout: Duration::from_secs(1),
        },
        DepsError::IndexUnreachable {
            package: None,
            detail: "x".into(),
        },
        DepsError::PythonUnsupported {
            requires: "x".into(),
            version: "x".into(),
        },
        DepsError::Stopping {
            requested: "x".into(),
        },
        DepsError::Failed {
            step: "x",
            detail: "x".into(),
        },
    ];
    let mut errors = vec![
        ApiError::BadRequest("x".into()),
        ApiError::Unauthorized("x"),
        ApiError::TooLarge("x".into()),
        ApiError::Busy(AcquireError::QueueFull { size: 1, queue: 1 }),
        ApiError::Busy(AcquireError::Timeout(Duration::from_secs(1))),
        ApiError::Busy(AcquireError::Closed),
        ApiError::Sandbox(Box::new(io())),
        ApiError::Cancelled,
        ApiError::Draining,
        ApiError::Starting,
        ApiError::Session(SessionError::NotFound("x".into())),
        ApiError::Session(SessionError::Busy("x".into())),
        ApiError::Session(SessionError::TooMany(1)),
        ApiError::Session(SessionError::BadRequest("x".into())),
        ApiError::Session(SessionError::Acquire(AcquireError::Closed)),
        ApiError::Session(SessionError::Sandbox("x".into())),
        ApiError::Session(SessionError::Random(io())),
        ApiError::Session(SessionError::BadPath("x".into())),
        ApiError::Session(SessionError::FileTimeout(Duration::from_secs(1))),
        file(FileFailure::BadPath),
        file(FileFailure::NotFound),
        file(FileFailure::TooLarge),
        file(FileFailure::NotAFile),
        file(FileFailure::Io),
        ApiError::Deps(DepsRefusal::Disabled("x".into())),
        ApiError::Deps(DepsRefusal::Unsupported("x".into())),
        ApiError::Deps(DepsRefusal::Unavailable("x".into(), "x".into())),
    ];
    errors.extend(deps.into_iter().map(|e| ApiError::Deps(e.into())));
    errors
}

#[tokio::test]
async fn every_error_the_api_answers_is_in_the_document() {
    let documented = documented_codes(&document());
    for error in every_error() {
        let (status, _, body) = read(error.into_response()).await;
        let status = status.as_u16();
        let code = body["error"]["code"].as_str().expect("a code").to_owned();
        assert!(
            documented.contains(&(status, code.clone())),
            "{status} {code} is not in the document"
        );
    }
}
