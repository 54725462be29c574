//! The guest kernel: Debian's kernel package, fetched with `apt-get download` and
//! unpacked with `dpkg-deb`, and the virtio modules the guest must load itself.

use super::{run, ImageError};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The modules the guest needs, dependencies first: the virtio core and its MMIO
/// transport, the block device (root image), the serial ports (QEMU's agent channel),
/// the entropy device, vsock over virtio (Firecracker's agent channel), and overlayfs
/// (the jail's read-only views of the system folders). Debian's cloud kernel builds
/// them as modules; ext4 is built in.
pub const MODULES: [&str; 10] = [
    "virtio_ring",
    "virtio",
    "virtio_mmio",
    "virtio_blk",
    "virtio_console",
    "virtio-rng",
    "vsock",
    "vmw_vsock_virtio_transport_common",
    "vmw_vsock_virtio_transport",
    "overlay",
];

/// The unpacked kernel package.
pub struct Kernel {
    /// The package's file name (name, version, architecture): part of the cache key.
    pub package_file: String,
    /// The downloaded package.
    pub deb: PathBuf,
}

/// A kernel image and the module files, in load order.
pub struct Unpacked {
    /// The bzImage.
    pub vmlinuz: PathBuf,
    /// `(name, path)` of each of [`MODULES`].
    pub modules: Vec<(String, PathBuf)>,
}

/// Finds the kernel package that `meta` (for example `linux-image-cloud-amd64`) depends
/// on, and downloads it into `downloads` unless it is there already.
pub fn fetch(meta: &str, downloads: &Path) -> Result<Kernel, ImageError> {
    let package = real_package(meta)?;
    fs::create_dir_all(downloads).map_err(|e| ImageError::io("creating", downloads, e))?;
    if let Some(kernel) = find_deb(downloads, &package)? {
        return Ok(kernel);
    }
    let mut cmd = Command::new("apt-get");
    cmd.args(["download", "-q", &package])
        .current_dir(downloads);
    run(
        &mut cmd,
        "apt-get download (is the package index current? run apt-get update)",
    )?;
    find_deb(downloads, &package)?.ok_or_else(|| {
        ImageError::Step(format!(
            "apt-get download {package} left no .deb in {}",
            downloads.display()
        ))
    })
}

/// The versioned kernel package a meta package depends on (the meta package holds no
/// kernel); a versioned name is its own answer.
fn real_package(meta: &str) -> Result<String, ImageError> {
    let mut cmd = Command::new("apt-cache");
    cmd.args(["depends", meta]);
    let out = run(&mut cmd, "apt-cache depends")?;
    let found = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|d| d.starts_with("linux-image-"))
        .map(str::to_owned);
    Ok(found.unwrap_or_else(|| meta.to_owned()))
}

fn find_deb(downloads: &Path, package: &str) -> Result<Option<Kernel>, ImageError> {
    let prefix = format!("{package}_");
    let entries = fs::read_dir(downloads).map_err(|e| ImageError::io("reading", downloads, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && name.ends_with(".deb") {
            return Ok(Some(Kernel {
                package_file: name,
                deb: entry.path(),
            }));
        }
    }
    Ok(None)
}

/// Unpacks the package into `dir` and finds the kernel image and the modules.
pub fn unpack(kernel: &Kernel, dir: &Path) -> Result<Unpacked, ImageError> {
    let mut cmd = Command::new("dpkg-deb");
    cmd.arg("-x").arg(&kernel.deb).arg(dir);
    run(&mut cmd, "dpkg-deb -x")?;
    let boot = dir.join("boot");
    let vmlinuz = files_under(&boot)?
        .into_iter()
        .find(|p| file_name(p).starts_with("vmlinuz-"))
        .ok_or_else(|| ImageError::Step(format!("no vmlinuz-* in {}", boot.display())))?;
    let all = files_under(&dir.join("lib/modules"))?;
    let modules = MODULES
        .iter()
        .map(|name| {
            let want = format!("{name}.ko");
            all.iter()
                .find(|p| file_name(p) == want)
                .map(|p| (name.to_string(), p.clone()))
                .ok_or_else(|| {
                    ImageError::Step(format!(
                        "module {want} is not in {}; a kernel with it built in needs \
                         no module, but this builder expects Debian's cloud kernel",
                        kernel.package_file
                    ))
                })
        })
        .collect::<Result<_, _>>()?;
    Ok(Unpacked { vmlinuz, modules })
}

/// Every file below `dir`, recursively.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let entries = fs::read_dir(&d).map_err(|e| ImageError::io("reading", &d, e))?;
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => todo.push(entry.path()),
                Ok(t) if t.is_file() => found.push(entry.path()),
                _ => {}
            }
        }
    }
    Ok(found)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
