//! A streamed run on the vm backend: the guest's init relays the jailed agent's output
//! frames while the program runs, so the caller gets its lines as they come, as from a
//! process sandbox; and the guest's jail makes the same tree (the `tools` folder too).

use super::*;

/// POSTs a streamed bash run of `code`; each line of the answer with when it arrived.
async fn streamed(runner: &Runner, code: &str) -> Vec<(Instant, Value)> {
    let mut response = runner
        .client
        .post(format!("{}/run", runner.url))
        .bearer_auth(common::TOKEN)
        .header("accept", "application/x-ndjson")
        .body(serde_json::json!({"lang": "bash", "code": code}).to_string())
        .send()
        .await
        .expect("the runner answered");
    assert_eq!(response.status().as_u16(), 200);
    let mut lines = Vec::new();
    let mut pending = Vec::new();
    while let Some(bytes) = response.chunk().await.expect("the body") {
        pending.extend_from_slice(&bytes);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let value = serde_json::from_slice(&line[..end]).expect("a JSON line");
            lines.push((Instant::now(), value));
        }
    }
    lines
}

#[tokio::test]
async fn a_streamed_run_in_a_guest_sends_its_output_as_it_comes() {
    let _serial = SERIAL.lock().await;
    let runner = vm_runner(1, &state_dir("live"));
    wait_available(&runner).await;
    let code = "echo first; sleep 1.5; stat -c '%U %a' /run/sandbox-tools; \
                readlink /home/node_modules; ls /run/sandbox-tools";
    let lines = tokio::time::timeout(REQUEST_BOUND, streamed(&runner, code))
        .await
        .expect("an answer within the bound");
    let (first_at, first) = &lines[0];
    assert_eq!(
        first,
        &serde_json::json!({"stream": "stdout", "data": "first\n"}),
        "{lines:?}"
    );
    let (last_at, last) = lines.last().expect("a last line");
    let ahead = last_at.duration_since(*first_at);
    assert!(
        ahead > Duration::from_secs(1),
        "the first line came only {ahead:?} ahead"
    );
    assert_eq!(
        last["result"]["stdout"],
        "first\nroot 755\n/run/sandbox-tools/node_modules\nnode_modules\npython\n",
        "{last}"
    );
}
