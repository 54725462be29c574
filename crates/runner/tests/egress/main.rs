//! The network by operator policy (issue 33), end to end on the process backend: a real
//! runner in a network namespace of the test's own, whose hosts file names the test's
//! hosts, and a web server in another namespace (`net.rs`).
//!
//! From a sandbox: the granted name works from curl, Python's urllib and pip, also in a
//! sandbox made by a jail (`granted.rs`); another name gets the proxy's 403 naming it; an
//! IP literal is refused; UDP and raw DNS find no route; the sandbox still has loopback
//! only; with egress off nothing changes (`refusals.rs`). TLS goes through CONNECT and a
//! ClientHello naming another host is closed (`tls.rs`). A session narrowed with PATCH
//! loses its host, a paused or forked one keeps it, and its bytes are capped over its life
//! (`sessions.rs`). Needs root (network namespaces), iproute2, util-linux (`unshare`) and
//! the host's Python with pip. Every namespace and process is removed at the end, also on
//! failure.
//!
//! One test leaves the test's network: `registry.rs` installs a package from the real
//! Python package registry through a runner on the host's network, then sees the install
//! refused once its session is narrowed; it skips, saying why, where the host does not
//! reach the registry.

#[path = "../common/mod.rs"]
mod common;

mod granted;
mod net;
mod refusals;
mod registry;
mod sessions;
mod tls;

use common::{Options, Runner};
use net::{Net, Site};
use serde_json::{json, Value};

/// The name the runner opens to its sandboxes, and one it does not.
const ALLOWED: &str = "allowed.test";
const OTHER: &str = "other.test";
/// What the test's web server answers at `/`.
const PAGE: &str = "hello from the allowed host";

/// The size of the web server's `/big.bin`.
const BIG: usize = 150_000;

/// Whether this host can run these tests: root, the runner's own battery (not the
/// rootless one, whose runner refuses egress), and the tools.
fn can_run(test: &str) -> bool {
    if !nix::unistd::geteuid().is_root() || common::test_uid().is_some() {
        eprintln!("SKIPPED {test}: needs a root runner (network namespaces)");
        return false;
    }
    true
}

/// A runner in `net`'s namespace that opens `allow`.
fn runner_in(net: &Net, allow: &str) -> Runner {
    runner_with(net, allow, true)
}

/// [`runner_in`], its sandboxes forked from templates or not (each made by a jail).
fn runner_with(net: &Net, allow: &str, templates: bool) -> Runner {
    runner_env(net, allow, &[("RUNNER_TEMPLATES", &templates.to_string())])
}

/// [`runner_in`] with more variables.
fn runner_env(net: &Net, allow: &str, more: &[(&str, &str)]) -> Runner {
    // Its own data folder: the sessions it pauses at its stop go with the test's files.
    let data = net.dir.join("data").display().to_string();
    let mut env = vec![
        ("RUNNER_EGRESS_ALLOW".to_owned(), allow.to_owned()),
        ("RUNNER_DATA_DIR".to_owned(), data),
    ];
    env.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Runner::with(Options {
        pool_size: 2,
        env,
        wrapper: net.wrapper(),
        ..Options::default()
    })
}

/// Runs `test` with the runner `make` starts in a test network of its own (`tag` names
/// its namespaces and links), on a thread in the runner's namespace, and the web server's
/// address; skips, saying why, where it cannot run.
fn in_test_net<Fut: std::future::Future<Output = ()>>(
    tag: &str,
    make: impl FnOnce(&Net) -> Runner + Send,
    test: impl FnOnce(Runner, Site) -> Fut + Send,
) {
    if !can_run(&format!("egress ({tag})")) {
        return;
    }
    let net = Net::new(tag);
    net.wait_for_server();
    let site = net.site();
    net.within(|| block_on(test(make(&net), site)));
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}

/// POST /run of a bash program with `egress`: its 200 answer.
async fn run_bash(runner: &Runner, code: &str, egress: Value) -> Value {
    let (status, out) = runner
        .post(&json!({"lang": "bash", "code": code, "egress": egress}))
        .await;
    assert_eq!(status, 200, "{out}");
    out
}
