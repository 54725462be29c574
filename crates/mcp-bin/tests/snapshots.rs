//! Pause, snapshots and forks (issue 31) through rmcp's client against the real
//! `sandbox-mcp serve`, wired to a real `sandbox-runner serve`: a paused sandbox wakes at
//! its next call and says so; a snapshot starts new sandboxes; forks are independent;
//! snapshot ids of another credential, altered, or of a runner no longer configured are
//! refused with what to do.
//!
//! Needs the runner binary (built beside these tests, or SANDBOX_RUNNER_BIN) and root.

mod common;

use common::{
    call_err, call_ok, connect, start_mcp, start_mcp_with_token, start_runner, text, tool, Client,
};
use serde_json::{json, Value};

/// A runner, a server wired to it, and a client of that server.
async fn connected() -> (common::Server, common::Server, Client) {
    let runner = start_runner();
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    (runner, server, client)
}

async fn create(client: &Client, arguments: Value) -> String {
    let (_, structured) = call_ok(client, tool("create_sandbox", arguments)).await;
    structured["sandboxId"]
        .as_str()
        .expect("sandboxId")
        .to_owned()
}

async fn bash(client: &Client, id: &str, code: &str) -> Value {
    call_ok(
        client,
        tool("run_bash", json!({"code": code, "sandboxId": id})),
    )
    .await
    .1
}

