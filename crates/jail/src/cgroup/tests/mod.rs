//! The cgroup logic against fake v1 and v2 trees in a temporary folder: no root needed.
//! `container.rs`: a runner in a container; `freezer.rs`: freezing and thawing.

mod container;
mod freezer;

use super::*;
use std::fs;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// A cgroup file system in a temporary folder that behaves like the kernel's where our
/// code depends on it: making a folder makes its control files, removing one removes
/// them (refused while it holds processes or child cgroups), and no new file can be
/// made by writing.
#[derive(Debug)]
struct FakeTree {
    mount: PathBuf,
    version: Version,
    /// Whether v1 memory cgroups account socket buffers (CONFIG_MEMCG_KMEM).
    kmem: bool,
    /// Whether a cgroup told to freeze gets frozen (false: it stays freezing, as with
    /// a process the kernel cannot stop).
    freezes: AtomicBool,
    /// Every write, in order.
    writes: Mutex<Vec<(PathBuf, String)>>,
}

impl FakeTree {
    fn new(version: Version, kmem: bool) -> Arc<FakeTree> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let mount = std::env::temp_dir().join(format!(
            "cgroup-fake-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&mount);
        fs::create_dir_all(&mount).unwrap();
        let tree = FakeTree {
            mount,
            version,
            kmem,
            freezes: AtomicBool::new(true),
            writes: Mutex::new(Vec::new()),
        };
        match version {
            Version::V2 => {
                tree.populate(&tree.mount);
                let controllers = tree.mount.join("cgroup.controllers");
                fs::write(controllers, "cpuset cpu io memory hugetlb pids rdma misc\n").unwrap();
            }
            Version::V1 => {
                for controller in v1::CONTROLLERS {
                    let root = tree.mount.join(controller);
                    fs::create_dir(&root).unwrap();
                    tree.populate(&root);
                }
            }
        }
        Arc::new(tree)
    }

    /// The control files the kernel shows in a new cgroup folder.
    fn populate(&self, dir: &Path) {
        let mut files = vec![("cgroup.procs", "")];
        match self.version {
            Version::V2 => files.extend([
                ("cgroup.controllers", "cpu memory pids\n"),
                ("cgroup.subtree_control", ""),
                ("cgroup.kill", ""),
                ("cgroup.freeze", "0\n"),
                ("cgroup.events", "populated 0\nfrozen 0\n"),
                ("memory.max", "max\n"),
                ("memory.swap.max", "max\n"),
                ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"),
                ("cpu.max", "max 100000\n"),
                ("pids.max", "max\n"),
            ]),
            Version::V1 => {
                files.push(("tasks", ""));
                let controller = dir.strip_prefix(&self.mount).unwrap().components().next();
                match controller.and_then(|c| c.as_os_str().to_str()) {
                    Some("memory") => {
                        files.extend([
                            ("memory.limit_in_bytes", "9223372036854771712\n"),
                            ("memory.memsw.limit_in_bytes", "9223372036854771712\n"),
                            ("memory.swappiness", "60\n"),
                            (
                                "memory.oom_control",
                                "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
                            ),
                        ]);
                        if self.kmem {
                            files.push(("memory.kmem.tcp.limit_in_bytes", "9223372036854771712\n"));
                        }
                    }
                    Some("cpu") => files.extend([
                        ("cpu.cfs_period_us", "100000\n"),
                        ("cpu.cfs_quota_us", "-1\n"),
                    ]),
                    Some("pids") => files.push(("pids.max", "max\n")),
                    Some("freezer") => files.extend([
                        ("freezer.state", "THAWED\n"),
                        ("freezer.self_freezing", "0\n"),
                        ("freezer.parent_freezing", "0\n"),
                    ]),
                    other => panic!("no v1 controller {other:?} in the fake tree"),
                }
            }
        }
        for (name, content) in files {
            fs::write(dir.join(name), content).unwrap();
        }
    }

    /// What was last written to `path`, relative to the mount point.
    fn written(&self, path: &str) -> Option<String> {
        let path = self.mount.join(path);
        let writes = self.writes.lock().unwrap();
        writes
            .iter()
            .rev()
            .find(|(p, _)| *p == path)
            .map(|(_, v)| v.clone())
    }

    fn hierarchy(self: &Arc<Self>, instance: &str) -> Result<Hierarchy, CgroupError> {
        Hierarchy::open_with(self.clone(), &self.mount, instance)
    }
}

impl Drop for FakeTree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.mount);
    }
}

