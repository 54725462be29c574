//! What the sandbox's tree takes from the host, read once by whoever makes sandboxes
//! (a template before it serves, a jail before it clones) rather than by each sandbox in
//! its fresh namespaces.

use super::{make_dir, overlay, prepare, proc, set_mode, Stage};
use crate::error::JailError;
use nix::errno::Errno;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// Host folders shown read-only in every sandbox, through a private overlay each
/// (symlinks, as on merged-/usr hosts, are copied as symlinks).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];
/// Host paths under /etc that programs need: folders are overlaid, files copied
/// (`/etc/fonts`: fontconfig, which matplotlib asks for the system's fonts;
/// `/etc/ssl/certs`: the host's CA certificates, whose links point into
/// `/usr/share/ca-certificates`, so that a TLS client inside verifies what the host's
/// would, through the runner's proxy where the operator opened hosts; not the rest of
/// `/etc/ssl`, whose `private` holds the host's keys).
const ETC_PATHS: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/fonts",
    "/etc/ssl/certs",
];

/// The host as every sandbox's tree shows it: which system paths exist and what each
/// is, and which of `/proc`'s masked files only root may open. A path that appears on
/// the host later is shown by makers started after it; one that goes away is skipped.
#[derive(Debug, Clone)]
pub struct HostView {
    system: Vec<SharedPath>,
    etc: Vec<SharedPath>,
    closed_proc_files: Vec<&'static str>,
}

impl HostView {
    /// Reads the host: the system folders, the parts of /etc programs need and Debian's
    /// Python configuration folders (`/etc/python3*`), and `/proc`'s modes.
    pub fn read() -> Result<HostView, JailError> {
        let known = |paths: &[&str]| -> Vec<SharedPath> {
            paths
                .iter()
                .filter_map(|path| SharedPath::read(Path::new(path)))
                .collect()
        };
        let mut etc = known(ETC_PATHS);
        etc.extend(python_etc()?.iter().filter_map(|p| SharedPath::read(p)));
        Ok(HostView {
            system: known(SYSTEM_DIRS),
            etc,
            closed_proc_files: proc::closed_proc_files(),
        })
    }

    /// The system folders, placed below `root`.
    pub(super) fn share_system(&self, root: &Path, stage: &Stage) -> Result<(), JailError> {
        self.system
            .iter()
            .try_for_each(|path| path.place(root, stage))
    }

    /// The parts of /etc, placed below `root` (its /etc made already): the folders too
    /// with `folders` (else a copy of them is shown, see [`EtcTree`](super::EtcTree)).
    pub(super) fn share_etc(
        &self,
        root: &Path,
        stage: &Stage,
        folders: bool,
    ) -> Result<(), JailError> {
        self.etc
            .iter()
            .filter(|path| folders || !matches!(path.kind, Kind::Folder))
            .try_for_each(|path| path.place(root, stage))
    }

    /// What a copy of the host's `/etc` folders (see [`EtcTree`](super::EtcTree)) holds:
    /// the folders of the host's parts of /etc, and what of `shared` (the languages'
    /// folders) is below `/etc`.
    pub fn etc_copied(&self, shared: &[PathBuf]) -> Vec<PathBuf> {
        let own = self
            .etc
            .iter()
            .filter(|path| matches!(path.kind, Kind::Folder));
        own.map(|path| path.host.clone())
            .chain(
                shared
                    .iter()
                    .filter(|path| path.starts_with("/etc"))
                    .cloned(),
            )
            .collect()
    }

    /// Whether the masked `/proc` file `name` is one only root may open.
    pub(super) fn proc_file_is_closed(&self, name: &str) -> bool {
        self.closed_proc_files.contains(&name)
    }
}

/// Debian's Python reads its site configuration from /etc/python3 and /etc/python3.X.
fn python_etc() -> Result<Vec<PathBuf>, JailError> {
    let entries = fs::read_dir("/etc").map_err(|source| prepare(Path::new("/etc"), source))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("python3"))
        .map(|entry| entry.path())
        .collect();
    paths.sort();
    Ok(paths)
}

/// A host path shown at the same place in the sandbox.
#[derive(Debug, Clone)]
pub(super) struct SharedPath {
    host: PathBuf,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// Copied as a symlink to the same target.
    Symlink(PathBuf),
    /// Shown through a read-only overlay of its own.
    Folder,
    /// Copied (its content as it is when the sandbox is made), read-only.
    File,
}

impl SharedPath {
    /// `host` as it is now; `None` when the host has no such path.
    pub(super) fn read(host: &Path) -> Option<SharedPath> {
        let meta = fs::symlink_metadata(host).ok()?;
        let kind = if meta.file_type().is_symlink() {
            Kind::Symlink(fs::read_link(host).ok()?)
        } else if meta.is_dir() {
            Kind::Folder
        } else {
            Kind::File
        };
        Some(SharedPath {
            host: host.to_owned(),
            kind,
        })
    }

    /// The path below `root`: nothing when the host's folder or file has gone since it
    /// was read.
    pub(super) fn place(&self, root: &Path, stage: &Stage) -> Result<(), JailError> {
        let host = &self.host;
        let target = root.join(host.strip_prefix("/").unwrap_or(host));
        if let Some(parent) = target.parent().filter(|p| !p.exists()) {
            make_dir(parent, 0o755)?;
        }
        match &self.kind {
            Kind::Symlink(link) => {
                symlink(link, &target).map_err(|source| prepare(&target, source))
            }
            Kind::Folder => {
                make_dir(&target, 0o755)?;
                match overlay(host, &target, stage) {
                    Err(JailError::Mount {
                        source: Errno::ENOENT,
                        ..
                    }) if !host.exists() => Ok(()),
                    result => result,
                }
            }
            Kind::File => match fs::copy(host, &target) {
                Err(e) if e.kind() == ErrorKind::NotFound && !host.exists() => Ok(()),
                Err(source) => Err(prepare(&target, source)),
                Ok(_) => set_mode(&target, 0o444),
            },
        }
    }
}
