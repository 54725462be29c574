//! The guest's root file system: this machine's bash, python3 and node, the toolchains
//! of the languages the runner offers (see [`toolchains`](super::toolchains)): the
//! files of their Debian packages and of the installed packages those depend on, the
//! alternatives links that lead to them, every shared library they load, and the paths
//! the languages share into sandboxes; a few base tools for shell programs; and a
//! generated /etc. Written into a read-only ext4 image with `mkfs.ext4 -d`, which needs
//! no mount.

use super::{dpkg, run, toolchains, ImageError, Toolchain};
use sandbox_jail::layout::IMAGE_SHARED_PATHS;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// The Debian packages every image starts from (with the packages they depend on): the
/// three interpreters, and the tools shell programs expect (coreutils, grep, sed, awk,
/// find, setsid, ps, kill).
pub const PACKAGES: [&str; 15] = [
    "bash",
    "dash",
    "coreutils",
    "grep",
    "sed",
    "mawk",
    "findutils",
    "util-linux",
    "procps",
    "python3-minimal",
    "python3.11-minimal",
    "python3.11",
    "python3",
    "nodejs",
    // Where the runner opens hosts, the usual way to reach them (through its proxy).
    "curl",
];

/// Folders copied whole (Python's standard library is spread over several packages).
const TREES: [&str; 1] = ["/usr/lib/python3.11"];

/// What the guest never needs: documentation, translations, shell completions, npm,
/// and the packages' configuration under /etc (a sandbox's /etc is generated; what a
/// toolchain needs of the host's is its row's `share`, copied on its own). Headers
/// (`/usr/include`) stay: C and C++ programs include them.
const EXCLUDED_PREFIXES: [&str; 10] = [
    "/usr/share/doc",
    "/usr/share/man",
    "/usr/share/info",
    "/usr/share/locale",
    "/usr/share/lintian",
    "/usr/share/bash-completion",
    "/usr/share/zsh",
    "/usr/share/systemtap",
    "/usr/lib/node_modules",
    "/etc",
];

/// Folder names skipped inside [`TREES`]: third-party packages and the static library.
const EXCLUDED_NAMES: [&str; 3] = [
    "dist-packages",
    "site-packages",
    "config-3.11-x86_64-linux-gnu",
];

/// The host's CA certificates (links into `/usr/share/ca-certificates`, copied with
/// their targets, and the bundle), which the guest's sandbox shows as a host's does, so
/// that TLS clients inside verify what the host's would through the runner's proxy.
const CA_CERTIFICATES: &str = "/etc/ssl/certs";

/// Top-level folders of a merged-/usr host, recreated as the same symlinks.
const USR_LINKS: [&str; 4] = ["bin", "sbin", "lib", "lib64"];

/// Empty folders the guest's init mounts on or the programs use.
const DIRS: [&str; 9] = [
    "dev",
    "proc",
    "sys",
    "tmp",
    "home/sandbox",
    "root",
    "run",
    "var/tmp",
    "usr/local/bin",
];

/// The host files the root file system is made of, with what identifies their
/// content (size and modification time), for the cache key.
pub struct Manifest {
    /// Host path -> (size, mtime).
    pub files: BTreeMap<PathBuf, (u64, i64)>,
    /// The Debian packages whose files it holds.
    pub packages: BTreeSet<String>,
    /// The host paths the languages share into sandboxes (copied, and listed in
    /// [`IMAGE_SHARED_PATHS`]).
    pub shared: Vec<PathBuf>,
}

