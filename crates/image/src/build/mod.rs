//! `sandbox-runner image build`: everything a VM sandbox boots, made from Debian's
//! packages and this machine only (the crate's `builder` feature).
//!
//! An image is a folder with three files:
//! - `vmlinux`: Debian's cloud kernel (`apt-get download`, unpacked with `dpkg-deb`),
//!   taken out of its bzImage: an ELF with a PVH entry point, which both QEMU's microvm
//!   and Firecracker boot (Firecracker takes no bzImage);
//! - `initrd.img`: a small initramfs with the statically linked agent as `/init` and
//!   the virtio modules the kernel needs to reach its disk and its channel;
//! - `rootfs.ext4`: the read-only root, with bash, python3 and node, the toolchains of
//!   the languages the runner offers (its caller passes them: [`Toolchain`]), and their
//!   libraries.
//!
//! Builds are cached under `<out>/<key>`, where the key hashes every input (the kernel
//! package's file name, the agent binary, the languages whose toolchains it holds, the
//! name, size and time of every host file in the root, the paths the languages share),
//! and `<out>/current` points at the last one built. A second build with the same inputs
//! only checks them. Every build then prunes the cache: images other than
//! `current` go, unless a running runner holds a lease on them (`image prune` does only
//! that).
//!
//! - `mod.rs`: the subcommands' flags, the build's steps in order, the cache's lock;
//! - `kernel.rs`: Debian's kernel package and the modules the guest loads;
//! - `vmlinux.rs`: the ELF kernel taken out of the bzImage;
//! - `cpio.rs`: the initramfs archive;
//! - `rootfs.rs`: the root file system's files, staged and written as ext4;
//! - `toolchains.rs`: the offered languages' toolchains: which packages, which shared
//!   paths;
//! - `dpkg.rs`: this machine's Debian packages: dependencies, owners, files, and the
//!   alternatives links;
//! - `packages.rs`: the runner's package set, copied into the root;
//! - `cache.rs`: pruning the cache.

mod cache;
mod cpio;
mod dpkg;
mod kernel;
mod packages;
mod rootfs;
mod toolchains;
mod vmlinux;

pub use toolchains::Toolchain;

use crate::{INFO_FILE, INITRD_FILE, KERNEL_FILE, ROOTFS_FILE};
use serde::{Deserialize, Serialize};
use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Changes when the builder makes different images from the same inputs.
const BUILDER_VERSION: u32 = 5;
/// The number of steps the progress lines count.
const STEPS: u32 = 5;
/// Where `image build` and `image prune` keep the cache by default.
const DEFAULT_CACHE: &str = "/var/lib/sandbox-runner/images";

/// `sandbox-runner image build` settings.
#[derive(Debug, Clone, clap::Args)]
pub struct BuildArgs {
    /// Folder that holds the cached images, the downloads and `current`.
    #[arg(long, env = "RUNNER_IMAGE_CACHE", default_value = DEFAULT_CACHE)]
    pub out: PathBuf,
    /// A statically linked sandbox-agent to use as init; by default it is built from
    /// this source tree with `cargo rustc ... -C target-feature=+crt-static`.
    #[arg(long)]
    pub agent: Option<PathBuf>,
    /// The Debian kernel package (a meta package is followed to its kernel).
    #[arg(long, default_value = "linux-image-cloud-amd64")]
    pub kernel_package: String,
    /// The package store whose current set the image includes (none built: the
    /// image's Python and Node have their standard libraries only).
    #[arg(
        long,
        env = "RUNNER_PACKAGES_DIR",
        default_value = "/var/lib/sandbox-runner/packages"
    )]
    pub packages_dir: PathBuf,
}

/// `sandbox-runner image prune` settings.
#[derive(Debug, Clone, clap::Args)]
pub struct PruneArgs {
    /// Folder that holds the cached images.
    #[arg(long, env = "RUNNER_IMAGE_CACHE", default_value = DEFAULT_CACHE)]
    pub out: PathBuf,
}

/// A build step that failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: io::Error,
    },
    /// A tool could not be started.
    #[error("starting {tool}: {source}")]
    Spawn {
        /// The tool that was run.
        tool: String,
        /// What failed underneath.
        source: io::Error,
    },
    /// A tool failed.
    #[error("{tool} failed ({status}): {stderr}")]
    Tool {
        /// The tool that was run.
        tool: String,
        /// The HTTP status.
        status: std::process::ExitStatus,
        /// The end of what it wrote to standard error.
        stderr: String,
    },
    /// Another check failed.
    #[error("{0}")]
    Step(String),
    /// A package every image holds is not installed on this machine.
    #[error("the image's base packages are not all installed: {} (apt-get install them)", packages.join(", "))]
    BaseNotInstalled {
        /// The packages missing.
        packages: Vec<String>,
    },
    /// An offered language's toolchain is no installed package's.
    #[error(
        "language {language}: none of its Debian packages ({}) is installed, and no \
         installed package owns the files its toolchain requires: install them, or fix \
         the row's debian_packages (RUNNER_LANGUAGES)",
        packages.join(", ")
    )]
    NoToolchain {
        /// The language.
        language: String,
        /// The packages its row names.
        packages: Vec<String>,
    },
    /// A language shares a path the image cannot list.
    #[error("a language shares {0:?}: a shared path must be absolute and hold no newline")]
    BadSharedPath(PathBuf),
}

