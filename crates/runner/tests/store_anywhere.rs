//! A package store anywhere on the host works: below `/tmp` (which a sandbox's stage may
//! cover), below a folder only root may pass (a sandbox's root is another user), below
//! `/home` (which a template hides from itself), with sandboxes forked from templates and
//! made by jails alike. The set is a small one made by the test.

mod common;

use common::{stdout, Options, Runner};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A key of the store's form (64 hex digits).
const KEY: &str = "5e7f0000000000000000000000000000000000000000000000000000000000aa";

/// A store under `base` whose current set holds one Python module, `where_am_i`.
fn store_under(base: &Path) -> tempfile::TempDir {
    std::fs::create_dir_all(base).expect("the base folder");
    let dir = tempfile::Builder::new()
        .prefix("store-anywhere-")
        .tempdir_in(base)
        .expect("a folder for the store");
    // Only root passes through it, as through /root.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .expect("the folder's mode");
    let set = dir.path().join("store/sets").join(KEY);
    for sub in ["python", "node/node_modules"] {
        std::fs::create_dir_all(set.join(sub)).expect("the set's folders");
    }
    std::fs::write(
        set.join("python/where_am_i.py"),
        format!("WHERE = {:?}\n", base.display().to_string()),
    )
    .expect("the module");
    let manifest = json!({
        "key": KEY, "pythonVersion": "3.11.2", "python": [], "node": [],
        "pythonBytes": 4096, "nodeBytes": 4096, "builtAt": "2026-12-05T00:00:00Z"
    });
    std::fs::write(set.join("manifest.json"), manifest.to_string()).expect("the manifest");
    for sub in ["store", "store/sets", &format!("store/sets/{KEY}")] {
        let mode = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(dir.path().join(sub), mode).expect("a mode");
    }
    std::os::unix::fs::symlink(format!("sets/{KEY}"), dir.path().join("store/current"))
        .expect("the current link");
    dir
}

#[tokio::test]
async fn a_package_store_anywhere_on_the_host_is_shown_in_every_sandbox() {
    for base in ["/tmp", "/root", "/home"] {
        let dir = store_under(Path::new(base));
        for templates in ["true", "false"] {
            let runner = Runner::with(Options {
                pool_size: 1,
                extra: Vec::new(),
                env: vec![
                    (
                        "RUNNER_PACKAGES_DIR".into(),
                        dir.path().join("store").display().to_string(),
                    ),
                    ("RUNNER_TEMPLATES".into(), templates.into()),
                    ("RUNNER_WARM_IMPORTS".into(), String::new()),
                ],
                ..Options::default()
            });
            let out = runner
                .run("python", "import where_am_i; print(where_am_i.WHERE)")
                .await;
            assert_eq!(
                stdout(&out),
                format!("{base}\n"),
                "a store under {base}, templates {templates}: {out}"
            );
            let out = runner.run("bash", "ls /opt/packages/python").await;
            assert_eq!(
                stdout(&out),
                "where_am_i.py\n",
                "{base}, {templates}: {out}"
            );
        }
    }
}
