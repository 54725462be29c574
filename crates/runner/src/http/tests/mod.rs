//! The router driven in-process, over a pool of the fake backend: every answer of
//! the API contract, without root or a real sandbox.

use super::*;
use crate::config::ServeArgs;
use crate::pool::tests::fake::Fake;
use crate::pool::{Pool, PoolConfig};
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::response::IntoResponse;
use clap::Parser;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::time::Duration;

const TOKEN: &str = "router-test-token";

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// A router over a pool of `size` fake sandboxes whose runs take `run_time`.
async fn router_with(fake: &Fake, size: usize, queue_size: usize) -> Router {
    let life = Arc::new(Lifecycle::with_id("test".into()));
    router_living(fake, size, queue_size, life).await
}

/// The same, living `life`.
async fn router_living(
    fake: &Fake,
    size: usize,
    queue_size: usize,
    life: Arc<Lifecycle>,
) -> Router {
    let argv = [
        "sandbox-runner",
        "--token",
        TOKEN,
        "--code-cap-bytes",
        "1000",
    ];
    let config = Cli::parse_from(argv).serve.validate().expect("config");
    let pool_config = PoolConfig {
        size,
        queue_size,
        queue_timeout: Duration::from_millis(200),
    };
    let warm = config.sandbox.languages.warm();
    let pool = Pool::start(Arc::new(fake.clone()), pool_config, warm, false)
        .await
        .expect("pool");
    let base = Base::new(&config, life, None);
    let data = tempfile::tempdir().expect("a data folder").keep();
    let mut store_config = config.store.clone();
    store_config.dir = data;
    let (store, _) = crate::store::Store::open(store_config).expect("the store opens");
    router(Arc::new(AppState::new(
        config,
        pool,
        "fake",
        base,
        Arc::new(store),
        Vec::new(),
    )))
}

async fn send(router: &Router, request: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    let response = router.clone().oneshot(request).await.expect("an answer");
    read(response).await
}

/// An answer's status, headers and JSON body (null when it is not JSON).
async fn read(response: Response) -> (StatusCode, HeaderMap, Value) {
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = bytes_of(response.into_body()).await;
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, body)
}

/// A body's bytes, read to its end.
async fn bytes_of(body: Body) -> Bytes {
    body.collect().await.expect("body").to_bytes()
}