impl ImageError {
    fn io(action: &'static str, path: &Path, source: io::Error) -> Self {
        ImageError::Io {
            action,
            path: path.to_owned(),
            source,
        }
    }
}

/// What `image.json` records about a finished image.
#[derive(Debug, Serialize, Deserialize)]
struct ImageInfo {
    key: String,
    kernel_package: String,
    /// The languages whose toolchains it holds.
    languages: Vec<String>,
    /// The Debian packages whose files it holds.
    debian_packages: Vec<String>,
    root_files: usize,
    build_ms: u64,
}

/// `sandbox-runner image prune`: removes cached images other than `current` that no
/// running runner uses.
pub fn prune(args: &PruneArgs) -> Result<(), ImageError> {
    fs::create_dir_all(&args.out).map_err(|e| ImageError::io("creating", &args.out, e))?;
    let _lock = Lock::take(&args.out.join(".lock"))?;
    prune_and_report(&args.out)
}

/// Builds the image the inputs call for, with the `toolchains` of the languages the
/// runner offers, or finds it in the cache; returns its folder.
pub fn build(args: &BuildArgs, toolchains: &[Toolchain]) -> Result<PathBuf, ImageError> {
    let started = Instant::now();
    fs::create_dir_all(&args.out).map_err(|e| ImageError::io("creating", &args.out, e))?;
    let _lock = Lock::take(&args.out.join(".lock"))?;
    progress(1, &format!("kernel package {}", args.kernel_package));
    let kernel = kernel::fetch(&args.kernel_package, &args.out.join("downloads"))?;
    progress(2, "static agent");
    let agent = agent_binary(args)?;
    let languages: Vec<String> = toolchains.iter().map(|t| t.language.clone()).collect();
    progress(
        3,
        &format!("root file system: listing files ({})", languages.join(", ")),
    );
    let manifest = rootfs::Manifest::collect(toolchains)?;
    let packages = packages::PackageSet::current(&args.packages_dir)?;
    let key = cache_key(
        &kernel.package_file,
        &agent,
        &languages,
        &manifest,
        packages.as_ref(),
    );
    let dir = args.out.join(&key);
    if dir.join(INFO_FILE).exists() {
        eprintln!("image: cached, inputs unchanged");
    } else {
        make(&dir, &kernel, &agent, &manifest, packages.as_ref())?;
        let info = ImageInfo {
            key: key.clone(),
            kernel_package: kernel.package_file.clone(),
            languages,
            debian_packages: manifest.packages.iter().cloned().collect(),
            root_files: manifest.files.len(),
            build_ms: started.elapsed().as_millis() as u64,
        };
        let json = serde_json::to_vec_pretty(&info)
            .map_err(|e| ImageError::Step(format!("encoding {INFO_FILE}: {e}")))?;
        let info_path = dir.join(INFO_FILE);
        fs::write(&info_path, json).map_err(|e| ImageError::io("writing", &info_path, e))?;
    }
    point_current(&args.out, &key)?;
    prune_and_report(&args.out)?;
    summary(&dir, started)?;
    Ok(dir)
}

/// Prunes the cache (the caller holds the build lock) and says what went and what stays.
fn prune_and_report(out: &Path) -> Result<(), ImageError> {
    let pruned = cache::prune(out)?;
    for (key, bytes) in &pruned.removed {
        eprintln!(
            "image: removed the old image {key} ({:.1} MiB)",
            *bytes as f64 / (1 << 20) as f64
        );
    }
    for key in &pruned.in_use {
        eprintln!("image: kept the old image {key}: a running runner uses it");
    }
    Ok(())
}

