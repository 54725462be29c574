//! `--sandbox-agent`: which binary a template's sandboxes execute as their agent. A
//! `sandbox-agent` of the runner's build (smaller, so cheaper to execute), the runner's
//! own binary (`self`), and one of another build, which stops the runner.

mod common;

use common::{stdout, Options, Runner};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The runner under test.
const RUNNER: &str = env!("CARGO_BIN_EXE_sandbox-runner");

/// `sandbox-agent` beside the runner under test, if it is there and of the runner's
/// build (`cargo test --workspace` builds it); else why not, for the skip's message.
fn sibling_agent() -> Result<PathBuf, String> {
    let path = Path::new(RUNNER).with_file_name("sandbox-agent");
    let said = Command::new(&path)
        .arg(sandbox_agent::multicall::BUILD_ARG)
        .output()
        .map_err(|e| {
            format!(
                "{}: {e} (build it: cargo build -p sandbox-agent)",
                path.display()
            )
        })?;
    let build = String::from_utf8_lossy(&said.stdout).trim().to_owned();
    if build != sandbox_agent::BUILD {
        return Err(format!(
            "{} is build {build:?}, the runner {} (rebuild it: cargo build -p sandbox-agent)",
            path.display(),
            sandbox_agent::BUILD
        ));
    }
    Ok(path)
}

/// A runner forking its sandboxes from templates, executing `agent` as their agent.
fn runner_with(agent: &str) -> Runner {
    Runner::with(Options {
        pool_size: 2,
        extra: vec!["--sandbox-agent".into(), agent.into()],
        env: vec![("RUNNER_TEMPLATES".into(), "true".into())],
        ..Default::default()
    })
}

/// The executables of the agents of the sandboxes the runner's templates made.
fn forked_agents(runner: &Runner) -> Vec<PathBuf> {
    common::children_with(runner.pid(), "__sandbox-template")
        .into_iter()
        .flat_map(|template| common::children_with(template, "__sandbox-forked-agent"))
        .filter_map(|agent| std::fs::read_link(format!("/proc/{agent}/exe")).ok())
        .collect()
}

/// Runs a plain program in each kind of template's sandbox (bash's, lean Python's and
/// the data stack's) and checks what each printed.
async fn runs_alike(runner: &Runner) {
    let bash = runner.run("bash", "echo plain $((6 * 7))").await;
    assert_eq!(stdout(&bash), "plain 42\n", "{bash}");
    let python = runner.run("python", "import sys\nprint(sys.argv)").await;
    assert_eq!(stdout(&python), "['/home/sandbox/main.py']\n", "{python}");
    if Path::new(common::PACKAGES_DIR).join("current").exists() {
        let pandas = runner
            .run(
                "python",
                "import pandas as pd\nprint(pd.Series([1, 2, 3]).sum())",
            )
            .await;
        assert_eq!(stdout(&pandas), "6\n", "{pandas}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forked_sandboxes_execute_the_sandbox_agent_of_the_runner_s_build() {
    let agent = match sibling_agent() {
        Ok(agent) => agent,
        Err(why) => {
            eprintln!(
                "SKIPPED forked_sandboxes_execute_the_sandbox_agent_of_the_runner_s_build: {why}"
            );
            return;
        }
    };
    let runner = runner_with(agent.to_str().expect("a UTF-8 path"));
    runs_alike(&runner).await;
    runner.wait_until_full().await;
    let seen = forked_agents(&runner);
    assert!(!seen.is_empty(), "no forked sandbox's agent found");
    for exe in &seen {
        assert_eq!(exe, &agent, "a forked sandbox executed {}", exe.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_makes_them_execute_the_runner_s_own_binary() {
    let runner = runner_with("self");
    runs_alike(&runner).await;
    runner.wait_until_full().await;
    let seen = forked_agents(&runner);
    assert!(!seen.is_empty(), "no forked sandbox's agent found");
    let own = std::fs::canonicalize(RUNNER).expect("the runner's path");
    for exe in &seen {
        assert_eq!(exe, &own, "a forked sandbox executed {}", exe.display());
    }
}

#[test]
fn a_named_agent_that_is_not_of_the_runner_s_build_stops_the_runner() {
    common::require_root();
    let folder = tempfile::tempdir().expect("a folder");
    // Says a build, but another one; and a file others may change, which is never run.
    let other = folder.path().join("other-build");
    std::fs::write(&other, "#!/bin/sh\necho 0123456789abcdef01234567\n").expect("writing");
    let writable = folder.path().join("writable");
    let ran = folder.path().join("ran");
    std::fs::write(&writable, format!("#!/bin/sh\ntouch {}\n", ran.display())).expect("writing");
    set_mode(&other, 0o755);
    set_mode(&writable, 0o777);
    for (agent, said) in [
        (other.as_path(), "0123456789abcdef01234567"),
        (writable.as_path(), "may be changed by others"),
        (Path::new("/bin/true"), "did not say its build"),
        (Path::new("/nonexistent/sandbox-agent"), "No such file"),
    ] {
        let stderr = refused_start(agent);
        assert!(
            stderr.contains("--sandbox-agent") && stderr.contains(said),
            "{}: {stderr}",
            agent.display()
        );
    }
    assert!(!ran.exists(), "the runner ran a binary others may change");
}

/// Starts the runner with `--sandbox-agent agent`, which must exit unsuccessfully
/// within a minute, and returns its standard error.
fn refused_start(agent: &Path) -> String {
    let mut child = Command::new(RUNNER)
        .args(["serve", "--listen", "127.0.0.1:0", "--pool-size", "1"])
        .arg("--sandbox-agent")
        .arg(agent)
        .env("SANDBOX_RUNNER_TOKEN", "t0k3n-for-a-refused-start")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the runner");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "the runner with --sandbox-agent {} did not stop",
                agent.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("reading stderr");
    assert!(
        !status.success(),
        "{}: the runner started: {stderr}",
        agent.display()
    );
    stderr
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}
