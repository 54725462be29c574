//! The run tools follow the runner's language table: a runner that stops offering a
//! language, or starts, is picked up by a running sandbox-mcp without a restart.
//!
//! Needs the runner binary (built beside these tests, or SANDBOX_RUNNER_BIN) and root.

mod common;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{run_tools, runner_bin, start_mcp, Server};
use test_support::Service;

/// Longer than sandbox-mcp's refresh of the runner's offer (10 s).
const PICKUP: Duration = Duration::from_secs(25);

/// A runner on `port` with `token`, whose languages file is `languages`.
fn runner_on(port: u16, token: &str, languages: &std::path::Path) -> Service {
    let mut command = Command::new(runner_bin());
    command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--token", token, "--pool-size", "1"])
        .env("RUNNER_LANGUAGES", languages)
        .env("RUST_LOG", "warn");
    Service::start(
        command,
        "sandbox-runner listening on ",
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until the listed run tools satisfy `wanted`.
async fn until_tools(server: &Server, wanted: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + PICKUP;
    loop {
        let tools = run_tools(server).await;
        if wanted(&tools) || Instant::now() > deadline {
            return tools;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn the_tools_follow_the_runners_languages() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let token = format!("languages-{}", std::process::id());
    let mut without_java = tempfile::NamedTempFile::new().expect("temp file");
    without_java
        .write_all(b"remove = [\"java\", \"go\"]\n")
        .expect("written");
    let empty = tempfile::NamedTempFile::new().expect("temp file");

    let runner = runner_on(port, &token, without_java.path());
    let url = format!("http://127.0.0.1:{port}");
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", token.as_str()),
    ]);
    let tools = until_tools(&server, |t| t.iter().any(|n| n == "run_c")).await;
    assert!(tools.contains(&"run_c".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"run_java".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"run_go".to_owned()), "{tools:?}");

    // The runner is replaced by one that offers every built-in language.
    drop(runner);
    let _runner = runner_on(port, &token, empty.path());
    let tools = until_tools(&server, |t| t.iter().any(|n| n == "run_java")).await;
    for name in ["run_java", "run_go", "run_c", "run_bash"] {
        assert!(
            tools.contains(&name.to_owned()),
            "{name} missing: {tools:?}"
        );
    }
}