/// Makes the image's files in `<dir>.partial`, then renames it into place.
fn make(
    dir: &Path,
    kernel: &kernel::Kernel,
    agent: &[u8],
    manifest: &rootfs::Manifest,
    packages: Option<&packages::PackageSet>,
) -> Result<(), ImageError> {
    let work = dir.with_extension("partial");
    if work.exists() {
        fs::remove_dir_all(&work).map_err(|e| ImageError::io("removing", &work, e))?;
    }
    fs::create_dir_all(&work).map_err(|e| ImageError::io("creating", &work, e))?;
    progress(4, "kernel and initramfs");
    let unpacked_dir = work.join("kernel-package");
    let unpacked = kernel::unpack(kernel, &unpacked_dir)?;
    let bzimage =
        fs::read(&unpacked.vmlinuz).map_err(|e| ImageError::io("reading", &unpacked.vmlinuz, e))?;
    let kernel_path = work.join(KERNEL_FILE);
    fs::write(&kernel_path, vmlinux::extract(&bzimage)?)
        .map_err(|e| ImageError::io("writing", &kernel_path, e))?;
    write_initramfs(&work.join(INITRD_FILE), agent, &unpacked.modules)?;
    remove(&unpacked_dir)?;
    progress(
        5,
        &format!(
            "root file system: {} files of {} Debian packages, {} MiB",
            manifest.files.len(),
            manifest.packages.len(),
            manifest.bytes() >> 20
        ),
    );
    let root = work.join("root");
    rootfs::stage(manifest, &root)?;
    let (mut bytes, mut files) = (manifest.bytes(), manifest.files.len());
    if let Some(set) = packages {
        eprintln!(
            "image: package set {} ({} MiB, {} entries)",
            set.key,
            set.bytes >> 20,
            set.entries
        );
        set.stage(&root)?;
        bytes += set.bytes;
        files += set.entries;
    }
    rootfs::make_image(&root, bytes, files, &work.join(ROOTFS_FILE))?;
    remove(&root)?;
    fs::rename(&work, dir).map_err(|e| ImageError::io("renaming into place", &work, e))
}

/// The initramfs: the agent as `/init`, the modules numbered in load order, and the
/// folders and console node the kernel and init expect.
fn write_initramfs(
    path: &Path,
    agent: &[u8],
    modules: &[(String, PathBuf)],
) -> Result<(), ImageError> {
    let file = fs::File::create(path).map_err(|e| ImageError::io("creating", path, e))?;
    let io_err = |e| ImageError::io("writing", path, e);
    let mut archive = cpio::Archive::new(io::BufWriter::new(file));
    for dir in ["dev", "proc", "sys", "newroot", "modules"] {
        archive.dir(dir, 0o755).map_err(io_err)?;
    }
    archive
        .char_device("dev/console", 0o600, 5, 1)
        .map_err(io_err)?;
    archive.file("init", 0o755, agent).map_err(io_err)?;
    for (i, (name, module)) in modules.iter().enumerate() {
        let data = fs::read(module).map_err(|e| ImageError::io("reading", module, e))?;
        archive
            .file(&format!("modules/{i:02}-{name}.ko"), 0o644, &data)
            .map_err(io_err)?;
    }
    archive.finish().map_err(io_err)?;
    Ok(())
}

/// The agent binary: the one given, or one built from this source tree; it must be
/// statically linked, since the initramfs holds no loader or libraries.
fn agent_binary(args: &BuildArgs) -> Result<Vec<u8>, ImageError> {
    let path = match &args.agent {
        Some(path) => path.clone(),
        None => build_agent(&args.out.join("agent-target"))?,
    };
    let bytes = fs::read(&path).map_err(|e| ImageError::io("reading", &path, e))?;
    if !is_static_elf(&bytes) {
        return Err(ImageError::Step(format!(
            "{} is not a statically linked ELF executable (it asks for a program \
             interpreter); build it with -C target-feature=+crt-static",
            path.display()
        )));
    }
    Ok(bytes)
}

fn build_agent(target_dir: &Path) -> Result<PathBuf, ImageError> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if !workspace.join("Cargo.toml").exists() {
        return Err(ImageError::Step(format!(
            "no source tree at {} to build the agent from: give --agent PATH",
            workspace.display()
        )));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args([
            "rustc",
            "--release",
            "--locked",
            "-q",
            "-p",
            "sandbox-agent",
        ])
        .args(["--bin", "sandbox-agent", "--target-dir"])
        .arg(target_dir)
        .args([
            "--",
            "-C",
            "target-feature=+crt-static",
            "-C",
            "strip=debuginfo",
        ]);
    run(&mut cmd, "cargo rustc (building the static agent)")?;
    Ok(target_dir.join("release/sandbox-agent"))
}

/// Whether an ELF64 file has no `PT_INTERP` program header (needs no loader).
fn is_static_elf(bytes: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    if !bytes.starts_with(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(32), u16_at(54), u16_at(56)) else {
        return false;
    };
    (0..phnum as usize).all(|i| {
        let at = phoff as usize + i * phentsize as usize;
        u32_at(at).is_some_and(|kind| kind != PT_INTERP)
    })
}