/// The lines of a streamed (ndjson) body, each a JSON value; the body ends with a
/// whole line.
pub(super) async fn ndjson_lines(body: Body) -> Vec<Value> {
    let bytes = bytes_of(body).await;
    let text = std::str::from_utf8(&bytes).expect("UTF-8");
    assert!(text.is_empty() || text.ends_with('\n'), "{text:?}");
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn post_run(body: &str, token: Option<&str>) -> Request<Body> {
    let mut request = Request::post("/run").header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    request.body(Body::from(body.to_owned())).expect("request")
}

fn run_body(code: &str) -> String {
    json!({"lang": "python", "code": code, "timeoutMs": 1000}).to_string()
}

#[tokio::test]
async fn a_run_answers_200_with_every_field() {
    let fake = Fake::new();
    let router = router_with(&fake, 1, 4).await;
    let (status, _, body) = send(&router, post_run(&run_body("print(1)"), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for field in [
        "stdout",
        "stderr",
        "exitCode",
        "durationMs",
        "timedOut",
        "oomKilled",
        "stdoutTruncated",
        "stderrTruncated",
    ] {
        assert!(body.get(field).is_some(), "{field} missing: {body}");
    }
    assert_eq!(body["stdout"], "sandbox 0");
}

#[tokio::test]
async fn without_the_token_401_with_a_bearer_challenge() {
    let router = router_with(&Fake::new(), 1, 4).await;
    for token in [None, Some("wrong")] {
        let (status, headers, body) = send(&router, post_run(&run_body("1"), token)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
        assert_eq!(body["error"]["code"], "unauthorized");
    }
}

#[tokio::test]
async fn bad_input_400_and_code_over_the_cap_413() {
    let router = router_with(&Fake::new(), 1, 4).await;
    let bad_lang = json!({"lang": "klingon", "code": "x"}).to_string();
    for body in [
        "not json",
        "[]",
        bad_lang.as_str(),
        r#"{"lang":"bash","code":"x","timeoutMs":0}"#,
    ] {
        let (status, _, answer) = send(&router, post_run(body, Some(TOKEN))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "bad_request");
    }
    let big = run_body(&"x".repeat(2000));
    let (status, _, answer) = send(&router, post_run(&big, Some(TOKEN))).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
}

#[tokio::test]
async fn a_full_pool_gives_503_then_429_with_retry_after() {
    let fake = Fake::new();
    fake.log().run_time = Duration::from_secs(2);
    let router = router_with(&fake, 1, 1).await;
    let busy = tokio::spawn({
        let router = router.clone();
        async move { send(&router, post_run(&run_body("1"), Some(TOKEN))).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let waiting = tokio::spawn({
        let router = router.clone();
        async move { send(&router, post_run(&run_body("2"), Some(TOKEN))).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, headers, body) = send(&router, post_run(&run_body("3"), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(headers.contains_key(header::RETRY_AFTER));
    let (status, headers, body) = waiting.await.expect("task");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "queue_timeout");
    assert!(headers.contains_key(header::RETRY_AFTER));
    assert_eq!(busy.await.expect("task").0, StatusCode::OK);
}

#[tokio::test]
async fn a_failed_sandbox_is_a_500_that_says_so() {
    let fake = Fake::new();
    fake.log().fail_runs = true;
    let router = router_with(&fake, 1, 4).await;
    let (status, _, body) = send(&router, post_run(&run_body("1"), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["error"]["code"], "sandbox_failed");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("fake"));
}

#[tokio::test]
async fn unknown_paths_404_wrong_methods_405_health_and_metrics_200() {
    let router = router_with(&Fake::new(), 1, 4).await;
    let get = |path: &str| Request::get(path).body(Body::empty()).expect("request");
    let (status, _, body) = send(&router, get("/nope")).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );
    let (status, _, _) = send(&router, get("/run")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _, health) = send(&router, get("/health")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health["backend"], "fake");
    assert_eq!(health["poolSize"], 1);
    assert_eq!(health["limits"]["codeCapBytes"], 1000);
    let response = router
        .clone()
        .oneshot(get("/metrics"))
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_draining_runner_refuses_new_runs_and_sessions_with_503_draining() {
    let life = Arc::new(Lifecycle::with_id("0123".into()));
    let router = router_living(&Fake::new(), 1, 4, life.clone()).await;
    let get = |path: &str| Request::get(path).body(Body::empty()).expect("request");
    let (status, _, health) = send(&router, get("/health")).await;
    assert_eq!((status, &health["status"]), (StatusCode::OK, &json!("ok")));
    assert_eq!(health["instanceId"], "0123");
    life.begin_drain();
    let (status, _, health) = send(&router, get("/health")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(health["status"], "draining");
    assert_eq!(health["poolSize"], 1, "every field stays: {health}");
    let (status, _, live) = send(&router, get("/health/live")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(live, json!({"status": "alive", "instanceId": "0123"}));
    let (status, headers, body) = send(&router, post_run(&run_body("1"), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["code"], "draining");
    assert!(headers.contains_key(header::RETRY_AFTER));
    let session = Request::post("/sessions")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .expect("request");
    let (status, _, body) = send(&router, session).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["code"], "draining");
    assert_eq!(life.in_flight(), 0, "the refused requests left the count");
}

#[tokio::test]
async fn a_request_waiting_for_a_sandbox_when_the_drain_begins_gets_503_draining() {
    let fake = Fake::new();
    fake.log().run_time = Duration::from_secs(1);
    let life = Arc::new(Lifecycle::with_id("x".into()));
    let router = router_living(&fake, 1, 4, life.clone()).await;
    let busy = tokio::spawn({
        let router = router.clone();
        async move { send(&router, post_run(&run_body("1"), Some(TOKEN))).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let waiting = tokio::spawn({
        let router = router.clone();
        async move { send(&router, post_run(&run_body("2"), Some(TOKEN))).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(life.in_flight(), 2);
    life.begin_drain();
    let (status, _, body) = waiting.await.expect("task");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "draining");
    let (status, _, body) = busy.await.expect("task");
    assert_eq!(status, StatusCode::OK, "the run in flight finishes: {body}");
    assert_eq!(fake.log().runs.len(), 1, "the waiting one never ran");
    life.idle().await;
}

#[tokio::test]
async fn a_starting_runner_answers_503_starting_until_the_switch_to_its_router() {
    let argv = ["sandbox-runner", "--token", TOKEN, "--pool-size", "3"];
    let config = Cli::parse_from(argv).serve.validate().expect("config");
    let life = Arc::new(Lifecycle::with_id("abcd".into()));
    let base = Base::new(&config, life.clone(), None);
    let ready = Arc::new(std::sync::OnceLock::new());
    let app = switch(starting(&config, "fake", &base), ready.clone());
    let get = |path: &str| Request::get(path).body(Body::empty()).expect("request");
    let (status, _, health) = send(&app, get("/health")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(health["status"], "starting");
    assert_eq!(health["instanceId"], "abcd");
    assert_eq!(
        (&health["poolSize"], &health["available"]),
        (&json!(3), &json!(0))
    );
    let (status, _, live) = send(&app, get("/health/live")).await;
    assert_eq!((status, &live["status"]), (StatusCode::OK, &json!("alive")));
    let (status, headers, body) = send(&app, post_run(&run_body("1"), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["code"], "starting");
    assert!(headers.contains_key(header::RETRY_AFTER));
    let metrics = app.clone().oneshot(get("/metrics")).await.expect("answer");
    let text = metrics
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("sandbox_runner_ready 0"), "{text}");
    life.begin_drain();
    let (_, _, health) = send(&app, get("/health")).await;
    assert_eq!(health["status"], "draining");

    let started = router_with(&Fake::new(), 1, 4).await;
    assert!(ready.set(started).is_ok());
    let (status, _, health) = send(&app, get("/health")).await;
    assert_eq!((status, &health["status"]), (StatusCode::OK, &json!("ok")));
}

mod openapi;
mod streamed;
