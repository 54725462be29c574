//! A VM session paused and woken: its files go through the guest's init and jailed agent
//! both ways, and the session wakes in a fresh VM.

use super::*;

#[tokio::test]
async fn a_paused_vm_session_wakes_in_a_fresh_vm_with_its_files() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("pause");
    let runner = vm_runner(1, &state);
    let id = runner.open_session(serde_json::json!({})).await;
    let made = "mkdir -p d && echo kept > d/f && ln -s d/f link && chmod 0700 d && echo t > /tmp/t";
    runner.ok_in(&id, "bash", made).await;
    let (status, paused) = runner
        .request("POST", &format!("/sessions/{id}/pause"), None)
        .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["state"], "paused");
    assert!(paused["bytes"].as_u64().unwrap_or(0) > 0, "{paused}");
    let out = runner
        .ok_in(&id, "bash", "cat link /tmp/t; stat -c %a d; readlink link")
        .await;
    assert_eq!(stdout(&out), "kept\nt\n700\nd/f\n", "{out}");
    assert_eq!(out["resumed"], true, "{out}");
    let (status, _) = runner
        .request("DELETE", &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(status, 204);
}