impl CgroupFs for FakeTree {
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn read(&self, path: &Path) -> io::Result<String> {
        fs::read_to_string(path)
    }

    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        if !path.is_file() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // As the kernel: v1's memory limit may not exceed memory+swap's, nor memory+swap's
        // go below the memory limit.
        let sibling = |name: &str| -> u64 {
            let text = fs::read_to_string(path.with_file_name(name)).unwrap_or_default();
            text.trim().parse().unwrap_or(u64::MAX)
        };
        let value_n: u64 = value.trim().parse().unwrap_or(u64::MAX);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let refused = match name {
            "memory.limit_in_bytes" => value_n > sibling("memory.memsw.limit_in_bytes"),
            "memory.memsw.limit_in_bytes" => value_n < sibling("memory.limit_in_bytes"),
            _ => false,
        };
        if refused {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        fs::write(path, value)?;
        // As the kernel: the freezer's state follows what was asked, once every process
        // is frozen.
        let freezes = self.freezes.load(Ordering::Relaxed);
        match (name, value.trim()) {
            ("freezer.state", "FROZEN") if !freezes => fs::write(path, "FREEZING\n")?,
            ("cgroup.freeze", asked) => {
                let frozen = if freezes { asked } else { "0" };
                fs::write(
                    path.with_file_name("cgroup.events"),
                    format!("populated 0\nfrozen {frozen}\n"),
                )?;
            }
            _ => {}
        }
        let mut writes = self.writes.lock().unwrap();
        writes.push((path.to_owned(), value.to_owned()));
        Ok(())
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)?;
        self.populate(path);
        Ok(())
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        if !self.list_dirs(path)?.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
        }
        if !fs::read_to_string(path.join("cgroup.procs"))?
            .trim()
            .is_empty()
        {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        fs::remove_dir_all(path)
    }

    fn list_dirs(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        HostFs.list_dirs(path)
    }

    /// By the owner's write bit: the tests may run as root, whom access(2) never refuses.
    fn writable(&self, path: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o200 != 0)
    }
}

const MIB: u64 = 1 << 20;

fn limits() -> CgroupLimits {
    CgroupLimits {
        memory_bytes: 256 * MIB,
        cpu_quota_us: 50_000,
        cpu_period_us: 100_000,
        pids_max: 64,
    }
}

#[test]
fn v2_gets_its_controllers_enabled_and_a_cgroup_its_limits() {
    let tree = FakeTree::new(Version::V2, true);
    let hierarchy = tree.hierarchy("r1").unwrap();
    assert_eq!(hierarchy.version(), Version::V2);
    for level in ["", "sandbox-runner/", "sandbox-runner/r1/"] {
        let file = format!("{level}cgroup.subtree_control");
        assert_eq!(tree.written(&file).as_deref(), Some("+memory +cpu +pids"));
    }

    let cgroup = hierarchy.create("sb1", &limits()).unwrap();
    let dir = "sandbox-runner/r1/sb1";
    let written = |file: &str| tree.written(&format!("{dir}/{file}"));
    assert_eq!(written("memory.max"), Some((256 * MIB).to_string()));
    assert_eq!(written("memory.swap.max").as_deref(), Some("0"));
    assert_eq!(written("cpu.max").as_deref(), Some("50000 100000"));
    assert_eq!(written("pids.max").as_deref(), Some("64"));
    assert_eq!(
        cgroup.procs_files(),
        [tree.mount.join(dir).join("cgroup.procs")]
    );

    assert_eq!(cgroup.oom_kills().unwrap(), 0);
    fs::write(
        tree.mount.join(dir).join("memory.events"),
        "oom 2\noom_kill 3\n",
    )
    .unwrap();
    assert_eq!(cgroup.oom_kills().unwrap(), 3);

    cgroup.kill_and_remove().unwrap();
    assert_eq!(written("cgroup.kill").as_deref(), Some("1"));
    assert!(!tree.mount.join(dir).exists());
    hierarchy.remove_instance().unwrap();
    assert!(!tree.mount.join("sandbox-runner/r1").exists());
}

