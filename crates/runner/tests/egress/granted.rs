//! A granted host reached from curl, Python's urllib and pip (against the test's index),
//! from a sandbox forked from a template and from one made by a jail.

use crate::common::{stdout, Runner};
use crate::refusals::everything_else_is_refused;
use crate::{in_test_net, run_bash, runner_in, runner_with, ALLOWED, OTHER, PAGE};
use serde_json::json;

#[test]
fn a_granted_host_works_from_curl_python_and_pip_and_nothing_else_leaves() {
    in_test_net(
        "a",
        |net| runner_in(net, ALLOWED),
        |runner, site| async move {
            let health = runner.health().await;
            assert_eq!(health["limits"]["network"], true, "{health}");
            assert_eq!(
                health["limits"]["networkHosts"],
                json!([ALLOWED]),
                "{health}"
            );
            granted_host_works(&runner).await;
            everything_else_is_refused(&runner, &site.ip).await;
            let (status, refused) = runner
                .post(&json!({"lang": "bash", "code": "true", "egress": [OTHER]}))
                .await;
            assert_eq!(status, 400, "{refused}");
            assert_eq!(refused["error"]["code"], "egress_not_allowed", "{refused}");
            assert!(refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains(OTHER));
            let (_, metrics) = runner.get("/metrics").await;
            assert!(
                metrics.contains(ALLOWED),
                "/metrics names no host:\n{metrics}"
            );
        },
    );
}

/// curl, urllib and pip reach the granted host; the run's answer counts it.
async fn granted_host_works(runner: &Runner) {
    let curl = run_bash(
        runner,
        &format!("curl -sS -m 10 http://{ALLOWED}/"),
        json!([ALLOWED]),
    )
    .await;
    assert_eq!(stdout(&curl), PAGE, "{curl}");
    let usage = &curl["egress"];
    assert_eq!(usage["connections"], 1, "{curl}");
    assert!(
        usage["bytesIn"].as_u64().unwrap() > PAGE.len() as u64,
        "{curl}"
    );
    assert!(usage["bytesOut"].as_u64().unwrap() > 0, "{curl}");
    let python = format!(
        "import urllib.request\nprint(urllib.request.urlopen('http://{ALLOWED}/', timeout=10).read().decode())"
    );
    let (status, out) = runner
        .post(&json!({"lang": "python", "code": python, "egress": [ALLOWED]}))
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(stdout(&out).trim(), PAGE, "{out}");
    let pip = format!(
        "python3 -m pip install -q --no-cache-dir --disable-pip-version-check --target /tmp/t \
         --index-url http://{ALLOWED}/simple/ --trusted-host {ALLOWED} tinypkg 2>&1 && \
         PYTHONPATH=/tmp/t python3 -c 'import tinypkg; print(tinypkg.VALUE)'"
    );
    let pip = run_bash(runner, &pip, json!([ALLOWED])).await;
    assert_eq!(stdout(&pip).trim(), "42", "{pip}");
    let certs = run_bash(
        runner,
        "python3 -c 'import ssl; print(len(ssl.create_default_context().get_ca_certs()) > 0)'; \
         test -e /etc/ssl/private && echo private shown; true",
        json!([ALLOWED]),
    )
    .await;
    assert_eq!(
        stdout(&certs).trim(),
        "True",
        "the host's CA certificates: {certs}"
    );
    let quiet = run_bash(runner, "echo nothing", json!([ALLOWED])).await;
    assert!(
        quiet.get("egress").is_none(),
        "a run without traffic: {quiet}"
    );
}

#[test]
fn a_sandbox_made_by_a_jail_reaches_the_proxy_too() {
    in_test_net(
        "j",
        |net| runner_with(net, ALLOWED, false),
        |runner, _site| async move {
            let fetch = format!("curl -sS -m 10 http://{ALLOWED}/");
            for lang_code in [
                ("bash", fetch.clone()),
                (
                    "python",
                    format!("import urllib.request\nprint(urllib.request.urlopen('http://{ALLOWED}/', timeout=10).read().decode(), end='')"),
                ),
            ] {
                let (lang, code) = lang_code;
                let body = json!({"lang": lang, "code": code, "egress": [ALLOWED]});
                let (status, out) = runner.post(&body).await;
                assert_eq!(status, 200, "{out}");
                assert_eq!(stdout(&out), PAGE, "{lang}: {out}");
            }
        },
    );
}