impl Manifest {
    /// Lists the files: those of the base packages, of the toolchains' packages and of
    /// the installed packages they depend on; the trees; the shared paths; the
    /// alternatives links to any of them; and the shared libraries of every ELF file
    /// among them.
    pub fn collect(toolchains: &[Toolchain]) -> Result<Manifest, ImageError> {
        let installed = dpkg::Installed::read()?;
        let roots = toolchains::roots(&installed, &PACKAGES, toolchains)?;
        let packages = installed.closure(roots.iter().map(String::as_str));
        let mut paths: BTreeSet<PathBuf> = installed
            .files(&packages)?
            .into_iter()
            .filter(|p| !excluded(p))
            .collect();
        for tree in TREES {
            walk(Path::new(tree), &EXCLUDED_NAMES, &mut paths)?;
        }
        let shared = toolchains::shared_paths(toolchains)?;
        for path in &shared {
            shared_files(path, &mut paths)?;
        }
        shared_files(Path::new(CA_CERTIFICATES), &mut paths)?;
        let links = dpkg::alternative_links(&paths)?;
        paths.extend(links.into_iter().filter(|link| !excluded(link)));
        let elves: Vec<PathBuf> = paths.iter().filter(|p| is_elf(p)).cloned().collect();
        for elf in elves {
            paths.extend(libraries_of(&elf)?);
        }
        let mut files = BTreeMap::new();
        for path in paths {
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue; // listed by dpkg but removed since
            };
            if meta.is_file() || meta.file_type().is_symlink() {
                files.insert(path, (meta.size(), meta.mtime()));
            }
        }
        Ok(Manifest {
            files,
            packages,
            shared,
        })
    }

    /// The bytes of all regular files.
    pub fn bytes(&self) -> u64 {
        self.files.values().map(|(size, _)| size).sum()
    }
}

fn excluded(path: &Path) -> bool {
    EXCLUDED_PREFIXES.iter().any(|x| path.starts_with(x))
}

/// A shared path's files: every file below a folder; a file or a link itself (and
/// below a link's target when that is a folder); nothing when the host has no such
/// path (the jail skips it too).
fn shared_files(path: &Path, into: &mut BTreeSet<PathBuf>) -> Result<(), ImageError> {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return Ok(());
    };
    if meta.is_dir() {
        return walk(path, &[], into);
    }
    into.insert(path.to_owned());
    match fs::canonicalize(path) {
        Ok(target) if meta.file_type().is_symlink() && target.is_dir() => walk(&target, &[], into),
        _ => Ok(()),
    }
}

/// Every file and link below `dir`, but in folders named in `skip`.
fn walk(dir: &Path, skip: &[&str], into: &mut BTreeSet<PathBuf>) -> Result<(), ImageError> {
    let entries = fs::read_dir(dir).map_err(|e| ImageError::io("reading", dir, e))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        match entry.file_type() {
            Ok(t) if t.is_dir() => {
                if !skip.iter().any(|x| name == *x) {
                    walk(&path, skip, into)?;
                }
            }
            Ok(_) => {
                into.insert(path);
            }
            Err(_) => {}
        }
    }
    Ok(())
}

fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
        && fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
        && magic == *b"\x7fELF"
}

/// The shared libraries `ldd` resolves for an ELF file (none for static ones).
fn libraries_of(elf: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let out = Command::new("ldd")
        .arg(elf)
        .output()
        .map_err(|e| ImageError::io("running ldd on", elf, e))?;
    // ldd fails for static files and for some data ELFs: they need nothing.
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=> ") {
                Some((_, rest)) => rest,
                None => line.trim(),
            };
            path.split_whitespace()
                .next()
                .filter(|p| p.starts_with('/'))
                .map(PathBuf::from)
        })
        .collect())
}

/// Copies the manifest's files into `root`, keeping symlinks as symlinks (and adding
/// their targets), and writes the folders and /etc the guest needs.
pub fn stage(manifest: &Manifest, root: &Path) -> Result<(), ImageError> {
    make_dir(root)?;
    for link in USR_LINKS {
        let host = Path::new("/").join(link);
        if let Ok(target) = fs::read_link(&host) {
            symlink(&target, &root.join(link))?;
        }
    }
    for dir in DIRS {
        make_dir(&root.join(dir))?;
    }
    let mut todo: Vec<PathBuf> = manifest.files.keys().cloned().collect();
    let mut done = BTreeSet::new();
    while let Some(path) = todo.pop() {
        if !done.insert(path.clone()) {
            continue;
        }
        if let Some(target) = copy_one(&path, root)? {
            todo.push(target);
        }
    }
    write_etc(root, &manifest.shared)
}

