//! Where a run's request becomes a [`Job`] for the agent, and its outcome an answer.
//!
//! Every way a program reaches a sandbox, `POST /run`, a session's
//! `POST /sessions/{id}/run` and `sandbox-runner run`, hands its request to
//! [`Jobs::job`], so that a request is checked against the runner's limits, and what it
//! leaves to the runner is filled in, in one place:
//!
//! - the code, within the code cap (the API's; `sandbox-runner run` runs the operator's
//!   own file, whatever its size);
//! - the language, one the runner offers, and its recipe (its row of the table);
//! - the timeout: the request's, from 1 ms to the largest, or the runner's default;
//! - the caps of stdout and stderr, and of the files of `outputs/` an answer carries (the
//!   API's answers carry them; `sandbox-runner run` prints the program's output only);
//! - whether the job is a session's ([`Job::session`]).
//!
//! Not here, each for a reason: a PEP 723 block is read from the job's code and resolved
//! by [`crate::deps`], for the API's runs only (`sandbox-runner run` ignores it), after
//! the runner has checked it is not draining; whether the agent stops a session's
//! processes with SIGSTOP ([`Job::sigstop_between_runs`]) is a fact of the sandbox, which
//! its backend sets; whether the agent streams the job's output ([`Job::stream`]) is
//! whether the caller listens (a streamed answer hands a
//! [`LiveOutput`](crate::live::LiveOutput) down), which the agent channel's exchange sets;
//! and how long the runner waits for the agent's report is the job's
//! [`Job::run_time`] and its backend's grace, which `GET /health` publishes
//! (`limits.answerMarginMs`) so that callers add the same.

use crate::backend::RunOutcome;
use crate::config::{RunnerConfig, SandboxConfig};
use crate::languages::UnknownLanguage;
use sandbox_protocol::agent::{Job, OutputCaps};
use sandbox_protocol::api::{defaults, RunRequest, RunResponse};

/// Where a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A fresh sandbox, destroyed after the job.
    OneShot,
    /// A session's sandbox, which keeps its files and processes for the next job.
    Session,
}

/// Why a request cannot become a job: nothing was started.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The code is over the code cap.
    #[error("code is {bytes} bytes; at most {cap} are accepted")]
    CodeTooLarge {
        /// The code's size.
        bytes: usize,
        /// The cap.
        cap: usize,
    },
    /// The language is not one the runner offers.
    #[error(transparent)]
    Language(#[from] UnknownLanguage),
    /// The timeout is out of range.
    #[error("timeoutMs must be between 1 and {max}, not {asked}")]
    Timeout {
        /// The timeout asked for, ms.
        asked: u64,
        /// The largest timeout, ms.
        max: u64,
    },
}

/// The rules a runner makes jobs by: its limits, its languages, and what its answers
/// carry.
#[derive(Debug, Clone, Copy)]
pub struct Jobs<'a> {
    sandbox: &'a SandboxConfig,
    code_cap_bytes: Option<usize>,
    outputs: Option<OutputCaps>,
}

impl<'a> Jobs<'a> {
    /// The API's (`POST /run`, a session's run): the code cap, and the files of
    /// `outputs/` carried in the answer.
    pub fn api(config: &'a RunnerConfig) -> Self {
        Jobs {
            sandbox: &config.sandbox,
            code_cap_bytes: Some(config.code_cap_bytes),
            outputs: Some(OutputCaps {
                file_cap: defaults::OUTPUT_FILE_CAP_BYTES,
                total_cap: defaults::OUTPUTS_CAP_BYTES,
                max_files: defaults::OUTPUT_FILES_MAX,
            }),
        }
    }

    /// `sandbox-runner run`'s: the operator's own program, whatever its size; its output
    /// is printed, its `outputs/` not collected.
    pub fn command(sandbox: &'a SandboxConfig) -> Self {
        Jobs {
            sandbox,
            code_cap_bytes: None,
            outputs: None,
        }
    }

    /// The job for `request`, to run at `place`: checked (code cap, language, timeout,
    /// in that order) and completed with what the runner decides.
    pub fn job(&self, request: RunRequest, place: Place) -> Result<Job, RequestError> {
        if let Some(cap) = self.code_cap_bytes.filter(|cap| request.code.len() > *cap) {
            return Err(RequestError::CodeTooLarge {
                bytes: request.code.len(),
                cap,
            });
        }
        let language = self.sandbox.languages.get(&request.lang)?;
        Ok(Job {
            lang: language.name().clone(),
            recipe: language.recipe.clone(),
            timeout_ms: self.timeout_ms(request.timeout_ms)?,
            code: request.code,
            stdout_cap: self.sandbox.output_cap_bytes,
            stderr_cap: self.sandbox.output_cap_bytes,
            session: place == Place::Session,
            sigstop_between_runs: false,
            outputs: self.outputs,
            python_paths: Vec::new(),
            stream: false,
            tools: request.tools,
        })
    }

    /// The timeout asked for, if it is in range; the runner's default when none is.
    fn timeout_ms(&self, asked: Option<u64>) -> Result<u64, RequestError> {
        let max = self.sandbox.max_timeout.as_millis() as u64;
        match asked {
            None => Ok(self.sandbox.default_timeout.as_millis() as u64),
            Some(t) if (1..=max).contains(&t) => Ok(t),
            Some(asked) => Err(RequestError::Timeout { asked, max }),
        }
    }
}

/// The API's answer for a job's outcome at `place`: a session's says whether the
/// interpreter's state was lost.
pub fn answer(outcome: RunOutcome, place: Place) -> RunResponse {
    let job = outcome.job;
    RunResponse {
        outputs: job.outputs,
        outputs_truncated: job.outputs_truncated,
        state_lost: (place == Place::Session).then_some(job.state_lost),
        resumed: (place == Place::Session).then_some(outcome.resumed),
        stdout: job.stdout,
        stderr: job.stderr,
        exit_code: job.exit_code,
        duration_ms: job.duration_ms,
        timed_out: job.timed_out,
        compile_error: job.compile_error,
        oom_killed: outcome.oom_killed,
        stdout_truncated: job.stdout_truncated,
        stderr_truncated: job.stderr_truncated,
        egress: outcome.egress,
    }
}

#[cfg(test)]
mod tests;
