//! One job relayed between the runner and the jailed sandbox's agent, while it runs:
//! the agent's [`Output`](AgentMessage::Output) and [`ToolCall`](AgentMessage::ToolCall)
//! frames go up to the runner as they come (through the job's [`LiveOutput`], the
//! runner's channel), the runner's [`ToolReply`](RunnerMessage::ToolReply) frames down
//! to the agent, until the agent's answer (Done, Failed, or anything else, which the
//! caller judges). The init polls both channels and reads a frame from whichever is
//! readable, on its one thread; the agent bounds the job's time, and the hang-up watch
//! of the init's exchange ends the VM if the runner goes away.

use crate::agent::LiveOutput;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sandbox_protocol::agent::{decode_bytes, AgentMessage, Job, RunnerMessage};
use sandbox_protocol::frame;
use sandbox_protocol::tools::{ToolAnswer, ToolReply};
use std::io::{Read, Write};
use std::os::fd::AsFd;

/// Sends `job` to the agent on `agent` and relays its frames (see the module) until its
/// answer; why not, when a channel fails.
pub(super) fn relay_job<C: Read + Write + AsFd>(
    agent: &mut C,
    job: &Job,
    live: &mut dyn LiveOutput,
) -> Result<AgentMessage, String> {
    send(agent, &RunnerMessage::Job(job.clone()))?;
    loop {
        let (from_agent, from_runner) = wait(agent, live)?;
        if from_runner {
            if let Some(reply) = live.reply() {
                send(agent, &RunnerMessage::ToolReply(reply))?;
            }
        }
        if !from_agent {
            continue;
        }
        match frame::read::<_, AgentMessage>(agent) {
            Ok(Some(AgentMessage::Output { stream, data })) => {
                // The agent's frames are well formed; one that is not carries nothing.
                if let Ok(bytes) = decode_bytes(&data) {
                    live.output(stream, &bytes);
                }
            }
            Ok(Some(AgentMessage::ToolCall(call))) => {
                if !live.call(&call) {
                    let refused = ToolReply {
                        tool_result: call.id,
                        answer: ToolAnswer::error("tools: the runner takes no calls now"),
                    };
                    send(agent, &RunnerMessage::ToolReply(refused))?;
                }
            }
            Ok(Some(answer)) => return Ok(answer),
            Ok(None) => return Err("the sandbox's agent ended without answering".into()),
            Err(e) => return Err(format!("reading the sandbox's agent: {e}")),
        }
    }
}

/// Waits until the agent's channel, or the runner's (where an answer may come), is
/// readable: which.
fn wait<C: AsFd>(agent: &C, live: &dyn LiveOutput) -> Result<(bool, bool), String> {
    let mut fds = vec![PollFd::new(agent.as_fd(), PollFlags::POLLIN)];
    if let Some(runner) = live.replies() {
        fds.push(PollFd::new(runner, PollFlags::POLLIN));
    }
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("waiting for the sandbox's agent: {e}")),
        }
    }
    let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
    Ok((ready(&fds[0]), fds.get(1).is_some_and(ready)))
}

fn send<C: Write>(agent: &mut C, message: &RunnerMessage) -> Result<(), String> {
    frame::write(agent, message).map_err(|e| format!("writing to the sandbox's agent: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::live::OutputFrames;
    use sandbox_protocol::agent::{encode_bytes, JobOutcome};
    use sandbox_protocol::process::Stream;
    use sandbox_protocol::tools::ToolCall;
    use serde_json::json;
    use std::os::unix::net::UnixStream;

    fn job() -> Job {
        serde_json::from_value(json!({
            "lang": "python",
            "recipe": {"file": "main.py", "run": ["python3", "{file}"]},
            "code": "import tools",
            "timeout_ms": 1000,
            "stdout_cap": 100,
            "stderr_cap": 100,
            "stream": true
        }))
        .unwrap()
    }

    fn outcome() -> JobOutcome {
        serde_json::from_value(json!({
            "stdout": "done", "stderr": "", "exit_code": 0, "signal": null,
            "duration_ms": 1, "timed_out": false, "stdout_truncated": false,
            "stderr_truncated": false, "oom_killed": null
        }))
        .unwrap()
    }

    /// The init between a runner and an agent, both played by the test: output and a
    /// call go up, the call's answer down, the agent's answer comes back.
    #[test]
    fn output_and_calls_go_up_and_answers_down_until_the_agent_answers() {
        let (mut init_to_agent, mut agent) = UnixStream::pair().unwrap();
        let (mut init_to_runner, mut runner) = UnixStream::pair().unwrap();
        let init = std::thread::spawn(move || {
            let mut live = OutputFrames::new(&mut init_to_runner);
            relay_job(&mut init_to_agent, &job(), &mut live)
        });
        let got: RunnerMessage = frame::read(&mut agent).unwrap().unwrap();
        assert!(matches!(got, RunnerMessage::Job(j) if j.code == "import tools"));
        let output = AgentMessage::Output {
            stream: Stream::Stdout,
            data: encode_bytes(b"first\n"),
        };
        let call = ToolCall {
            id: "1-1".into(),
            server: "tracker".into(),
            tool: "search".into(),
            arguments: json!({"query": "crash"}),
        };
        frame::write(&mut agent, &output).unwrap();
        frame::write(&mut agent, &AgentMessage::ToolCall(call.clone())).unwrap();
        let up: AgentMessage = frame::read(&mut runner).unwrap().unwrap();
        assert_eq!(up, output);
        let up: AgentMessage = frame::read(&mut runner).unwrap().unwrap();
        assert_eq!(up, AgentMessage::ToolCall(call));
        let reply = ToolReply {
            tool_result: "1-1".into(),
            answer: ToolAnswer {
                result: Some(json!({"issues": 3})),
                error: None,
            },
        };
        frame::write(&mut runner, &RunnerMessage::ToolReply(reply.clone())).unwrap();
        let down: RunnerMessage = frame::read(&mut agent).unwrap().unwrap();
        assert_eq!(down, RunnerMessage::ToolReply(reply));
        frame::write(&mut agent, &AgentMessage::Done(outcome())).unwrap();
        let answer = init.join().unwrap().unwrap();
        assert_eq!(answer, AgentMessage::Done(outcome()));
    }

    /// A call made where the runner's side takes none is refused to the agent at once.
    #[test]
    fn a_call_the_runner_cannot_take_is_refused_to_the_agent() {
        let (mut init_to_agent, mut agent) = UnixStream::pair().unwrap();
        let init = std::thread::spawn(move || {
            relay_job(&mut init_to_agent, &job(), &mut crate::agent::Unstreamed)
        });
        let _job: RunnerMessage = frame::read(&mut agent).unwrap().unwrap();
        let call = ToolCall {
            id: "1-1".into(),
            server: "tracker".into(),
            tool: "search".into(),
            arguments: json!({}),
        };
        frame::write(&mut agent, &AgentMessage::ToolCall(call)).unwrap();
        let down: RunnerMessage = frame::read(&mut agent).unwrap().unwrap();
        let RunnerMessage::ToolReply(refused) = down else {
            panic!("a refusal, got {down:?}");
        };
        assert_eq!(refused.tool_result, "1-1");
        assert!(refused.answer.error.is_some());
        drop(agent);
        assert!(
            init.join().unwrap().is_err(),
            "the agent ended without answering"
        );
    }
}