#[test]
fn a_raised_memory_limit_is_split_and_written_in_the_order_the_kernel_takes() {
    let tree = FakeTree::new(Version::V1, true);
    let hierarchy = tree.hierarchy("r1").unwrap();
    let cgroup = hierarchy.create("sb1", &limits()).unwrap();
    cgroup.raise_memory(1024 * MIB).unwrap();
    let written = |file: &str| tree.written(&format!("memory/sandbox-runner/r1/sb1/{file}"));
    let sockets = 1024 * MIB / 16;
    let rest = 1024 * MIB - sockets;
    assert_eq!(written("memory.limit_in_bytes"), Some(rest.to_string()));
    assert_eq!(
        written("memory.memsw.limit_in_bytes"),
        Some(rest.to_string())
    );
    assert_eq!(
        written("memory.kmem.tcp.limit_in_bytes"),
        Some(sockets.to_string())
    );
    // The fake holds the kernel's rule: memory first, then memory+swap, is refused.
    let dir = tree.mount.join("memory/sandbox-runner/r1/sb1");
    let too_big = (2048 * MIB).to_string();
    assert!(CgroupFs::write(&*tree, &dir.join("memory.limit_in_bytes"), &too_big).is_err());

    let tree = FakeTree::new(Version::V2, true);
    let cgroup = tree
        .hierarchy("r1")
        .unwrap()
        .create("sb1", &limits())
        .unwrap();
    cgroup.raise_memory(1024 * MIB).unwrap();
    assert_eq!(
        tree.written("sandbox-runner/r1/sb1/memory.max"),
        Some((1024 * MIB).to_string())
    );
}

#[test]
fn v1_splits_the_memory_between_socket_buffers_and_the_rest() {
    let tree = FakeTree::new(Version::V1, true);
    let hierarchy = tree.hierarchy("r1").unwrap();
    assert_eq!(hierarchy.version(), Version::V1);

    let cgroup = hierarchy.create("sb1", &limits()).unwrap();
    let written = |controller: &str, file: &str| {
        tree.written(&format!("{controller}/sandbox-runner/r1/sb1/{file}"))
    };
    let sockets = 256 * MIB / 16;
    let rest = 256 * MIB - sockets;
    assert_eq!(limits().v1_socket_bytes(), sockets);
    assert_eq!(
        written("memory", "memory.kmem.tcp.limit_in_bytes"),
        Some(sockets.to_string())
    );
    assert_eq!(
        written("memory", "memory.limit_in_bytes"),
        Some(rest.to_string())
    );
    assert_eq!(
        written("memory", "memory.memsw.limit_in_bytes"),
        Some(rest.to_string())
    );
    assert_eq!(written("memory", "memory.swappiness").as_deref(), Some("0"));
    assert_eq!(
        written("cpu", "cpu.cfs_period_us").as_deref(),
        Some("100000")
    );
    assert_eq!(written("cpu", "cpu.cfs_quota_us").as_deref(), Some("50000"));
    assert_eq!(written("pids", "pids.max").as_deref(), Some("64"));
    let procs: Vec<PathBuf> = ["memory", "cpu", "pids", "freezer"]
        .iter()
        .map(|c| {
            tree.mount
                .join(c)
                .join("sandbox-runner/r1/sb1/cgroup.procs")
        })
        .collect();
    assert_eq!(cgroup.procs_files(), procs);

    let oom = tree
        .mount
        .join("memory/sandbox-runner/r1/sb1/memory.oom_control");
    fs::write(oom, "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").unwrap();
    assert_eq!(cgroup.oom_kills().unwrap(), 2);

    cgroup.kill_and_remove().unwrap();
    for controller in v1::CONTROLLERS {
        let dir = tree.mount.join(controller).join("sandbox-runner/r1/sb1");
        assert!(!dir.exists(), "{} left", dir.display());
    }
}

#[test]
fn v1_without_socket_buffer_accounting_is_refused_and_leaves_nothing() {
    let tree = FakeTree::new(Version::V1, false);
    let hierarchy = tree.hierarchy("r1").unwrap();
    match hierarchy.create("sb1", &limits()) {
        Err(CgroupError::NoSocketLimit(path)) => assert!(
            path.ends_with("memory.kmem.tcp.limit_in_bytes"),
            "{}",
            path.display()
        ),
        other => panic!("expected NoSocketLimit, got {other:?}"),
    }
    for controller in v1::CONTROLLERS {
        let dir = tree.mount.join(controller).join("sandbox-runner/r1/sb1");
        assert!(!dir.exists(), "{} left", dir.display());
    }
}

