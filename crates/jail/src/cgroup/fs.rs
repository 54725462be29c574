//! The file operations cgroups are made of, behind a trait: [`HostFs`] is the kernel's
//! cgroup file systems, and unit tests put a fake tree in a temporary folder in its
//! place, so that cgroup logic is tested without root.
//!
//! A cgroup file system is not an ordinary one: making a folder makes its control
//! files, and removing a folder removes them with it (it fails only while the cgroup
//! holds processes or child cgroups). A replacement must behave the same.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// What [`Hierarchy`](super::Hierarchy) and [`Cgroup`](super::Cgroup) do to the cgroup
/// file systems.
pub trait CgroupFs: Send + Sync + fmt::Debug {
    /// Whether `path` exists (a controller's file, a cgroup folder).
    fn exists(&self, path: &Path) -> bool;
    /// Reads a control file.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Writes a control file.
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
    /// Makes a cgroup folder (with its control files).
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Removes a cgroup folder (with its control files).
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// The folders in `path`: its child cgroups.
    fn list_dirs(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
    /// Whether this process may write the control file `path` (a delegated cgroup's
    /// files belong to its user).
    fn writable(&self, path: &Path) -> bool;
}

/// The host's mounted cgroup file systems.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostFs;

impl CgroupFs for HostFs {
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn read(&self, path: &Path) -> io::Result<String> {
        fs::read_to_string(path)
    }

    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        fs::write(path, value)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir(path)
    }

    fn list_dirs(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        Ok(fs::read_dir(path)?
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect())
    }

    fn writable(&self, path: &Path) -> bool {
        nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
    }
}
