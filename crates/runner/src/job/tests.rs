//! Requests become jobs by the runner's rules, without root or a sandbox.

use super::*;
use crate::config::ServeArgs;
use clap::Parser;
use sandbox_protocol::agent::JobOutcome;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// A runner's configuration: a 100-byte code cap, a 2 s default timeout, 9 s at most,
/// 4 KiB of output.
fn config() -> RunnerConfig {
    let argv = [
        "sandbox-runner",
        "--token",
        "t",
        "--code-cap-bytes",
        "100",
        "--default-timeout-ms",
        "2000",
        "--max-timeout-ms",
        "9000",
        "--output-cap-bytes",
        "4096",
    ];
    Cli::parse_from(argv).serve.validate().expect("config")
}

fn request(lang: &str, code: &str, timeout_ms: Option<u64>) -> RunRequest {
    RunRequest {
        lang: lang.into(),
        code: code.into(),
        timeout_ms,
        tools: None,
        egress: None,
    }
}

#[test]
fn a_request_gets_what_it_leaves_to_the_runner() {
    let config = config();
    let job = Jobs::api(&config)
        .job(request("python", "print(1)", None), Place::OneShot)
        .expect("a job");
    let python = config.sandbox.languages.get("python").expect("python");
    assert_eq!(job.lang, *python.name());
    assert_eq!(job.recipe, python.recipe);
    assert_eq!(job.code, "print(1)");
    assert_eq!(job.timeout_ms, 2000, "the runner's default");
    assert_eq!((job.stdout_cap, job.stderr_cap), (4096, 4096));
    let outputs = job.outputs.expect("the API's answers carry outputs/");
    assert_eq!(outputs.file_cap, defaults::OUTPUT_FILE_CAP_BYTES);
    assert_eq!(outputs.total_cap, defaults::OUTPUTS_CAP_BYTES);
    assert_eq!(outputs.max_files, defaults::OUTPUT_FILES_MAX);
    assert!(!job.session && !job.sigstop_between_runs);
    assert!(job.python_paths.is_empty());
}

#[test]
fn a_sessions_job_is_marked_as_one() {
    let config = config();
    let jobs = Jobs::api(&config);
    let job = jobs
        .job(request("bash", "x=1", Some(500)), Place::Session)
        .expect("a job");
    assert!(job.session);
    assert_eq!(job.timeout_ms, 500);
    assert!(
        !job.sigstop_between_runs,
        "the backend says whether its sandbox has a freezer"
    );
}

#[test]
fn the_run_subcommand_has_no_code_cap_and_collects_no_outputs() {
    let config = config();
    let code = "#".repeat(1000);
    let job = Jobs::command(&config.sandbox)
        .job(request("bash", &code, None), Place::OneShot)
        .expect("a job");
    assert_eq!(job.code.len(), 1000);
    assert_eq!(job.outputs, None);
    let refused = Jobs::api(&config).job(request("bash", &code, None), Place::OneShot);
    assert!(
        matches!(
            refused,
            Err(RequestError::CodeTooLarge {
                bytes: 1000,
                cap: 100
            })
        ),
        "{refused:?}"
    );
}

#[test]
fn refusals_come_in_order_code_then_language_then_timeout() {
    let config = config();
    let jobs = Jobs::api(&config);
    let big = "x".repeat(101);
    let refused = |lang: &str, code: &str, timeout| {
        jobs.job(request(lang, code, timeout), Place::OneShot)
            .expect_err("refused")
    };
    assert!(matches!(
        refused("klingon", &big, Some(0)),
        RequestError::CodeTooLarge { .. }
    ));
    let unknown = refused("klingon", "x", Some(0));
    assert!(matches!(unknown, RequestError::Language(_)), "{unknown:?}");
    assert!(
        unknown.to_string().contains("python"),
        "names the offered: {unknown}"
    );
    for timeout in [0, 9001, u64::MAX] {
        match refused("bash", "x", Some(timeout)) {
            RequestError::Timeout { asked, max } => assert_eq!((asked, max), (timeout, 9000)),
            other => panic!("{timeout}: {other:?}"),
        }
    }
    for timeout in [1, 9000] {
        let job = jobs.job(request("bash", "x", Some(timeout)), Place::OneShot);
        assert_eq!(job.map(|j| j.timeout_ms).ok(), Some(timeout));
    }
    let exactly_the_cap = "x".repeat(100);
    assert!(jobs
        .job(request("bash", &exactly_the_cap, None), Place::OneShot)
        .is_ok());
}

#[test]
fn only_a_sessions_answer_says_whether_its_state_was_lost() {
    let outcome = RunOutcome {
        job: JobOutcome {
            stdout: "out".into(),
            stderr: "err".into(),
            exit_code: 137,
            signal: Some(9),
            duration_ms: 12,
            timed_out: true,
            compile_error: false,
            stdout_truncated: false,
            stderr_truncated: true,
            oom_killed: Some(false),
            outputs: Vec::new(),
            outputs_truncated: false,
            state_lost: true,
            processes_running: 0,
        },
        oom_killed: true,
        resumed: false,
        egress: None,
    };
    let one_shot = answer(outcome.clone(), Place::OneShot);
    assert_eq!(one_shot.state_lost, None);
    assert!(one_shot.oom_killed, "the host's word on the OOM killer");
    assert_eq!(
        (
            one_shot.exit_code,
            one_shot.timed_out,
            one_shot.stderr_truncated
        ),
        (137, true, true)
    );
    assert_eq!(answer(outcome, Place::Session).state_lost, Some(true));
}
