//! Snapshots, forks, and moving a snapshot to another runner.

use super::{post, runner_on, session_with, sh};
use crate::common::{Runner, TOKEN};
use serde_json::{json, Value};

/// `GET /snapshots/{id}/export`: status and bytes.
pub async fn export(runner: &Runner, id: &str) -> (u16, Vec<u8>) {
    let response = runner
        .client
        .get(format!("{}/snapshots/{id}/export", runner.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answered");
    let status = response.status().as_u16();
    if status == 200 {
        assert_eq!(response.headers()["content-type"], "application/x-tar");
    }
    (status, response.bytes().await.expect("a body").to_vec())
}

/// `POST /snapshots/import` with `archive`: status and answer.
pub async fn import(runner: &Runner, archive: Vec<u8>) -> (u16, Value) {
    let response = runner
        .client
        .post(format!("{}/snapshots/import", runner.url))
        .bearer_auth(TOKEN)
        .header("content-type", "application/x-tar")
        .body(archive)
        .send()
        .await
        .expect("answered");
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// `POST /sessions` from snapshot `id`: status and answer.
async fn from_snapshot(runner: &Runner, id: &str) -> (u16, Value) {
    let body = json!({ "fromSnapshot": id });
    runner.request("POST", "/sessions", Some(&body)).await
}

/// A snapshot of session `id` (201): its id.
async fn snapshot(runner: &Runner, id: &str) -> Value {
    let (status, taken) = post(runner, &format!("/sessions/{id}/snapshots")).await;
    assert_eq!(status, 201, "{taken}");
    taken
}

#[tokio::test]
async fn a_session_starts_from_a_snapshot_and_the_original_goes_on() {
    let data = tempfile::tempdir().expect("data folder");
    let runner = runner_on(data.path(), &[]);
    let id = session_with(
        &runner,
        "echo one > f.txt && mkdir -p /tmp/d && echo t > /tmp/d/t",
    )
    .await;
    let taken = snapshot(&runner, &id).await;
    let snapshot_id = taken["snapshotId"].as_str().expect("an id").to_owned();
    assert_eq!(taken["sessionId"], id);
    assert!(taken["bytes"].as_u64().unwrap() > 0);
    assert!(taken["createdAt"].as_str().is_some());
    sh(&runner, &id, "echo two > f.txt").await;

    let (status, listed) = runner.request("GET", "/snapshots", None).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = listed["snapshots"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|s| s["snapshotId"].as_str())
        .collect();
    assert_eq!(ids, [snapshot_id.as_str()]);

    let (status, made) = from_snapshot(&runner, &snapshot_id).await;
    assert_eq!(status, 201, "{made}");
    let copy = made["id"].as_str().expect("an id");
    assert_eq!(sh(&runner, copy, "cat f.txt /tmp/d/t").await, "one\nt\n");
    assert_eq!(
        sh(&runner, &id, "cat f.txt").await,
        "two\n",
        "the original went on"
    );

    let path = format!("/snapshots/{snapshot_id}");
    assert_eq!(runner.request("DELETE", &path, None).await.0, 204);
    let (status, body) = runner.request("DELETE", &path, None).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "snapshot_not_found");
    let (status, body) = from_snapshot(&runner, &snapshot_id).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "snapshot_not_found");
    assert_eq!(
        sh(&runner, copy, "cat f.txt").await,
        "one\n",
        "a session keeps its files"
    );
}

#[tokio::test]
async fn four_forks_are_independent() {
    let data = tempfile::tempdir().expect("data folder");
    let runner = runner_on(data.path(), &[]);
    let id = runner.open_session(json!({})).await;
    sh(&runner, &id, "echo base > base.txt").await;
    let (status, forked) = runner
        .request(
            "POST",
            &format!("/sessions/{id}/fork"),
            Some(&json!({"count": 4})),
        )
        .await;
    assert_eq!(status, 201, "{forked}");
    let ids: Vec<String> = forked["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| {
            assert!(
                s["idleTimeoutMs"].as_u64().is_some() && s["expiresAt"].is_string(),
                "{s}"
            );
            s["id"].as_str().expect("an id").to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 4);
    for (n, fork) in ids.iter().enumerate() {
        sh(&runner, fork, &format!("echo {n} > mine.txt")).await;
    }
    for (n, fork) in ids.iter().enumerate() {
        let seen = sh(&runner, fork, "cat base.txt mine.txt; ls *.txt").await;
        assert_eq!(seen, format!("base\n{n}\nbase.txt\nmine.txt\n"));
    }
    let original = sh(&runner, &id, "ls *.txt").await;
    assert_eq!(original, "base.txt\n", "the original is untouched");
    for count in [json!(0), json!(17), json!("two")] {
        let (status, body) = runner
            .request(
                "POST",
                &format!("/sessions/{id}/fork"),
                Some(&json!({"count": count})),
            )
            .await;
        assert_eq!(status, 400, "{count}: {body}");
    }
}

#[tokio::test]
async fn a_snapshot_moves_to_another_runner() {
    let data = tempfile::tempdir().expect("data folder");
    let runner = runner_on(data.path(), &[]);
    let code = "mkdir -p a/b && echo moved > a/b/c && ln -s a/b/c link && chmod 0700 a";
    let id = session_with(&runner, code).await;
    let taken = snapshot(&runner, &id).await;
    let (status, archive) = export(&runner, taken["snapshotId"].as_str().unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(archive.len() as u64, taken["bytes"].as_u64().unwrap());
    let (status, body) = export(&runner, "0123456789abcdef0123456789abcdef").await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));

    let elsewhere = tempfile::tempdir().expect("data folder");
    let other = runner_on(elsewhere.path(), &[]);
    let (status, imported) = import(&other, archive).await;
    assert_eq!(status, 201, "{imported}");
    let snapshot_id = imported["snapshotId"].as_str().expect("an id");
    assert!(imported["bytes"].as_u64().unwrap() > 0);
    let (status, made) = from_snapshot(&other, snapshot_id).await;
    assert_eq!(status, 201, "{made}");
    let there = made["id"].as_str().unwrap();
    let seen = sh(&other, there, "cat link; stat -c %a a; readlink link").await;
    assert_eq!(seen, "moved\n700\na/b/c\n");
}
