//! Runs answered as a stream (`Accept: application/x-ndjson`), over the fake backend:
//! the lines, the statuses of refusals before the run, a client that goes away.

use super::*;

fn streamed(request: Request<Body>) -> Request<Body> {
    let (mut parts, body) = request.into_parts();
    parts.headers.insert(
        header::ACCEPT,
        "application/x-ndjson".parse().expect("a header"),
    );
    Request::from_parts(parts, body)
}

/// The lines of a streamed answer, which must be 200 and ndjson.
async fn lines(router: &Router, request: Request<Body>) -> Vec<Value> {
    let response = router.clone().oneshot(request).await.expect("an answer");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/x-ndjson"
    );
    ndjson_lines(response.into_body()).await
}

#[tokio::test]
async fn a_streamed_run_sends_its_output_then_the_plain_answer() {
    let fake = Fake::new();
    let router = router_with(&fake, 1, 4).await;
    let got = lines(&router, streamed(post_run(&run_body("1"), Some(TOKEN)))).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0], json!({"stream": "stdout", "data": "sandbox 0"}));
    let (status, _, plain) = send(&router, post_run(&run_body("1"), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::OK);
    let mut result = got[1]["result"].clone();
    result["stdout"] = plain["stdout"].clone(); // another sandbox, another name
    assert_eq!(result, plain);
}

#[tokio::test]
async fn refusals_before_the_run_keep_their_status() {
    let fake = Fake::new();
    fake.log().run_time = Duration::from_secs(2);
    let router = router_with(&fake, 1, 0).await;
    let bad = streamed(post_run(r#"{"lang": "klingon", "code": "1"}"#, Some(TOKEN)));
    let (status, headers, body) = send(&router, bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let big = streamed(post_run(&run_body(&"x".repeat(2000)), Some(TOKEN)));
    assert_eq!(send(&router, big).await.0, StatusCode::PAYLOAD_TOO_LARGE);
    let unauthorized = streamed(post_run(&run_body("1"), None));
    assert_eq!(
        send(&router, unauthorized).await.0,
        StatusCode::UNAUTHORIZED
    );
    // The one sandbox busy, no queue: 429 before anything starts.
    let busy = tokio::spawn(send_owned(
        router.clone(),
        post_run(&run_body("1"), Some(TOKEN)),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _, body) = send(&router, streamed(post_run(&run_body("1"), Some(TOKEN)))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "pool_exhausted");
    assert_eq!(busy.await.expect("the first run").0, StatusCode::OK);
    let session = Request::post("/sessions/nope/run")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::from(run_body("1")))
        .expect("request");
    let (status, _, body) = send(&router, streamed(session)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "session_not_found");
}

async fn send_owned(router: Router, request: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    send(&router, request).await
}

#[tokio::test]
async fn a_run_that_fails_ends_its_stream_with_an_error_line() {
    let fake = Fake::new();
    fake.log().fail_runs = true;
    let router = router_with(&fake, 1, 4).await;
    let got = lines(&router, streamed(post_run(&run_body("1"), Some(TOKEN)))).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["error"]["code"], "sandbox_failed");
}

#[tokio::test]
async fn a_session_s_run_streams_too() {
    let fake = Fake::new();
    let router = router_with(&fake, 2, 4).await;
    let create = Request::post("/sessions")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .expect("request");
    let (status, _, info) = send(&router, create).await;
    assert_eq!(status, StatusCode::CREATED, "{info}");
    let id = info["id"].as_str().expect("an id");
    let run = Request::post(format!("/sessions/{id}/run"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::from(run_body("1")))
        .expect("request");
    let got = lines(&router, streamed(run)).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0]["stream"], "stdout");
    assert_eq!(got[1]["result"]["stdout"], got[0]["data"]);
    assert_eq!(got[1]["result"]["stateLost"], false);
}

#[tokio::test]
async fn a_client_that_leaves_a_streamed_run_stops_it_and_it_counts_in_flight_till_then() {
    let fake = Fake::new();
    fake.log().run_time = Duration::from_secs(30);
    let life = Arc::new(Lifecycle::with_id("test".into()));
    let router = router_living(&fake, 1, 4, life.clone()).await;
    let request = streamed(post_run(&run_body("1"), Some(TOKEN)));
    let response = router.clone().oneshot(request).await.expect("an answer");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(life.in_flight(), 1, "the streamed answer is in flight");
    drop(response);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while life.in_flight() > 0 || fake.log().destroyed.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", fake.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(fake.log().finished.is_empty(), "the run was stopped");
}

fn tools_body() -> String {
    json!({
        "lang": "python",
        "code": "1",
        "tools": {"servers": [{"name": "docs", "tools": [{"name": "find"}]}]}
    })
    .to_string()
}

fn post_answer(path: &str, body: &str) -> Request<Body> {
    Request::post(path)
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .expect("a request")
}

#[tokio::test]
async fn a_run_offering_tools_must_be_streamed_and_its_offer_well_formed() {
    let fake = Fake::new();
    let router = router_with(&fake, 1, 4).await;
    let (status, _, body) = send(&router, post_run(&tools_body(), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("application/x-ndjson")));
    let bad = tools_body().replace("\"docs\"", "\"not-a-name\"");
    let (status, _, body) = send(&router, streamed(post_run(&bad, Some(TOKEN)))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let got = lines(&router, streamed(post_run(&tools_body(), Some(TOKEN)))).await;
    assert!(got.last().expect("a last line")["result"].is_object());
}

#[tokio::test]
async fn answers_for_no_run_or_no_call_are_404_and_bad_answers_400() {
    let fake = Fake::new();
    let router = router_with(&fake, 1, 4).await;
    let path = "/runs/run_0/tool-results/1";
    let (status, _, body) = send(&router, post_answer(path, r#"{"result": 1}"#)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "run_not_found");
    for bad in [
        r#"{}"#,
        r#"{"result": 1, "error": "x"}"#,
        r#"{"other": 1}"#,
        "[]",
    ] {
        let (status, _, body) = send(&router, post_answer(path, bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let big = json!({"result": "x".repeat(2 << 20)}).to_string();
    let (status, _, _) = send(&router, post_answer(path, &big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let unauthorized = Request::post(path)
        .body(Body::from(r#"{"result": 1}"#))
        .expect("a request");
    assert_eq!(
        send(&router, unauthorized).await.0,
        StatusCode::UNAUTHORIZED
    );
}
