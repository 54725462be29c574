//! The runner's `POST /run` body decoding and validation: any bytes give a job within
//! the limits or a 400/413 error; never a panic.
#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use sandbox_runner::config::{RunnerConfig, ServeArgs};
use sandbox_runner::http::{parse_run, ApiError};
use sandbox_runner::job::Place;
use std::sync::OnceLock;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn config() -> &'static RunnerConfig {
    static CONFIG: OnceLock<RunnerConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Cli::parse_from(["fuzz", "--token", "t", "--code-cap-bytes", "4096"])
            .serve
            .validate()
            .expect("a valid configuration")
    })
}

fuzz_target!(|data: &[u8]| {
    let config = config();
    match parse_run(data, config, Place::OneShot) {
        Ok((job, _grant)) => {
            assert!(job.code.len() <= config.code_cap_bytes);
            let max = config.sandbox.max_timeout.as_millis() as u64;
            assert!((1..=max).contains(&job.timeout_ms));
            assert_eq!(job.stdout_cap, config.sandbox.output_cap_bytes);
        }
        Err(ApiError::BadRequest(message) | ApiError::TooLarge(message)) => {
            assert!(!message.is_empty());
        }
        // A grant the runner's egress policy does not hold (400 `egress_not_allowed`).
        Err(ApiError::EgressNotAllowed(refused)) => assert!(!refused.to_string().is_empty()),
        Err(other) => {
            panic!("input can only be bad, too large or outside the egress policy, not {other:?}")
        }
    }
});
