//! Resolving scripts' inline dependencies with the host's real pip, over the network.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_read_only, python_imports, spec, TestStore};
use sandbox_packages::{build, DepsError, Manifest, Policy, ScriptMetadata};

fn deps(names: &[&str]) -> ScriptMetadata {
    ScriptMetadata {
        dependencies: names.iter().map(|s| s.to_string()).collect(),
        requires_python: None,
    }
}

/// An index nobody listens on, and no local wheels.
fn unreachable_index() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "PIP_INDEX_URL".to_owned(),
            "http://127.0.0.1:9/simple".to_owned(),
        ),
        ("PIP_FIND_LINKS".to_owned(), String::new()),
    ])
}

fn assert_code(e: &DepsError, code: &str, status: u16) {
    eprintln!("{code}: {e}");
    assert_eq!(e.code(), code, "{e}");
    assert_eq!(e.status(), status, "{e}");
}

#[tokio::test]
async fn inline_dependencies_are_installed_once_then_cached() {
    let t = TestStore::new();
    let base = build(&t.store, &spec(&["six"], &[]), &mut |_| {})
        .await
        .unwrap()
        .set;
    let resolver = t.resolver(Some(base.clone()), Policy::default());

    // humanize is new; six is the base set's and stays there.
    let started = Instant::now();
    let set = resolver.resolve(&deps(&["humanize", "Six"])).await.unwrap();
    eprintln!("miss: {:?}", started.elapsed());
    assert!(!set.cached);
    assert_eq!(set.dir, t.root().join("deps").join(&set.key));
    assert_eq!(set.python_dir, set.dir.join("python"));
    assert!(set.python_dir.join("humanize").is_dir());
    assert!(!set.python_dir.join("six.py").exists());
    let manifest: Manifest =
        serde_json::from_slice(&fs::read(set.dir.join("manifest.json")).unwrap()).unwrap();
    let names: Vec<&str> = manifest.python.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["humanize"]);
    assert_read_only(&set.dir);
    assert_eq!(t.entries("tmp"), Vec::<String>::new());
    assert_eq!(t.entries("deps/requests").len(), 1);
    python_imports(
        &[set.python_dir.clone(), base.python_dir()],
        "import humanize, six; print(humanize.naturalsize(10**6))",
    )
    .unwrap();

    // The same request, spelled differently: a hit, with nothing run.
    let started = Instant::now();
    let hit = resolver.resolve(&deps(&["six", "Humanize"])).await.unwrap();
    let first_hit = started.elapsed();
    assert!(hit.cached);
    assert_eq!(hit.key, set.key);
    assert_eq!(hit.python_dir, set.python_dir);
    assert!(first_hit < Duration::from_millis(50), "{first_hit:?}");
    let n = 1000;
    let started = Instant::now();
    for _ in 0..n {
        assert!(
            resolver
                .resolve(&deps(&["six", "humanize"]))
                .await
                .unwrap()
                .cached
        );
    }
    eprintln!(
        "cache hit: first {first_hit:?}, mean {:?} over {n}",
        started.elapsed() / n
    );

    // A new resolver (a restarted runner) finds it too.
    let again = t
        .resolver(Some(base.clone()), Policy::default())
        .with_env(unreachable_index());
    assert!(
        again
            .resolve(&deps(&["humanize", "six"]))
            .await
            .unwrap()
            .cached
    );

    // Only what the base set has: an empty set, cached like any other.
    let empty = resolver.resolve(&deps(&["six"])).await.unwrap();
    assert!(!empty.cached);
    assert!(empty.python_dir.is_dir());
    assert_eq!(fs::read_dir(&empty.python_dir).unwrap().count(), 0);
    assert!(resolver.resolve(&deps(&["six"])).await.unwrap().cached);

    // A version the base set's pin excludes.
    let e = resolver.resolve(&deps(&["six<1.0"])).await.unwrap_err();
    assert_code(&e, "dependency_conflict", 422);
    assert!(e.to_string().contains("six"), "{e}");
    assert_eq!(t.entries("tmp"), Vec::<String>::new());
}

#[tokio::test]
async fn concurrent_requests_run_pip_once() {
    let t = TestStore::new();
    let resolver = Arc::new(t.resolver(None, Policy::default()));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let r = resolver.clone();
            tokio::spawn(async move { r.resolve(&deps(&["tabulate"])).await })
        })
        .collect();
    let mut misses = 0;
    let mut keys = Vec::new();
    for task in tasks {
        let set = task.await.unwrap().unwrap();
        misses += usize::from(!set.cached);
        keys.push(set.key);
    }
    assert_eq!(misses, 1);
    keys.dedup();
    assert_eq!(keys.len(), 1);
    assert_eq!(t.entries("deps"), [keys[0].clone(), "requests".to_owned()]);
}

