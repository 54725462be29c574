//! The cgroup logic against fake v1 and v2 trees in a temporary folder: no root needed.

use super::*;
use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};
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
        fs::write(path, value)?;
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
    let procs: Vec<PathBuf> = ["memory", "cpu", "pids"]
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
