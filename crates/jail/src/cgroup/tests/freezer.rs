//! Freezing a sandbox's cgroup, thawing it, and killing it frozen; a host without a
//! freezer.

use super::*;

#[test]
fn a_cgroup_freezes_and_thaws_on_v1_and_v2() {
    for (version, file, frozen, thawed) in [
        (
            Version::V1,
            "freezer/sandbox-runner/r1/sb1/freezer.state",
            "FROZEN",
            "THAWED",
        ),
        (Version::V2, "sandbox-runner/r1/sb1/cgroup.freeze", "1", "0"),
    ] {
        let tree = FakeTree::new(version, true);
        let cgroup = tree
            .hierarchy("r1")
            .unwrap()
            .create("sb1", &limits())
            .unwrap();
        let freezer = cgroup.freezer();
        assert!(!freezer.frozen().unwrap(), "{version:?}");
        freezer.freeze().unwrap();
        assert_eq!(tree.written(file).as_deref(), Some(frozen), "{version:?}");
        assert!(freezer.frozen().unwrap(), "{version:?}");
        freezer.thaw().unwrap();
        assert_eq!(tree.written(file).as_deref(), Some(thawed), "{version:?}");
        assert!(!freezer.frozen().unwrap(), "{version:?}");
    }
}

#[test]
fn a_freeze_that_does_not_complete_fails_in_time() {
    for version in [Version::V1, Version::V2] {
        let tree = FakeTree::new(version, true);
        let cgroup = tree
            .hierarchy("r1")
            .unwrap()
            .create("sb1", &limits())
            .unwrap();
        tree.freezes.store(false, Ordering::Relaxed);
        let limit = Duration::from_millis(50);
        let started = Instant::now();
        match cgroup.freezer().freeze_within(limit) {
            Err(CgroupError::FreezeTimeout { path, limit: said }) => {
                assert!(
                    path.ends_with("sandbox-runner/r1/sb1"),
                    "{}",
                    path.display()
                );
                assert_eq!(said, limit);
            }
            other => panic!("{version:?}: expected FreezeTimeout, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(1), "{version:?}");
    }
}

#[test]
fn frozen_cgroups_are_thawed_when_killed_removed_or_left_by_a_dead_runner() {
    for (version, file) in [
        (
            Version::V1,
            "freezer/sandbox-runner/{instance}/{sandbox}/freezer.state",
        ),
        (
            Version::V2,
            "sandbox-runner/{instance}/{sandbox}/cgroup.freeze",
        ),
    ] {
        let tree = FakeTree::new(version, true);
        let path = |instance: &str, sandbox: &str| {
            file.replace("{instance}", instance)
                .replace("{sandbox}", sandbox)
        };
        let thawed = |instance: &str, sandbox: &str| {
            tree.written(&path(instance, sandbox))
                .is_some_and(|v| v == "THAWED" || v == "0")
        };
        let dead = tree.hierarchy("r999999999").unwrap();
        dead.create("sb1", &limits())
            .unwrap()
            .freezer()
            .freeze()
            .unwrap();
        let ours = tree.hierarchy("r1").unwrap();
        let kept = ours.create("sb1", &limits()).unwrap();
        let removed = ours.create("sb2", &limits()).unwrap();
        kept.freezer().freeze().unwrap();
        removed.freezer().freeze().unwrap();

        ours.remove_stale().unwrap();
        assert!(thawed("r999999999", "sb1"), "{version:?}: a dead runner's");
        assert!(!tree.mount.join(path("r999999999", "sb1")).exists());
        assert!(
            !thawed("r1", "sb1"),
            "{version:?}: a live runner's is left alone"
        );

        ours.kill_all();
        assert!(thawed("r1", "sb1"), "{version:?}: kill_all");
        removed.freezer().freeze().unwrap();
        removed.kill_and_remove().unwrap();
        assert!(thawed("r1", "sb2"), "{version:?}: kill_and_remove");
        assert!(!tree.mount.join(path("r1", "sb2")).exists(), "{version:?}");
    }
}

#[test]
fn a_host_without_a_freezer_is_refused_by_name() {
    let tree = FakeTree::new(Version::V1, true);
    fs::remove_file(tree.mount.join("freezer/tasks")).unwrap();
    match tree.hierarchy("r1") {
        Err(e @ CgroupError::NoV1Freezer(_)) => {
            assert!(matches!(&e, CgroupError::NoV1Freezer(p) if *p == tree.mount.join("freezer")));
            assert!(e.to_string().contains("mount -t cgroup -o freezer"), "{e}");
        }
        other => panic!("expected NoV1Freezer, got {other:?}"),
    }
    assert!(
        !tree.mount.join("memory/sandbox-runner").exists(),
        "nothing made"
    );

    // A v2 cgroup of a kernel before 5.2 has no cgroup.freeze.
    let tree = FakeTree::new(Version::V2, true);
    let old = tree.mount.join("old-kernel");
    fs::create_dir(&old).unwrap();
    match crate::cgroup::freezer::check_v2(&*tree, &old) {
        Err(CgroupError::NoV2Freezer(path)) => assert_eq!(path, old.join("cgroup.freeze")),
        other => panic!("expected NoV2Freezer, got {other:?}"),
    }
}