#[tokio::test]
async fn the_policy_refuses_before_the_network() {
    let t = TestStore::new();
    let policy = Policy {
        deny: vec!["Six".into()],
        allow: Some(vec!["six".into(), "humanize".into(), "requests".into()]),
        ..Policy::default()
    };
    // The index is unreachable: a refusal that went to the network would say so.
    let resolver = t
        .resolver(None, policy.clone())
        .with_env(unreachable_index());
    let started = Instant::now();
    let e = resolver
        .resolve(&deps(&["humanize", "six>=1"]))
        .await
        .unwrap_err();
    assert_code(&e, "dependency_denied", 422);
    assert!(
        e.to_string().contains("six") && e.to_string().contains("deny list"),
        "{e}"
    );
    let e = resolver.resolve(&deps(&["tabulate"])).await.unwrap_err();
    assert_code(&e, "dependency_denied", 422);
    assert!(
        e.to_string().contains("tabulate") && e.to_string().contains("allow list"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // What a package pulls in is checked too (this one needs the index).
    let resolver = t.resolver(None, policy);
    let e = resolver.resolve(&deps(&["requests"])).await.unwrap_err();
    assert_code(&e, "dependency_denied", 422);
    assert!(e.to_string().contains("needed by the requested"), "{e}");
    assert_eq!(t.entries("deps"), ["requests"]);
    assert_eq!(t.entries("deps/requests"), Vec::<String>::new());
    assert_eq!(t.entries("tmp"), Vec::<String>::new());
}

#[tokio::test]
async fn missing_packages_and_wheels_are_named() {
    let t = TestStore::new();
    let resolver = t.resolver(None, Policy::default());
    let e = resolver
        .resolve(&deps(&["this-package-does-not-exist-xyz-123"]))
        .await
        .unwrap_err();
    assert_code(&e, "dependency_not_found", 422);
    assert!(
        e.to_string()
            .contains("no package named this-package-does-not-exist-xyz-123"),
        "{e}"
    );
    // docopt has published only a source distribution since 2014.
    let e = resolver.resolve(&deps(&["docopt"])).await.unwrap_err();
    assert_code(&e, "dependency_not_found", 422);
    assert!(
        e.to_string().contains("docopt has no wheel")
            && e.to_string().contains("never built from source"),
        "{e}"
    );
    let e = resolver.resolve(&deps(&["six>=99"])).await.unwrap_err();
    assert_code(&e, "dependency_not_found", 422);
    assert!(e.to_string().contains("six>=99"), "{e}");
    assert_eq!(t.entries("tmp"), Vec::<String>::new());
}

#[tokio::test]
async fn too_large_sets_are_refused_and_removed() {
    let t = TestStore::new();
    let policy = Policy {
        max_bytes: 1,
        ..Policy::default()
    };
    let resolver = t.resolver(None, policy);
    let e = resolver.resolve(&deps(&["humanize"])).await.unwrap_err();
    assert_code(&e, "dependency_too_large", 422);
    assert!(e.to_string().contains("humanize"), "{e}");
    assert_eq!(t.entries("deps"), ["requests"]);
    assert_eq!(t.entries("deps/requests"), Vec::<String>::new());
    assert_eq!(t.entries("tmp"), Vec::<String>::new());
}

#[tokio::test]
async fn slow_resolutions_time_out() {
    let t = TestStore::new();
    for timeout in [Duration::from_millis(1), Duration::from_millis(300)] {
        let policy = Policy {
            timeout,
            ..Policy::default()
        };
        let resolver = t.resolver(None, policy);
        let started = Instant::now();
        let e = resolver.resolve(&deps(&["scipy"])).await.unwrap_err();
        assert_code(&e, "dependency_timeout", 422);
        assert!(e.to_string().contains("scipy"), "{e}");
        assert!(
            started.elapsed() < timeout + Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(t.entries("tmp"), Vec::<String>::new());
        assert_eq!(t.entries("deps"), ["requests"]);
    }
}

#[tokio::test]
async fn an_unreachable_index_is_told_apart() {
    let t = TestStore::new();
    let resolver = t
        .resolver(None, Policy::default())
        .with_env(unreachable_index());
    let e = resolver.resolve(&deps(&["six"])).await.unwrap_err();
    assert_code(&e, "index_unreachable", 422);
    assert!(
        e.to_string().contains("six")
            && e.to_string()
                .contains("Failed to establish a new connection"),
        "{e}"
    );
    assert_eq!(t.entries("tmp"), Vec::<String>::new());
}

#[tokio::test]
async fn bad_requests_are_refused_without_pip() {
    let t = TestStore::new();
    let resolver = t
        .resolver(None, Policy::default())
        .with_env(unreachable_index());
    for bad in [
        "six @ https://example.com/six.whl",
        "--index-url=http://evil",
        "-r /etc/passwd",
    ] {
        let e = resolver.resolve(&deps(&[bad])).await.unwrap_err();
        assert_code(&e, "bad_script_metadata", 400);
    }
    let meta = ScriptMetadata {
        dependencies: vec!["six".into()],
        requires_python: Some(">=4".into()),
    };
    let e = resolver.resolve(&meta).await.unwrap_err();
    assert_code(&e, "python_version_unsupported", 422);
    assert!(e.to_string().contains(">=4"), "{e}");

    // No dependencies: an empty set, without pip.
    let none = resolver.resolve(&deps(&[])).await.unwrap();
    assert_eq!(fs::read_dir(&none.python_dir).unwrap().count(), 0);
}