/// The key of an image: a hash of every input, the languages it holds included (two
/// selections of languages never share an image, even where their files are the same:
/// `image.json` tells a runner which languages to offer).
fn cache_key(
    kernel_package: &str,
    agent: &[u8],
    languages: &[String],
    manifest: &rootfs::Manifest,
    packages: Option<&packages::PackageSet>,
) -> String {
    let mut hasher = DefaultHasher::new();
    packages.map(|set| &set.key).hash(&mut hasher);
    BUILDER_VERSION.hash(&mut hasher);
    kernel_package.hash(&mut hasher);
    kernel::MODULES.hash(&mut hasher);
    rootfs::PACKAGES.hash(&mut hasher);
    agent.hash(&mut hasher);
    languages.hash(&mut hasher);
    manifest.files.hash(&mut hasher);
    manifest.shared.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Points `<out>/current` at the image `key` (replaced atomically).
fn point_current(out: &Path, key: &str) -> Result<(), ImageError> {
    let current = out.join("current");
    let next = out.join(".current.new");
    let _ = fs::remove_file(&next);
    std::os::unix::fs::symlink(key, &next).map_err(|e| ImageError::io("linking", &next, e))?;
    fs::rename(&next, &current).map_err(|e| ImageError::io("renaming", &current, e))
}

fn summary(dir: &Path, started: Instant) -> Result<(), ImageError> {
    println!("image {}", dir.display());
    let mut total = 0;
    for name in [KERNEL_FILE, INITRD_FILE, ROOTFS_FILE] {
        let path = dir.join(name);
        let size = fs::metadata(&path)
            .map_err(|e| ImageError::io("reading", &path, e))?
            .len();
        total += size;
        println!("  {name:<12} {:>8.1} MiB", size as f64 / (1 << 20) as f64);
    }
    println!(
        "  {:<12} {:>8.1} MiB",
        "total",
        total as f64 / (1 << 20) as f64
    );
    println!("  done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn progress(step: u32, what: &str) {
    eprintln!("image: [{step}/{STEPS}] {what}");
}

fn remove(dir: &Path) -> Result<(), ImageError> {
    fs::remove_dir_all(dir).map_err(|e| ImageError::io("removing", dir, e))
}

/// Copies the regular file `source` (whose metadata is `meta`) to `dest`, with its
/// modification time: Python takes a module's bytecode (`__pycache__/*.pyc`) only when it
/// records the source's size and modification time, and compiles the source on every
/// import otherwise (seconds for numpy in a TCG guest).
pub(crate) fn copy_file(source: &Path, dest: &Path, meta: &fs::Metadata) -> Result<(), ImageError> {
    fs::copy(source, dest).map_err(|e| ImageError::io("copying", source, e))?;
    let modified = meta
        .modified()
        .map_err(|e| ImageError::io("reading the time of", source, e))?;
    fs::File::open(dest)
        .and_then(|file| file.set_modified(modified))
        .map_err(|e| ImageError::io("setting the time of", dest, e))
}

/// Runs a tool to completion; its standard output on success.
fn run(cmd: &mut Command, tool: &str) -> Result<String, ImageError> {
    let out = cmd.output().map_err(|source| ImageError::Spawn {
        tool: tool.to_owned(),
        source,
    })?;
    if !out.status.success() {
        return Err(ImageError::Tool {
            tool: tool.to_owned(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// An exclusive lock on the cache, so that concurrent builds (parallel tests) take
/// turns; released when dropped (the descriptor closes).
struct Lock {
    _file: fs::File,
}

impl Lock {
    fn take(path: &Path) -> Result<Lock, ImageError> {
        let file = fs::File::create(path).map_err(|e| ImageError::io("creating", path, e))?;
        // SAFETY: flock takes a descriptor we own and a constant; no memory is shared.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(ImageError::io("locking", path, io::Error::last_os_error()));
        }
        Ok(Lock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_and_dynamic_executables_are_told_apart() {
        let dynamic = fs::read("/bin/sh").expect("a dynamic /bin/sh");
        assert!(!is_static_elf(&dynamic));
        assert!(!is_static_elf(b"#!/bin/sh\n"));
    }

    #[test]
    fn two_selections_of_languages_never_share_an_image() {
        // The same files: a language whose toolchain the base packages already hold.
        let manifest = rootfs::Manifest {
            files: [(PathBuf::from("/usr/bin/bash"), (1, 2))]
                .into_iter()
                .collect(),
            packages: Default::default(),
            shared: Vec::new(),
        };
        let key = |languages: &[&str]| {
            let languages: Vec<String> = languages.iter().map(|l| l.to_string()).collect();
            cache_key("linux.deb", b"agent", &languages, &manifest, None)
        };
        assert_eq!(key(&["bash", "awk"]), key(&["bash", "awk"]));
        assert_ne!(key(&["bash", "awk"]), key(&["bash"]));
        assert_ne!(key(&["bash", "awk"]), key(&["bash", "sql"]));
    }
}
