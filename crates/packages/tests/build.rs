//! Building a small set with the host's real pip and npm, over the network.

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{assert_read_only, python_imports, spec, TestStore};
use sandbox_packages::{build, BuildError, Manifest, SANDBOX_PLOTS};

#[tokio::test]
async fn a_small_set_is_built_then_found_again() {
    let t = TestStore::new();
    let spec = spec(&["tabulate", "six"], &["is-number"]);
    let mut lines = Vec::new();
    let report = build(&t.store, &spec, &mut |p| lines.push(p.to_string()))
        .await
        .unwrap();
    eprintln!("{}", lines.join("\n"));
    eprintln!("first build: {:?}", report.elapsed);
    assert!(!report.cached);
    assert_eq!(report.python_packages, 2);
    assert_eq!(report.node_packages, 1);
    assert!(
        lines[0].starts_with("resolving python packages"),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "installing 2 wheels..."),
        "{lines:?}"
    );

    // The layout.
    let set = t.root().join("sets").join(&report.key);
    assert_eq!(report.set.dir, set);
    assert_eq!(t.entries("sets"), [report.key.as_str()]);
    assert_eq!(t.entries("tmp"), Vec::<String>::new());
    assert_eq!(
        fs::read_link(t.root().join("current")).unwrap(),
        Path::new("sets").join(&report.key)
    );
    assert_eq!(t.store.current().unwrap().as_ref(), Some(&report.set));
    let python = set.join("python");
    assert!(python.join("six.py").is_file());
    assert!(python.join("tabulate").exists() || python.join("tabulate.py").exists());
    assert_eq!(
        fs::read_to_string(python.join("sandbox_plots.py")).unwrap(),
        SANDBOX_PLOTS
    );
    let compiled = python.join("__pycache__").read_dir().unwrap();
    assert!(compiled
        .map(|e| e.unwrap().file_name())
        .any(|n| n.to_string_lossy().starts_with("sandbox_plots.")));
    assert!(set
        .join("node/node_modules/is-number/package.json")
        .is_file());
    assert_eq!(report.set.node_modules_dir(), set.join("node/node_modules"));

    // The manifest.
    let manifest: Manifest =
        serde_json::from_slice(&fs::read(set.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest, report.set.manifest);
    assert_eq!(manifest.key, report.key);
    assert!(
        manifest.python_version.starts_with("3."),
        "{}",
        manifest.python_version
    );
    let names: Vec<&str> = manifest.python.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["six", "tabulate"]);
    assert!(manifest.python.iter().all(|p| p.sha256.len() == 64));
    assert_eq!(manifest.node.len(), 1);
    assert_eq!(manifest.node[0].name, "is-number");
    assert!(manifest.node[0].integrity.starts_with("sha512-"));
    assert!(manifest.python_bytes > 0 && manifest.node_bytes > 0);
    assert_eq!(manifest.python_bytes, report.python_bytes);
    let raw: serde_json::Value =
        serde_json::from_slice(&fs::read(set.join("manifest.json")).unwrap()).unwrap();
    for field in [
        "key",
        "pythonVersion",
        "python",
        "node",
        "pythonBytes",
        "nodeBytes",
        "builtAt",
    ] {
        assert!(raw.get(field).is_some(), "manifest lacks {field}: {raw}");
    }

    // Read-only, and usable as it is.
    assert_read_only(&set);
    python_imports(
        &[report.set.python_dir()],
        "import six, tabulate; print(tabulate.tabulate([[1, 2]]))",
    )
    .unwrap();
    // The plots backend is there (it imports matplotlib, which this small set lacks).
    assert!(report.set.python_dir().join("sandbox_plots.py").is_file());
    let node = std::process::Command::new("/usr/bin/node")
        .args(["-e", "process.exit(require('is-number')(5) ? 0 : 1)"])
        .env("NODE_PATH", report.set.node_modules_dir())
        .current_dir("/")
        .status()
        .unwrap();
    assert!(node.success());

    // The same packages again: found, not installed.
    let mut lines = Vec::new();
    let again = build(&t.store, &spec, &mut |p| lines.push(p.to_string()))
        .await
        .unwrap();
    eprintln!("second build: {:?}\n{}", again.elapsed, lines.join("\n"));
    assert!(again.cached);
    assert_eq!(again.key, report.key);
    assert_eq!(again.set, report.set);
    assert!(lines.iter().any(|l| l.ends_with("(cached)")), "{lines:?}");
    assert!(
        !lines.iter().any(|l| l.starts_with("installing")),
        "{lines:?}"
    );
    assert!(
        again.elapsed < report.elapsed,
        "{:?} then {:?}",
        report.elapsed,
        again.elapsed
    );
    assert_eq!(t.entries("sets"), [report.key.as_str()]);
    assert_eq!(t.entries("tmp"), Vec::<String>::new());

    // Another set moves `current`; the first stays.
    let other = build(&t.store, &common::spec(&["six"], &[]), &mut |_| {})
        .await
        .unwrap();
    assert_ne!(other.key, report.key);
    assert_eq!(t.store.current().unwrap().unwrap().key(), other.key);
    assert!(other.set.node_modules_dir().is_dir());
    assert_eq!(t.entries("sets").len(), 2);
}

#[tokio::test]
async fn failures_leave_nothing_behind() {
    let t = TestStore::new();
    let err = build(
        &t.store,
        &spec(&["this-package-does-not-exist-xyz-123"], &[]),
        &mut |_| {},
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, BuildError::NotFound { package, .. } if package == "this-package-does-not-exist-xyz-123"),
        "{err}"
    );
    let mut timed = spec(&["six"], &["is-number"]);
    timed.timeout = Duration::from_millis(1);
    let err = build(&t.store, &timed, &mut |_| {}).await.unwrap_err();
    assert!(matches!(err, BuildError::Timeout { .. }), "{err}");
    let err = build(&t.store, &spec(&[], &[]), &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, BuildError::Empty), "{err}");
    assert_eq!(t.entries("sets"), Vec::<String>::new());
    assert_eq!(t.entries("tmp"), Vec::<String>::new());
    assert_eq!(t.store.current().unwrap(), None);
}