/// Copies one host file into `root` under its real folder (so that `/bin/x` lands in
/// `usr/bin/x` on a merged-/usr host); returns a symlink's target, to copy too.
fn copy_one(path: &Path, root: &Path) -> Result<Option<PathBuf>, ImageError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(None);
    };
    let real_parent =
        fs::canonicalize(parent).map_err(|e| ImageError::io("resolving", parent, e))?;
    let dest_dir = root.join(relative(&real_parent));
    make_dir(&dest_dir)?;
    let dest = dest_dir.join(name);
    let meta = fs::symlink_metadata(path).map_err(|e| ImageError::io("reading", path, e))?;
    if meta.file_type().is_symlink() {
        let target = fs::read_link(path).map_err(|e| ImageError::io("reading link", path, e))?;
        if fs::symlink_metadata(&dest).is_err() {
            symlink(&target, &dest)?;
        }
        let resolved = real_parent.join(&target);
        return Ok(fs::symlink_metadata(&resolved).is_ok().then_some(resolved));
    }
    if meta.is_file() && fs::symlink_metadata(&dest).is_err() {
        super::copy_file(path, &dest, &meta)?;
    }
    Ok(None)
}

fn relative(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect()
}

/// A minimal /etc: the one every sandbox gets (`sandbox_jail::layout`), the loader
/// cache, and the list of the paths the languages share (the guest's init hands it to
/// the jail).
fn write_etc(root: &Path, shared: &[PathBuf]) -> Result<(), ImageError> {
    let etc = root.join("etc");
    make_dir(&etc)?;
    for (name, text) in sandbox_jail::layout::etc_files() {
        let path = etc.join(name);
        fs::write(&path, text).map_err(|e| ImageError::io("writing", &path, e))?;
    }
    let list = root.join(IMAGE_SHARED_PATHS.trim_start_matches('/'));
    let lines: String = shared
        .iter()
        .map(|path| format!("{}\n", path.display()))
        .collect();
    fs::write(&list, lines).map_err(|e| ImageError::io("writing", &list, e))?;
    let cache = Path::new("/etc/ld.so.cache");
    if cache.exists() {
        fs::copy(cache, etc.join("ld.so.cache"))
            .map_err(|e| ImageError::io("copying", cache, e))?;
    }
    Ok(())
}

/// Writes the staged tree into an ext4 image of a size that fits it.
pub fn make_image(root: &Path, bytes: u64, files: usize, image: &Path) -> Result<(), ImageError> {
    let mib = 1024 * 1024;
    // Room for metadata and block rounding of many small files.
    let size_mib = (bytes + bytes / 5) / mib + 32;
    let inodes = files * 2 + 4096;
    let mut cmd = Command::new("mkfs.ext4");
    cmd.args([
        "-q",
        "-F",
        "-L",
        "sandbox-root",
        "-O",
        "^has_journal",
        "-m",
        "0",
    ])
    .arg("-N")
    .arg(inodes.to_string())
    .arg("-d")
    .arg(root)
    .arg(image)
    .arg(format!("{size_mib}M"));
    run(&mut cmd, "mkfs.ext4 -d (is e2fsprogs installed?)")?;
    Ok(())
}

fn make_dir(path: &Path) -> Result<(), ImageError> {
    fs::create_dir_all(path).map_err(|e| ImageError::io("creating", path, e))
}

fn symlink(target: &Path, link: &Path) -> Result<(), ImageError> {
    std::os::unix::fs::symlink(target, link).map_err(|e| ImageError::io("linking", link, e))
}