#[test]
fn remove_stale_removes_what_dead_runners_left_and_nothing_else() {
    for version in [Version::V1, Version::V2] {
        let tree = FakeTree::new(version, true);
        // No pid is this high (pid_max is at most 2^22): that runner is dead.
        let dead = tree.hierarchy("r999999999").unwrap();
        dead.create("sb1", &limits()).unwrap();
        dead.create("sb2", &limits()).unwrap();
        // Init never dies; a folder not named r<pid> is not ours.
        let alive = tree.hierarchy("r1").unwrap();
        alive.create("sb1", &limits()).unwrap();
        let foreign = tree.hierarchy("someone-else").unwrap();
        foreign.create("sb1", &limits()).unwrap();

        let ours = tree.hierarchy("r2000000000").unwrap();
        let per_tree = match version {
            Version::V1 => v1::CONTROLLERS.len(),
            Version::V2 => 1,
        };
        assert_eq!(ours.remove_stale().unwrap(), 2 * per_tree, "{version:?}");
        for top in &ours.tops {
            assert!(!top.join("r999999999").exists(), "{version:?}");
            assert!(top.join("r1/sb1").exists(), "{version:?}");
            assert!(top.join("someone-else/sb1").exists(), "{version:?}");
            assert!(top.join("r2000000000").exists(), "{version:?}");
        }
        assert_eq!(ours.remove_stale().unwrap(), 0, "{version:?}");
    }
}

/// A sandbox's folder that its destruction left (its processes were slower to go than
/// it waited) goes at shutdown with the instance's.
#[test]
fn remove_instance_removes_a_sandbox_folder_left_behind() {
    for version in [Version::V1, Version::V2] {
        let tree = FakeTree::new(version, true);
        let hierarchy = tree.hierarchy("r1").unwrap();
        let cgroup = hierarchy.create("sb1", &limits()).unwrap();
        hierarchy.remove_instance().unwrap();
        for procs in cgroup.procs_files() {
            let instance = procs.parent().unwrap().parent().unwrap();
            assert!(!instance.exists(), "{version:?}: {}", instance.display());
        }
    }
}

#[test]
fn kill_and_remove_of_an_empty_cgroup_is_immediate_and_repeatable() {
    for version in [Version::V1, Version::V2] {
        let tree = FakeTree::new(version, true);
        let hierarchy = tree.hierarchy("r1").unwrap();
        let cgroup = hierarchy.create("sb1", &limits()).unwrap();
        let started = Instant::now();
        cgroup.kill_and_remove().unwrap();
        assert!(started.elapsed() < REMOVE_LIMIT, "{version:?}");
        for procs in cgroup.procs_files() {
            assert!(!procs.parent().unwrap().exists(), "{version:?}");
        }
        cgroup.kill_and_remove().unwrap();
        hierarchy.kill_all();
        hierarchy.remove_instance().unwrap();
    }
}

#[test]
fn a_missing_hierarchy_or_v2_controller_is_named() {
    let empty = FakeTree::new(Version::V1, true);
    for controller in v1::CONTROLLERS {
        fs::remove_file(empty.mount.join(controller).join("tasks")).unwrap();
    }
    assert!(matches!(
        empty.hierarchy("r1"),
        Err(CgroupError::NoHierarchy(path)) if path == empty.mount
    ));

    let tree = FakeTree::new(Version::V2, true);
    fs::write(tree.mount.join("cgroup.controllers"), "cpu memory io\n").unwrap();
    match tree.hierarchy("r1") {
        Err(CgroupError::MissingController { controller, path }) => {
            assert_eq!(controller, "pids");
            assert_eq!(path, tree.mount);
        }
        other => panic!("expected MissingController, got {other:?}"),
    }
}

/// A fake v2 tree with `own` (relative) made below the root, as systemd makes a
/// delegated unit's cgroup, holding the processes `procs`.
fn delegated_tree(own: &str, procs: &str) -> Arc<FakeTree> {
    let tree = FakeTree::new(Version::V2, true);
    let mut dir = tree.mount.clone();
    for part in Path::new(own) {
        dir.push(part);
        tree.create_dir(&dir).unwrap();
    }
    fs::write(dir.join("cgroup.procs"), procs).unwrap();
    tree
}

fn read_only(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o444)).unwrap();
}

