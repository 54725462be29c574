//! What the integration tests share: a store in a temporary folder that is removed
//! even though its sets are read-only, and checks on trees.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox_packages::{BuildSpec, Store};

/// A store under a temporary folder.
pub struct TestStore {
    pub store: Store,
    dir: tempfile::TempDir,
}

impl TestStore {
    pub fn new() -> TestStore {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let store = Store::open(dir.path().join("store")).expect("a store");
        TestStore { store, dir }
    }

    /// A resolver of this store for `/usr/bin/python3`, whose pip runs as this process,
    /// in the store's `tmp/`.
    pub fn resolver(
        &self,
        base: Option<sandbox_packages::PackageSet>,
        policy: sandbox_packages::Policy,
    ) -> sandbox_packages::Resolver {
        let confinement =
            std::sync::Arc::new(sandbox_packages::Unconfined::new(self.store.tmp_dir()));
        sandbox_packages::Resolver::new(
            self.store.clone(),
            base,
            policy,
            "/usr/bin/python3",
            confinement,
        )
    }

    pub fn root(&self) -> &Path {
        self.store.root()
    }

    /// The entries of a folder of the store, by name.
    pub fn entries(&self, sub: &str) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.root().join(sub))
            .expect("a folder of the store")
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        // The sets are read-only: an ordinary user must make them writable to remove them.
        let mut stack = vec![self.dir.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o755));
            if let Ok(entries) = fs::read_dir(&dir) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(e.path());
                    }
                }
            }
        }
    }
}

/// A spec for a small set, with a generous timeout.
pub fn spec(python: &[&str], node: &[&str]) -> BuildSpec {
    BuildSpec {
        python: python.iter().map(|s| s.to_string()).collect(),
        node: node.iter().map(|s| s.to_string()).collect(),
        timeout: Duration::from_secs(600),
        ..BuildSpec::default()
    }
}

/// Every entry under `dir` (itself included): no write bit, directories and
/// executables 0555, other files 0444.
pub fn assert_read_only(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(p) = stack.pop() {
        let m = fs::symlink_metadata(&p).unwrap();
        if m.file_type().is_symlink() {
            continue;
        }
        let mode = m.mode() & 0o7777;
        if m.is_dir() {
            assert_eq!(mode, 0o555, "{}", p.display());
            for e in fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        } else {
            assert!(
                mode == 0o444 || mode == 0o555,
                "{} has mode {mode:o}",
                p.display()
            );
        }
        seen += 1;
    }
    assert!(seen > 0);
}

/// Runs `python3 -c code` with `pythonpath` first on `sys.path` and without the
/// host's site-packages (`-I -S`), from a folder elsewhere.
pub fn python_imports(pythonpath: &[PathBuf], code: &str) -> Result<String, String> {
    let joined = std::env::join_paths(pythonpath).unwrap();
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-I", "-S", "-c"])
        .arg(format!(
            "import sys; sys.path[:0] = {:?}.split(':'); {code}",
            joined.to_string_lossy()
        ))
        .current_dir("/")
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}
