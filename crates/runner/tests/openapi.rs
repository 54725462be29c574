//! `GET /openapi.json` of a real runner: served without a token, a valid OpenAPI 3.1
//! document by a real validator (PyPI's `openapi-spec-validator`, which the README's test
//! command installs), and every operation it describes is one the runner routes.

mod common;

use common::{Runner, TOKEN};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The validator: `OPENAPI_SPEC_VALIDATOR` (which must then exist), else the one
/// scripts/test installs in `target/tmp/openapi-venv`; `None` when neither is there.
fn validator() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("OPENAPI_SPEC_VALIDATOR") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "OPENAPI_SPEC_VALIDATOR={} is not a file",
            path.display()
        );
        return Some(path);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/tmp/openapi-venv/bin/openapi-spec-validator");
    venv.is_file().then_some(venv)
}

/// The served document.
async fn served(runner: &Runner) -> Value {
    let url = format!("{}/openapi.json", runner.url);
    let response = reqwest::get(url).await.expect("the runner answered");
    assert_eq!(response.status(), 200, "without a token");
    let kind = response.headers()["content-type"]
        .to_str()
        .unwrap_or_default();
    assert!(kind.starts_with("application/json"), "{kind}");
    response.json().await.expect("a JSON document")
}

#[tokio::test]
async fn the_served_document_is_valid_openapi_3_1() {
    let runner = Runner::start();
    let document = served(&runner).await;
    assert!(
        document["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        document["openapi"]
    );
    let Some(validator) = validator() else {
        eprintln!(
            "SKIPPED the_served_document_is_valid_openapi_3_1: no openapi-spec-validator \
             (set OPENAPI_SPEC_VALIDATOR, or run the README's test command, which installs \
             it in target/tmp/openapi-venv)"
        );
        return;
    };
    let file = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(file.path(), document.to_string()).expect("the document written");
    let out = Command::new(&validator)
        .args(["--schema", "3.1", "--validation-errors", "all"])
        .arg(file.path())
        .output()
        .expect("the validator runs");
    assert!(
        out.status.success(),
        "{} says the document is not valid:\n{}{}",
        validator.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn every_documented_operation_is_routed() {
    let runner = Runner::start();
    let document = served(&runner).await;
    let paths = document["paths"].as_object().expect("paths");
    assert!(paths.contains_key("/run"), "{paths:?}");
    for (path, item) in paths {
        let uri = path
            .replace("{id}", "no-such-session")
            .replace("{path}", "a/b.txt");
        for method in item.as_object().expect("a path item").keys() {
            let method =
                reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("a method");
            let answer = runner
                .client
                .request(method.clone(), format!("{}{uri}", runner.url))
                .bearer_auth(TOKEN)
                .send()
                .await
                .expect("an answer");
            let status = answer.status().as_u16();
            let body: Value = answer.json().await.unwrap_or(Value::Null);
            let code = body["error"]["code"].as_str().unwrap_or_default();
            assert!(
                !matches!(code, "not_found" | "method_not_allowed"),
                "{method} {path}: {status} {body}"
            );
        }
    }
}
