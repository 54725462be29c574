//! The real package registry end to end: a runner on the host's network opens the Python
//! package index's names (read from pip itself: the index and its file storage), a
//! session granted them `pip install`s a small pure-Python package (over TLS through the
//! proxy, verified with the host's CA certificates) that imports in the next run; narrowed
//! to none with PATCH, the session's next install fails with the proxy's 403 as pip prints
//! it.
//!
//! The host must reach the registry first, tried the same way (pip, a short timeout, no
//! cache and no local wheels); where it cannot, the test skips, saying why. Where it can,
//! any failure inside the sandbox fails the test.

use crate::common::{stdout, Options, Runner};
use crate::{block_on, can_run};
use serde_json::{json, Value};
use std::process::{Command, Output};

/// A small pure-Python package outside the base package set (a wheel of about 10 kB, no
/// dependencies), installed while the session is granted the registry.
const PACKAGE: &str = "inflection";
/// Another such package, asked for after the session is narrowed to none.
const SECOND: &str = "iso8601";

/// pip's own names for the index and its file storage, one a line.
const INDEX_HOSTS: &str =
    "from pip._internal.models.index import PyPI; print(PyPI.netloc); print(PyPI.file_storage_domain)";

/// What pip must not take from its environment, on the host as in the sandbox: a local
/// wheel folder or another index would install without the registry.
const PIP_LOCAL: [&str; 4] = [
    "PIP_FIND_LINKS",
    "PIP_NO_INDEX",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
];

/// The session's folder the packages go to (its home, which lasts between runs).
const TARGET: &str = "$HOME/packages";

/// Every run here may wait on the registry this long (ms).
const RUN_TIMEOUT_MS: u64 = 90_000;

#[test]
fn pip_installs_from_the_real_registry_until_the_session_is_narrowed() {
    let test = "egress (the real registry)";
    if !can_run(test) {
        return;
    }
    let hosts = match registry_hosts().and_then(|hosts| reachable(&hosts).map(|()| hosts)) {
        Ok(hosts) => hosts,
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            return;
        }
    };
    let data = tempfile::tempdir().expect("a data folder");
    let runner = Runner::with(Options {
        pool_size: 1,
        env: vec![
            ("RUNNER_EGRESS_ALLOW".to_owned(), hosts.join(",")),
            (
                "RUNNER_DATA_DIR".to_owned(),
                data.path().display().to_string(),
            ),
        ],
        ..Options::default()
    });
    block_on(install_then_lock(&runner, &hosts));
}

/// The index's host names as the host's pip knows them.
fn registry_hosts() -> Result<Vec<String>, String> {
    let out = host_python(&["-c", INDEX_HOSTS], &[])?;
    if !out.status.success() {
        return Err(format!(
            "the host's python3 has no pip: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let hosts: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(hosts.len(), 2, "pip named {hosts:?}");
    Ok(hosts)
}

/// Whether the host downloads both packages from the registry (pip, no cache, nothing
/// local, a short timeout and no retry).
fn reachable(hosts: &[String]) -> Result<(), String> {
    let folder = tempfile::tempdir().map_err(|e| format!("a download folder: {e}"))?;
    let dest = folder.path().display().to_string();
    let download = [
        "-m",
        "pip",
        "download",
        "--no-cache-dir",
        "--no-deps",
        "--timeout",
        "10",
        "--retries",
        "0",
        "--dest",
        &dest,
        PACKAGE,
        SECOND,
    ];
    let out = host_python(&download, &PIP_LOCAL)?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "the host does not reach the package registry ({}): {}",
        hosts.join(", "),
        String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr)
    ))
}

/// The host's `python3` with `args`, for at most a minute (coreutils' `timeout`): its
/// output.
fn host_python(args: &[&str], unset: &[&str]) -> Result<Output, String> {
    let mut command = Command::new("timeout");
    command.args(["60", "python3"]).args(args);
    for name in unset {
        command.env_remove(name);
    }
    command.output().map_err(|e| format!("python3: {e}"))
}

