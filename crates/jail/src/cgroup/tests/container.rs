//! A runner in a container: its cgroups below the container's own, v1 and v2.

use super::*;

#[test]
fn in_a_container_on_v2_the_own_cgroup_moves_its_processes_to_a_leaf_and_holds_the_sandboxes() {
    // A private cgroup namespace: the mount's root is the container's cgroup, holding
    // the container's init and the runner.
    let tree = delegated_tree("ctr", "1\n7\n");
    let own = [tree.mount.join("ctr")];
    let hierarchy = Hierarchy::open_below_with(tree.clone(), &tree.mount, &own, "r7").unwrap();
    let writes = tree.writes.lock().unwrap().clone();
    let leaf_procs = own[0].join("supervisor/cgroup.procs");
    let moved: Vec<&str> = writes
        .iter()
        .filter(|(p, _)| *p == leaf_procs)
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(moved, ["1", "7"]);
    let enabled = writes
        .iter()
        .position(|(p, _)| *p == own[0].join("cgroup.subtree_control"))
        .expect("the own cgroup enables the controllers");
    let last_move = writes.iter().rposition(|(p, _)| *p == leaf_procs).unwrap();
    assert!(
        last_move < enabled,
        "processes leave before the controllers are enabled"
    );
    assert_eq!(
        tree.written("cgroup.subtree_control"),
        None,
        "the host's root is not touched"
    );
    assert_eq!(hierarchy.tops, [tree.mount.join("ctr/sandbox-runner")]);
    let cgroup = hierarchy.create("sb1", &limits()).unwrap();
    assert_eq!(
        tree.written("ctr/sandbox-runner/r7/sb1/memory.max")
            .as_deref(),
        Some("268435456")
    );
    cgroup.kill_and_remove().unwrap();
    hierarchy.remove_instance().unwrap();

    // Started again in the same container: from the leaf, with the same base.
    let again = Hierarchy::open_below_with(
        tree.clone(),
        &tree.mount,
        &[own[0].join("supervisor")],
        "r9",
    )
    .unwrap();
    assert_eq!(again.tops, hierarchy.tops);
    assert!(!own[0].join("supervisor/supervisor").exists());
}

#[test]
fn in_a_container_on_v1_the_sandboxes_go_below_the_own_cgroup_of_each_tree() {
    let tree = FakeTree::new(Version::V1, true);
    let own: Vec<PathBuf> = v1::CONTROLLERS
        .iter()
        .map(|c| tree.mount.join(c).join("docker"))
        .collect();
    for dir in &own {
        tree.create_dir(dir).unwrap();
    }
    let hierarchy = Hierarchy::open_below_with(tree.clone(), &tree.mount, &own, "r1").unwrap();
    let cgroup = hierarchy.create("sb1", &limits()).unwrap();
    assert_eq!(
        cgroup.procs_files()[0],
        tree.mount
            .join("memory/docker/sandbox-runner/r1/sb1/cgroup.procs")
    );
    assert!(tree
        .written("memory/docker/sandbox-runner/r1/sb1/memory.limit_in_bytes")
        .is_some());
    assert!(
        !tree.mount.join("memory/sandbox-runner").exists(),
        "nothing at the host's root"
    );
    cgroup.kill_and_remove().unwrap();
    hierarchy.remove_instance().unwrap();
}

#[test]
fn in_a_container_on_v1_without_the_freezer_the_runner_is_refused_by_name() {
    let tree = FakeTree::new(Version::V1, true);
    let own: Vec<PathBuf> = v1::CONTROLLERS
        .iter()
        .map(|c| tree.mount.join(c).join("docker"))
        .collect();
    for dir in &own {
        tree.create_dir(dir).unwrap();
    }
    fs::remove_file(tree.mount.join("freezer/tasks")).unwrap();
    match Hierarchy::open_below_with(tree.clone(), &tree.mount, &own, "r1") {
        Err(CgroupError::NoV1Freezer(path)) => assert_eq!(path, tree.mount.join("freezer")),
        other => panic!("expected NoV1Freezer, got {other:?}"),
    }
}

#[test]
fn a_read_only_cgroup_mount_says_how_to_get_a_writable_one() {
    let err = make_dir_error(libc::EROFS);
    assert!(matches!(err, CgroupError::ReadOnly(_)), "{err:?}");
    assert!(err.to_string().contains("--privileged"), "{err}");
}

/// The error `make_dir` gives when the file system answers `errno`.
fn make_dir_error(errno: i32) -> CgroupError {
    #[derive(Debug)]
    struct Refusing(i32);
    impl CgroupFs for Refusing {
        fn exists(&self, _: &Path) -> bool {
            false
        }
        fn read(&self, _: &Path) -> io::Result<String> {
            Err(io::Error::from_raw_os_error(self.0))
        }
        fn write(&self, _: &Path, _: &str) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(self.0))
        }
        fn create_dir(&self, _: &Path) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(self.0))
        }
        fn remove_dir(&self, _: &Path) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(self.0))
        }
        fn list_dirs(&self, _: &Path) -> io::Result<Vec<PathBuf>> {
            Err(io::Error::from_raw_os_error(self.0))
        }
        fn writable(&self, _: &Path) -> bool {
            false
        }
    }
    match make_dir(
        &Refusing(errno),
        Path::new("/sys/fs/cgroup/memory/sandbox-runner"),
    ) {
        Err(e) => e,
        Ok(()) => panic!("made a folder on a refusing file system"),
    }
}
