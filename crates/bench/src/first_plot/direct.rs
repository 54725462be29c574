//! (a): the program spawned directly on the host, with the same package set on
//! `PYTHONPATH` and a font cache of its own, in folders it removes at the end.

use super::program::{check_described, tail, PLOT, PNG_MAGIC, SCRIPT};
use anyhow::{ensure, Context};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::process::Command;

/// The interpreter the sandboxes run, spawned directly.
const PYTHON: &str = "/usr/bin/python3";
/// The runner's package store (`RUNNER_PACKAGES_DIR`'s default,
/// `sandbox_packages::DEFAULT_STORE`: the bench starts its runners with a clean
/// environment).
pub const PACKAGES_DIR: &str = "/var/lib/sandbox-runner/packages";

/// The direct spawn's folders: a home (where matplotlib keeps its font cache) and a
/// working folder holding `script.py` and `outputs/`.
pub struct Direct {
    root: PathBuf,
    home: PathBuf,
    work: PathBuf,
}

impl Direct {
    /// Its folders, made, with the program written.
    pub fn new() -> anyhow::Result<Direct> {
        let root = std::env::temp_dir().join(format!("bench-first-plot-{}", std::process::id()));
        let home = root.join("home");
        let work = root.join("work");
        for dir in [&home, &work.join("outputs")] {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let script = work.join("script.py");
        std::fs::write(&script, SCRIPT).with_context(|| format!("writing {}", script.display()))?;
        Ok(Direct { root, home, work })
    }

    /// (a): `/usr/bin/python3 script.py` in the working folder, with the agent's clean
    /// environment plus the set on `PYTHONPATH`, `MPLBACKEND=Agg` and the bench's home.
    pub async fn run(&self) -> anyhow::Result<()> {
        let plot = self.work.join("outputs").join(PLOT);
        match std::fs::remove_file(&plot) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", plot.display())),
        }
        let python = Path::new(PACKAGES_DIR).join("current").join("python");
        let output = Command::new(PYTHON)
            .arg("script.py")
            .current_dir(&self.work)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .env("TMPDIR", "/tmp")
            .env("PYTHONPATH", python)
            .env("MPLBACKEND", "Agg")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| format!("spawning {PYTHON}"))?;
        ensure!(
            output.status.success(),
            "exited with {}; stderr: {}",
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr))
        );
        check_described(&String::from_utf8_lossy(&output.stdout))?;
        let png = std::fs::read(&plot).with_context(|| format!("reading {}", plot.display()))?;
        ensure!(
            png.starts_with(PNG_MAGIC),
            "{} is not a PNG",
            plot.display()
        );
        Ok(())
    }

    /// Removes its folders.
    pub fn remove(&self) -> anyhow::Result<()> {
        std::fs::remove_dir_all(&self.root)
            .with_context(|| format!("removing {}", self.root.display()))
    }
}
