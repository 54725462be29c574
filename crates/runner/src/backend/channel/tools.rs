//! The exchange of a job whose program may call tools ([`crate::live::tools`]): while
//! the runner reads the agent's frames (output, calls, the outcome), it writes the
//! answers the run's caller posts, as [`RunnerMessage::ToolReply`] frames, on the same
//! channel. The two go on side by side on the channel's two halves; a frame begun is
//! always written whole, so that a session's channel stays in step (an answer that comes
//! after the outcome is written, and dropped by the agent).

use super::{read_outcome, send, ChannelError};
use crate::live::tools::ToolLink;
use crate::live::LiveOutput;
use sandbox_protocol::agent::{Job, JobOutcome, RunnerMessage};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

/// Sends `job` (streamed, with its tools), then reads its frames until its outcome while
/// writing the answers of `link` to the agent.
pub(super) async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    job: &Job,
    live: &LiveOutput,
    link: &ToolLink,
) -> Result<JobOutcome, ChannelError> {
    let mut replies = link.replies().await;
    let (mut reader, mut writer) = tokio::io::split(s);
    send(&mut writer, &RunnerMessage::Job(job.clone())).await?;
    let (ended, mut end) = oneshot::channel::<()>();
    let read = async move {
        let outcome = read_outcome(&mut reader, job, Some(live), Some(link)).await;
        drop(ended);
        outcome
    };
    let write = async move {
        loop {
            tokio::select! {
                biased;
                _ = &mut end => return Ok(()),
                reply = replies.recv() => match reply {
                    Some(reply) => send(&mut writer, &RunnerMessage::ToolReply(reply)).await?,
                    None => {
                        let _ = (&mut end).await;
                        return Ok(());
                    }
                },
            }
        }
    };
    let (outcome, written): (_, Result<(), ChannelError>) = tokio::join!(read, write);
    if let (Ok(_), Err(e)) = (&outcome, written) {
        tracing::warn!(error = %e, "writing a tool call's answer to the agent failed");
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::super::run_job;
    use crate::live::tools::ToolRuns;
    use crate::live::{channel_with_tools, Event};
    use sandbox_protocol::agent::{AgentMessage, Job, JobOutcome, RunnerMessage};
    use sandbox_protocol::frame;
    use sandbox_protocol::tools::{
        OfferedServer, OfferedTool, ToolAnswer, ToolCall, ToolReply, ToolsOffer,
    };
    use sandbox_protocol::Lang;
    use serde_json::json;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    fn offer() -> ToolsOffer {
        ToolsOffer {
            servers: vec![OfferedServer {
                name: "docs".into(),
                tools: vec![OfferedTool {
                    name: "find".into(),
                    description: String::new(),
                    input_schema: json!({}),
                }],
            }],
        }
    }

    fn call(id: &str, tool: &str) -> AgentMessage {
        AgentMessage::ToolCall(ToolCall {
            id: id.into(),
            server: "docs".into(),
            tool: tool.into(),
            arguments: json!({"q": id}),
        })
    }

    async fn write<S: AsyncWrite + Unpin>(s: &mut S, message: &AgentMessage) {
        let bytes = frame::encode(message).expect("encodes");
        s.write_all(&bytes).await.expect("written");
    }

    async fn read<S: AsyncRead + Unpin>(s: &mut S) -> RunnerMessage {
        let mut header = [0u8; 4];
        s.read_exact(&mut header).await.expect("a header");
        let mut payload = vec![0u8; frame::payload_len(header).expect("a length")];
        s.read_exact(&mut payload).await.expect("a payload");
        frame::decode(&payload).expect("a message")
    }

    /// The runner's exchange against an agent played here: a call not offered is
    /// answered by the runner at once; an offered one goes to the caller, whose answer
    /// comes back to the agent while the job still runs; then the outcome.
    #[tokio::test]
    async fn calls_go_to_the_caller_and_answers_back_to_the_agent_while_the_job_runs() {
        let runs = Arc::new(ToolRuns::default());
        let (registered, link) = runs.register(offer()).expect("registered");
        let (live, mut events) = channel_with_tools(link);
        let (mut runner_end, mut agent_end) = tokio::io::duplex(1 << 16);
        let job = Job {
            tools: Some(offer()),
            ..crate::pool::tests::job(Lang::PYTHON)
        };
        let agent = tokio::spawn(async move {
            let RunnerMessage::Job(job) = read(&mut agent_end).await else {
                panic!("a job");
            };
            assert!(job.stream && job.tools.is_some());
            write(&mut agent_end, &call("1", "drop_tables")).await;
            let RunnerMessage::ToolReply(refused) = read(&mut agent_end).await else {
                panic!("a reply");
            };
            write(&mut agent_end, &call("2", "find")).await;
            let RunnerMessage::ToolReply(answered) = read(&mut agent_end).await else {
                panic!("a reply");
            };
            let outcome: JobOutcome = serde_json::from_value(json!({
                "stdout": "done", "stderr": "", "exit_code": 0, "signal": null,
                "duration_ms": 1, "timed_out": false, "stdout_truncated": false,
                "stderr_truncated": false
            }))
            .expect("an outcome");
            write(&mut agent_end, &AgentMessage::Done(outcome)).await;
            (refused, answered)
        });
        let caller = {
            let runs = runs.clone();
            let run_id = registered.run_id().to_owned();
            tokio::spawn(async move {
                let Some(Event::ToolCall(line)) = events.recv().await else {
                    panic!("a call");
                };
                assert_eq!(
                    (line.run_id.as_str(), line.call.id.as_str()),
                    (run_id.as_str(), "2")
                );
                let answer = ToolAnswer {
                    result: Some(json!({"hits": 3})),
                    error: None,
                };
                runs.answer(&line.run_id, "2", answer).expect("passed on");
            })
        };
        let outcome = run_job(&mut runner_end, &job, Duration::from_secs(5), Some(&live))
            .await
            .expect("an outcome");
        assert_eq!(outcome.stdout, "done");
        caller.await.expect("the caller");
        let (refused, answered): (ToolReply, ToolReply) = agent.await.expect("the agent");
        assert_eq!(refused.tool_result, "1");
        assert!(refused
            .answer
            .error
            .expect("an error")
            .contains("not offered"));
        assert_eq!(answered.tool_result, "2");
        assert_eq!(answered.answer.result, Some(json!({"hits": 3})));
    }
}