/// Installs [`PACKAGE`] in a session granted `hosts`, imports it in the next run, narrows
/// the session to none and sees the next install refused with the proxy's 403.
async fn install_then_lock(runner: &Runner, hosts: &[String]) {
    let id = runner.open_session(json!({ "egress": hosts })).await;
    let import = format!(
        "import os, sys\nsys.path.insert(0, os.path.expandvars('{TARGET}'))\n\
         import {PACKAGE}\nprint({PACKAGE}.camelize('egress_by_policy'))"
    );
    installs_and_imports(runner, &id, hosts, &import).await;
    let path = format!("/sessions/{id}");
    let (status, narrowed) = runner
        .request("PATCH", &path, Some(&json!({"egress": []})))
        .await;
    assert_eq!(status, 200, "{narrowed}");
    install_refused(runner, &id).await;
    let still = run(runner, &id, "python", &import).await;
    assert_eq!(stdout(&still), "EgressByPolicy\n", "{still}");
    let (status, _) = runner.request("DELETE", &path, None).await;
    assert_eq!(status, 204);
}

/// [`PACKAGE`] installed through the proxy (a connection to the index and to its files at
/// least, counted in the answer and in /metrics), then `import` run.
async fn installs_and_imports(runner: &Runner, id: &str, hosts: &[String], import: &str) {
    let installed = run(runner, id, "bash", &install(PACKAGE)).await;
    let out = stdout(&installed);
    assert!(out.ends_with("exit=0\n"), "pip install failed: {installed}");
    assert!(
        out.contains(&format!("Successfully installed {PACKAGE}")),
        "{installed}"
    );
    let usage = &installed["egress"];
    assert!(
        usage["connections"].as_u64().unwrap_or(0) >= 2,
        "the index and its files, through the proxy: {installed}"
    );
    assert!(
        usage["bytesIn"].as_u64().unwrap_or(0) > 5_000,
        "{installed}"
    );
    let imported = run(runner, id, "python", import).await;
    assert_eq!(stdout(&imported), "EgressByPolicy\n", "{imported}");
    let (_, metrics) = runner.get("/metrics").await;
    for host in hosts {
        assert!(
            metrics.contains(host.as_str()),
            "{host} in /metrics:\n{metrics}"
        );
    }
}

/// [`SECOND`]'s install fails, pip printing the proxy's 403.
async fn install_refused(runner: &Runner, id: &str) {
    let refused = run(runner, id, "bash", &install(SECOND)).await;
    let out = stdout(&refused);
    assert!(
        !out.ends_with("exit=0\n"),
        "installed after the lock: {refused}"
    );
    assert!(
        out.contains("Tunnel connection failed: 403 Forbidden"),
        "pip shows the proxy's 403: {refused}"
    );
    assert!(
        refused["egress"]["refused"].as_u64().unwrap_or(0) >= 1,
        "{refused}"
    );
}

/// `pip install` of `package` into [`TARGET`], with no cache and nothing local; its
/// output (both streams) then `exit=<status>`.
fn install(package: &str) -> String {
    format!(
        "unset {local}; python3 -m pip install --no-cache-dir --disable-pip-version-check \
         --timeout 20 --retries 1 --target \"{TARGET}\" {package} 2>&1; echo \"exit=$?\"",
        local = PIP_LOCAL.join(" ")
    )
}

/// A run in session `id` that must answer 200, with time for the registry.
async fn run(runner: &Runner, id: &str, lang: &str, code: &str) -> Value {
    let body = json!({"lang": lang, "code": code, "timeoutMs": RUN_TIMEOUT_MS});
    let (status, out) = runner
        .request("POST", &format!("/sessions/{id}/run"), Some(&body))
        .await;
    assert_eq!(status, 200, "{out}");
    out
}
