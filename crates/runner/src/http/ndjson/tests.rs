//! The streamed answer's lines, from chunks and an outcome made here.

use super::*;
use crate::http::tests::ndjson_lines;
use crate::lifecycle::Lifecycle;
use crate::live;
use serde_json::{json, Value};

fn accept(value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_str(value).expect("a header"),
    );
    headers
}

#[test]
fn only_an_accept_naming_ndjson_asks_for_a_stream() {
    assert!(wanted(&accept("application/x-ndjson")));
    assert!(wanted(&accept(
        "application/json, Application/X-NDJSON; q=0.9"
    )));
    assert!(!wanted(&accept("application/json")));
    assert!(!wanted(&accept("*/*")));
    assert!(!wanted(&HeaderMap::new()));
}

/// The plain answer the relayed runs end with.
fn response() -> RunResponse {
    let answer = json!({
        "stdout": "é", "stderr": "", "exitCode": 0, "durationMs": 5, "timedOut": false,
        "oomKilled": false, "stdoutTruncated": false, "stderrTruncated": false,
    });
    serde_json::from_value(answer).expect("an answer")
}

fn chunk(stream: Stream, bytes: &[u8]) -> Chunk {
    Chunk {
        stream,
        bytes: bytes.to_vec(),
    }
}

/// Relays `chunks` and `outcome` into a streamed answer, and reads its lines.
async fn lines(chunks: Vec<Chunk>, outcome: Result<RunResponse, ApiError>) -> Vec<Value> {
    let life = Lifecycle::with_id("test".into());
    let (writer, response) = answer(life.enter());
    assert_eq!(response.headers()[header::CONTENT_TYPE], NDJSON);
    let (live, receiver) = live::channel();
    let relay = tokio::spawn(writer.relay(receiver, async move {
        for chunk in chunks {
            live.send(chunk);
            tokio::task::yield_now().await;
        }
        outcome
    }));
    let lines = ndjson_lines(response.into_body()).await;
    relay.await.expect("relayed");
    assert_eq!(life.in_flight(), 0, "in flight until the last line");
    lines
}

#[tokio::test]
async fn output_lines_come_whole_characters_first_and_the_result_last() {
    let chunks = vec![
        chunk(Stream::Stdout, b"\xc3"),
        chunk(Stream::Stderr, b"err"),
        chunk(Stream::Stdout, b"\xa9"),
    ];
    let got = lines(chunks, Ok(response())).await;
    assert_eq!(
        got,
        [
            json!({"stream": "stderr", "data": "err"}),
            json!({"stream": "stdout", "data": "é"}),
            json!({"result": serde_json::to_value(response()).unwrap()}),
        ]
    );
}

#[tokio::test]
async fn a_character_left_unfinished_at_the_end_is_replaced_before_the_result() {
    let got = lines(vec![chunk(Stream::Stdout, b"a\xe2\x82")], Ok(response())).await;
    assert_eq!(got[0], json!({"stream": "stdout", "data": "a"}));
    assert_eq!(got[1], json!({"stream": "stdout", "data": "\u{fffd}"}));
    assert!(got[2].get("result").is_some(), "{got:?}");
}

#[tokio::test]
async fn a_line_carries_at_most_a_chunk_of_text() {
    let big = vec![b'x'; OUTPUT_CHUNK_BYTES + 10];
    let got = lines(vec![chunk(Stream::Stdout, &big)], Ok(response())).await;
    let sizes: Vec<usize> = got[..2]
        .iter()
        .map(|line| line["data"].as_str().expect("data").len())
        .collect();
    assert_eq!(sizes, [OUTPUT_CHUNK_BYTES, 10]);
}

#[tokio::test]
async fn a_run_that_failed_after_the_answer_began_ends_with_an_error_line() {
    let got = lines(vec![chunk(Stream::Stdout, b"1")], Err(ApiError::Cancelled)).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1]["error"]["code"], "sandbox_failed");
    assert!(got[1]["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn a_client_that_goes_away_is_noticed_and_the_run_still_awaited() {
    let life = Lifecycle::with_id("test".into());
    let (writer, answered) = answer(life.enter());
    let gone = writer.gone();
    let (live, receiver) = live::channel();
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    let relay = tokio::spawn(writer.relay(receiver, async move {
        let _ = ended_rx.await;
        Ok(response())
    }));
    live.send(chunk(Stream::Stdout, b"x"));
    drop(answered);
    tokio::time::timeout(std::time::Duration::from_secs(5), gone)
        .await
        .expect("the client's going is noticed");
    assert_eq!(life.in_flight(), 1, "the run is not over");
    ended_tx.send(()).expect("the relay waits for the run");
    relay.await.expect("relayed");
    assert_eq!(life.in_flight(), 0);
}
