use super::*;
use sandbox_protocol::tools::{OfferedServer, OfferedTool};
use serde_json::json;

fn offer() -> ToolsOffer {
    ToolsOffer {
        servers: vec![OfferedServer {
            name: "tracker".into(),
            tools: vec![OfferedTool {
                name: "search".into(),
                description: String::new(),
                input_schema: json!({"type": "object"}),
            }],
        }],
    }
}

fn call(id: &str, tool: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        server: "tracker".into(),
        tool: tool.into(),
        arguments: json!({}),
    }
}

#[tokio::test]
async fn an_admitted_call_is_answered_once_and_its_answer_reaches_the_exchange() {
    let runs = Arc::new(ToolRuns::default());
    let (registered, link) = runs.register(offer()).expect("registered");
    let line = link.admit(call("1", "search")).expect("admitted");
    assert_eq!(line.run_id, registered.run_id());
    assert!(registered.run_id().starts_with("run_"));
    let answer = ToolAnswer {
        result: Some(json!(7)),
        error: None,
    };
    runs.answer(registered.run_id(), "1", answer.clone())
        .expect("passed on");
    assert_eq!(
        runs.answer(registered.run_id(), "1", answer.clone()),
        Err(AnswerError::CallNotFound {
            run: registered.run_id().into(),
            call: "1".into()
        })
    );
    let reply = link.replies().await.recv().await.expect("a reply");
    assert_eq!(reply.tool_result, "1");
    assert_eq!(reply.answer, answer);
    let run_id = registered.run_id().to_owned();
    drop(registered);
    assert!(runs.is_empty());
    assert_eq!(
        runs.answer(&run_id, "2", ToolAnswer::error("x")),
        Err(AnswerError::RunNotFound(run_id))
    );
}

#[tokio::test]
async fn calls_the_offer_does_not_name_or_past_the_bounds_are_answered_at_once() {
    let runs = Arc::new(ToolRuns::default());
    let (_registered, link) = runs.register(offer()).expect("registered");
    assert!(link.admit(call("a", "delete")).is_none());
    assert!(link.admit(call("b", "search")).is_some());
    assert!(
        link.admit(call("b", "search")).is_none(),
        "an id given twice"
    );
    for i in 0..MAX_CALLS_WAITING - 1 {
        assert!(link.admit(call(&format!("w{i}"), "search")).is_some());
    }
    assert!(
        link.admit(call("over", "search")).is_none(),
        "too many waiting"
    );
    let mut replies = link.replies().await;
    let mut refused = Vec::new();
    while let Ok(reply) = replies.try_recv() {
        assert!(reply.answer.error.is_some());
        refused.push(reply.tool_result);
    }
    assert_eq!(refused, ["a", "b", "over"]);
}