#[test]
fn own_path_is_the_unified_line_of_proc_self_cgroup() {
    let hybrid = "12:memory:/user.slice\n1:name=systemd:/x\n0::/user.slice/app.scope\n";
    assert_eq!(
        own_path(hybrid),
        Some(PathBuf::from("user.slice/app.scope"))
    );
    assert_eq!(own_path("0::/\n"), Some(PathBuf::new()));
    assert_eq!(own_path("4:pids:/a\n"), None);
}

#[test]
fn a_delegated_subtree_moves_its_processes_to_a_leaf_and_holds_the_sandboxes() {
    let own = "user.slice/user@1000.service/app.slice/run-1.scope";
    let tree = delegated_tree(own, "41\n42\n");
    let own = Path::new(own);
    let hierarchy = Hierarchy::open_delegated_with(tree.clone(), &tree.mount, own, "r1").unwrap();

    let base = tree.mount.join(own);
    let writes = tree.writes.lock().unwrap().clone();
    let leaf_procs = base.join("supervisor/cgroup.procs");
    let moved: Vec<&str> = writes
        .iter()
        .filter(|(p, _)| *p == leaf_procs)
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(moved, ["41", "42"], "one pid per write");
    let rel = |file: &str| format!("{}/{file}", own.display());
    assert_eq!(
        tree.written(&rel("cgroup.subtree_control")).as_deref(),
        Some("+memory +cpu +pids")
    );
    assert_eq!(
        tree.written("cgroup.subtree_control"),
        None,
        "the root is not ours"
    );

    let cgroup = hierarchy.create("sb1", &limits()).unwrap();
    let dir = rel("sandbox-runner/r1/sb1");
    assert_eq!(
        tree.written(&format!("{dir}/cpu.max")).as_deref(),
        Some("50000 100000")
    );
    assert_eq!(
        cgroup.procs_files(),
        [tree.mount.join(&dir).join("cgroup.procs")]
    );
    cgroup.kill_and_remove().unwrap();
    hierarchy.remove_instance().unwrap();
    assert!(!tree.mount.join(rel("sandbox-runner/r1")).exists());
}

#[test]
fn a_runner_started_from_the_leaf_uses_the_same_base() {
    let tree = delegated_tree("alice/supervisor", "7\n");
    let own = Path::new("alice/supervisor");
    let hierarchy = Hierarchy::open_delegated_with(tree.clone(), &tree.mount, own, "r1").unwrap();
    assert_eq!(hierarchy.tops, [tree.mount.join("alice/sandbox-runner")]);
    assert!(!tree.mount.join("alice/supervisor/supervisor").exists());
}

#[test]
fn an_undelegated_cgroup_or_the_root_or_v1_is_refused_by_name() {
    let tree = delegated_tree("user.slice/session-3.scope", "9\n");
    let own = Path::new("user.slice/session-3.scope");
    read_only(&tree.mount.join(own).join("cgroup.procs"));
    match Hierarchy::open_delegated_with(tree.clone(), &tree.mount, own, "r1") {
        Err(CgroupError::NotDelegated(path)) => assert_eq!(path, tree.mount.join(own)),
        other => panic!("expected NotDelegated, got {other:?}"),
    }
    assert!(!tree.mount.join(own).join("supervisor").exists());

    let root = FakeTree::new(Version::V2, true);
    assert!(matches!(
        Hierarchy::open_delegated_with(root.clone(), &root.mount, Path::new(""), "r1"),
        Err(CgroupError::NotDelegated(path)) if path == root.mount
    ));

    let v1 = FakeTree::new(Version::V1, true);
    assert!(matches!(
        Hierarchy::open_delegated_with(v1.clone(), &v1.mount, Path::new("x"), "r1"),
        Err(CgroupError::NoUnified(_))
    ));
}

#[test]
fn a_subtree_without_the_cpu_controller_is_named() {
    let tree = delegated_tree("u/app.scope", "5\n");
    let own = Path::new("u/app.scope");
    fs::write(
        tree.mount.join(own).join("cgroup.controllers"),
        "memory pids\n",
    )
    .unwrap();
    match Hierarchy::open_delegated_with(tree.clone(), &tree.mount, own, "r1") {
        Err(CgroupError::MissingController { controller, path }) => {
            assert_eq!(controller, "cpu");
            assert_eq!(path, tree.mount.join(own));
        }
        other => panic!("expected MissingController, got {other:?}"),
    }
    assert!(
        !tree.mount.join(own).join("supervisor").exists(),
        "nothing moved"
    );
}
