//! A job's exchange run once on samples while a VM's sandbox waits for its job.
//!
//! Under emulation (QEMU's TCG, where no KVM is usable) a process's code is translated
//! the first time it runs, and a VM's init and agent run their side of a job's exchange
//! once in their lives: the translation was most of what a warm run cost beside its
//! program (the hang-up watch's thread alone took the agent 5-9 ms). Run once here, at
//! the sandbox's preparation, the same code is translated while the pool is at rest.
//! Only the code is shared with a job: the samples are read and written in memory and
//! on a socket pair of their own, and nothing of them stays. With KVM it costs
//! microseconds. Not for: the program's own start (its loader prepares that).

use super::hangup::HangupWatch;
use sandbox_protocol::agent::{AgentMessage, JobOutcome, RunnerMessage};
use sandbox_protocol::frame;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

/// A job as the runner sends one (the fields a run of `print(1)` carries).
const SAMPLE_JOB: &str = r#"{"lang":"python","recipe":{"file":"main.py","run":["python3","{file}"]},
    "code":"print(1)","timeout_ms":10000,"stdout_cap":1048576,"stderr_cap":1048576,
    "outputs":{"fileCap":1048576,"totalCap":4194304,"maxFiles":16}}"#;

/// An answer as the agent gives one.
const SAMPLE_OUTCOME: &str = r#"{"stdout":"1\n","stderr":"","exit_code":0,"signal":null,
    "duration_ms":1,"timed_out":false,"stdout_truncated":false,"stderr_truncated":false,
    "oom_killed":false}"#;

/// Runs the exchange's steps once on the samples: a job's frame read, the hang-up
/// watch started and stopped, an answer's frame written and read back (the init reads
/// the agent's). A step that fails is skipped: the job then pays for it, nothing else.
pub(crate) fn rehearse() {
    if let Ok(job) = serde_json::from_str(SAMPLE_JOB) {
        round_trip(&RunnerMessage::Job(job));
    }
    if let Ok((watched, peer)) = UnixStream::pair() {
        if let Ok(watch) = HangupWatch::start(watched.as_fd()) {
            watch.stop();
        }
        // Closed only after the watch has stopped: a hang-up would end the sandbox.
        drop(peer);
    }
    if let Ok(outcome) = serde_json::from_str::<JobOutcome>(SAMPLE_OUTCOME) {
        round_trip(&AgentMessage::Done(outcome));
    }
}

/// Writes `message` as a frame and reads it back.
fn round_trip<T>(message: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let mut bytes = Vec::new();
    if frame::write(&mut bytes, message).is_ok() {
        let _ = frame::read::<_, T>(&mut bytes.as_slice());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_protocol::agent::Job;

    /// The samples are messages the protocol takes: a rehearsal that read nothing
    /// would translate nothing of a job's path.
    #[test]
    fn the_samples_are_a_job_and_an_answer() {
        let job: Job = serde_json::from_str(SAMPLE_JOB).unwrap();
        assert_eq!(job.code, "print(1)");
        assert!(job.outputs.is_some());
        let outcome: JobOutcome = serde_json::from_str(SAMPLE_OUTCOME).unwrap();
        assert_eq!(outcome.stdout, "1\n");
        rehearse();
    }
}