#[tokio::test]
async fn a_paused_sandbox_wakes_at_its_next_call_and_says_so() {
    let (_runner, _server, client) = connected().await;
    let id = create(&client, json!({})).await;
    bash(&client, &id, "echo kept > ~/kept.txt; mkdir ~/empty").await;
    call_ok(
        &client,
        tool("run_python", json!({"code": "x = 41", "sandboxId": id})),
    )
    .await;

    let (paused, fields) = call_ok(&client, tool("pause_sandbox", json!({"sandboxId": id}))).await;
    assert_eq!(fields["paused"], true, "{fields}");
    assert!(fields["bytes"].as_u64().unwrap_or_default() > 0, "{fields}");
    assert!(fields["pausedAt"].as_str().is_some(), "{fields}");
    assert!(text(&paused).contains("wakes"), "{}", text(&paused));

    // The files are there; the interpreter's variables are not (process backend).
    let (woken, fields) = call_ok(
        &client,
        tool(
            "run_python",
            json!({"code": "print(open('/home/sandbox/kept.txt').read().strip()); print('x' in globals())", "sandboxId": id}),
        ),
    )
    .await;
    assert_eq!(fields["stdout"], "kept\nFalse\n", "{fields}");
    assert_eq!(fields["resumed"], true, "{fields}");
    assert_eq!(fields["stateLost"], true, "{fields}");
    assert!(
        text(&woken).contains("was paused, and this call woke it"),
        "{}",
        text(&woken)
    );
    let after = bash(&client, &id, "test -d ~/empty && echo there").await;
    assert_eq!(after["stdout"], "there\n");
    assert_eq!(after["resumed"], false, "only the first run says so");

    // Any call wakes it, a file tool as well.
    call_ok(&client, tool("pause_sandbox", json!({"sandboxId": id}))).await;
    let (read, _) = call_ok(
        &client,
        tool(
            "download_file",
            json!({"sandboxId": id, "path": "kept.txt"}),
        ),
    )
    .await;
    assert_eq!(text(&read), "kept\n");
    call_ok(&client, tool("close_sandbox", json!({"sandboxId": id}))).await;
    call_err(
        &client,
        tool("pause_sandbox", json!({"sandboxId": id})),
        "sandbox_not_found",
        "create_sandbox",
    )
    .await;
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn snapshots_start_new_sandboxes_and_forks_are_independent() {
    let (_runner, _server, client) = connected().await;
    let id = create(&client, json!({})).await;
    bash(&client, &id, "echo good > ~/state.txt").await;

    let (taken, fields) =
        call_ok(&client, tool("snapshot_sandbox", json!({"sandboxId": id}))).await;
    let snapshot_id = fields["snapshotId"]
        .as_str()
        .expect("snapshotId")
        .to_owned();
    assert!(snapshot_id.starts_with("snap_"), "{snapshot_id}");
    assert!(fields["expiresAt"].as_str().is_some(), "{fields}");
    assert!(text(&taken).contains(&snapshot_id));
    // The sandbox goes on; what it does next is not in the snapshot.
    bash(&client, &id, "echo broken > ~/state.txt").await;
    let restored = create(&client, json!({"snapshotId": snapshot_id})).await;
    let read = bash(&client, &restored, "cat ~/state.txt").await;
    assert_eq!(read["stdout"], "good\n");
    let again = create(&client, json!({"snapshotId": snapshot_id})).await;
    assert_eq!(
        bash(&client, &again, "cat ~/state.txt").await["stdout"],
        "good\n"
    );

    // Three forks, each its own copy.
    let (forked, fields) = call_ok(
        &client,
        tool("fork_sandbox", json!({"sandboxId": restored, "count": 3})),
    )
    .await;
    let forks: Vec<String> = fields["sandboxIds"]
        .as_array()
        .expect("sandboxIds")
        .iter()
        .map(|v| v.as_str().expect("an id").to_owned())
        .collect();
    assert_eq!(forks.len(), 3, "{}", text(&forked));
    for (i, fork) in forks.iter().enumerate() {
        assert!(fork.starts_with("sbx_") && fork != &restored, "{fork}");
        bash(&client, fork, &format!("echo {i} > ~/mine.txt")).await;
    }
    for (i, fork) in forks.iter().enumerate() {
        let read = bash(&client, fork, "cat ~/state.txt ~/mine.txt").await;
        assert_eq!(read["stdout"], format!("good\n{i}\n"), "fork {i}");
    }
    let original = bash(&client, &restored, "ls ~/mine.txt 2>&1; true").await;
    assert!(
        original["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("No such file"),
        "{original}"
    );
    call_err(
        &client,
        tool("fork_sandbox", json!({"sandboxId": restored, "count": 17})),
        "invalid_arguments",
        "from 1 to 16",
    )
    .await;
    for sandbox in forks.iter().chain([&id, &restored, &again]) {
        call_ok(
            &client,
            tool("close_sandbox", json!({"sandboxId": sandbox})),
        )
        .await;
    }
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn snapshot_ids_of_another_credential_altered_or_of_a_gone_runner_are_refused() {
    let common::TwoHolders {
        runner,
        proxy,
        alice,
        bob: _bob,
        alice_client,
        bob_client,
    } = common::two_holders().await;
    let id = create(&alice_client, json!({})).await;
    let (_, fields) = call_ok(
        &alice_client,
        tool("snapshot_sandbox", json!({"sandboxId": id})),
    )
    .await;
    let snapshot_id = fields["snapshotId"]
        .as_str()
        .expect("snapshotId")
        .to_owned();
    let sessions_before = proxy.requests_to("/sessions");

    let mut altered = snapshot_id.clone().into_bytes();
    altered[20] = if altered[20] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).expect("ASCII");
    for (client, given) in [
        (&bob_client, snapshot_id.as_str()),
        (&alice_client, altered.as_str()),
        (&alice_client, id.as_str()),
        (&alice_client, "0123456789abcdef0123456789abcdef"),
    ] {
        call_err(
            client,
            tool("create_sandbox", json!({"snapshotId": given})),
            "invalid_snapshot_id",
            "snapshot_sandbox",
        )
        .await;
    }
    // Bob cannot pause, snapshot or fork Alice's sandbox either.
    for name in ["pause_sandbox", "snapshot_sandbox", "fork_sandbox"] {
        call_err(
            &bob_client,
            tool(name, json!({"sandboxId": id})),
            "invalid_sandbox_id",
            "create_sandbox",
        )
        .await;
    }
    assert_eq!(
        proxy.requests_to("/sessions"),
        sessions_before,
        "no refused id reached the runner"
    );

    // Deleted on the runner: the snapshot is gone, and the error says so.
    let listed: Value = reqwest::Client::new()
        .get(format!("{}/snapshots", runner.url))
        .bearer_auth(&runner.token)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    let runner_snapshot = listed["snapshots"][0]["snapshotId"]
        .as_str()
        .expect("the runner's id")
        .to_owned();
    let status = reqwest::Client::new()
        .delete(format!("{}/snapshots/{runner_snapshot}", runner.url))
        .bearer_auth(&runner.token)
        .send()
        .await
        .expect("delete")
        .status();
    assert_eq!(status, 204);
    call_err(
        &alice_client,
        tool("create_sandbox", json!({"snapshotId": snapshot_id})),
        "snapshot_not_found",
        "snapshot_sandbox",
    )
    .await;

    // A server whose runners no longer include the snapshot's: it says the snapshot is
    // lost with its runner, and sends nothing anywhere.
    let (_, fields) = call_ok(
        &alice_client,
        tool("snapshot_sandbox", json!({"sandboxId": id})),
    )
    .await;
    let kept = fields["snapshotId"]
        .as_str()
        .expect("snapshotId")
        .to_owned();
    let moved = start_mcp_with_token(
        &[
            ("SANDBOX_RUNNER_URL", runner.url.as_str()),
            ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
        ],
        alice.token.clone(),
    );
    let moved_client = connect(&moved, &moved.token).await.expect("initialize");
    call_err(
        &moved_client,
        tool("create_sandbox", json!({"snapshotId": kept})),
        "snapshot_lost",
        "runner that held this snapshot is gone",
    )
    .await;
    call_ok(
        &alice_client,
        tool("close_sandbox", json!({"sandboxId": id})),
    )
    .await;
    for client in [alice_client, bob_client, moved_client] {
        client.cancel().await.expect("close");
    }
}
