//! A run's caller for tools called from code: it offers a server `docs` and answers each
//! `toolCall` line of the streamed answer at `POST /runs/{runId}/tool-results/{id}`, as
//! sandbox-mcp does (tools.rs, and vm/tools.rs on the vm backend).

use super::{Runner, TOKEN};
use serde_json::{json, Value};

/// The offer every test makes: a server `docs` with `find` and `fail`.
pub fn offer() -> Value {
    json!({"servers": [{"name": "docs", "tools": [
        {"name": "find", "description": "Finds pages.", "inputSchema": {
            "type": "object",
            "properties": {"q": {"type": "string", "description": "What to look for."}},
            "required": ["q"]}},
        {"name": "fail-always", "description": "Always fails.", "inputSchema": {"type": "object"}}
    ]}]})
}

/// How the test answers a call: `find` with the pages for `q`, anything else an error.
fn answer(call: &Value) -> Value {
    match call["tool"].as_str() {
        Some("find") => {
            json!({"result": {"pages": [format!("{}-1", call["arguments"]["q"].as_str().unwrap_or("?")), "x-2"]}})
        }
        _ => json!({"error": "the upstream said no"}),
    }
}

/// A streamed run that offered tools: its calls as the lines named them, and its last line.
pub struct ToolRun {
    pub calls: Vec<Value>,
    pub last: Value,
    pub run_id: Option<String>,
}

/// Runs `code` at `path` offering the tools, answering each call with `answer` (none
/// when `answer_calls` is false).
pub async fn run_with_tools(
    runner: &Runner,
    path: &str,
    lang: &str,
    code: &str,
    answer_calls: bool,
) -> ToolRun {
    let body = json!({"lang": lang, "code": code, "tools": offer(), "timeoutMs": 20000});
    let mut response = runner.post_streamed(path, &body).await;
    assert_eq!(response.status().as_u16(), 200);
    let (mut calls, mut pending, mut last, mut run_id) =
        (Vec::new(), Vec::new(), Value::Null, None);
    while let Some(bytes) = response.chunk().await.expect("the body") {
        pending.extend_from_slice(&bytes);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let value: Value = serde_json::from_slice(&line[..end]).expect("a JSON line");
            if let Some(call) = value.get("toolCall") {
                let run = call["runId"].as_str().expect("a run id").to_owned();
                if answer_calls {
                    let (status, body) = post_answer(
                        runner,
                        &run,
                        call["id"].as_str().expect("an id"),
                        &answer(call),
                    )
                    .await;
                    assert_eq!(status, 204, "{body}");
                }
                run_id = Some(run);
                calls.push(call.clone());
            } else if value.get("stream").is_none() {
                last = value;
            }
        }
    }
    ToolRun {
        calls,
        last,
        run_id,
    }
}

pub async fn post_answer(runner: &Runner, run: &str, id: &str, body: &Value) -> (u16, String) {
    let response = runner
        .client
        .post(format!("{}/runs/{run}/tool-results/{id}", runner.url))
        .bearer_auth(TOKEN)
        .body(body.to_string())
        .send()
        .await
        .expect("the runner answered");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

pub fn result(run: &ToolRun) -> &Value {
    run.last
        .get("result")
        .unwrap_or_else(|| panic!("a result line: {}", run.last))
}
