//! sandbox-image: the image VM sandboxes boot.
//!
//! An image is a folder with three files, [`KERNEL_FILE`], [`INITRD_FILE`] and
//! [`ROOTFS_FILE`], and [`INFO_FILE`], which marks it finished. What a running runner
//! needs is always here: those names, and the [`Lease`] it holds on the image it boots
//! from (a shared `flock`), which keeps pruning from removing it.
//!
//! With the `builder` feature, [`build`] is `sandbox-runner image build|prune`: it makes
//! images from Debian's packages and this machine (shelling out to `cargo`, `apt-get`,
//! `dpkg-deb`, `dpkg-query`, `ldd` and `mkfs.ext4`), with the toolchains of the
//! languages its caller offers, caches them and prunes the cache. Only the runner's
//! binary enables it: programs that embed the runner library (sandbox-mcp) do not
//! compile the builder.
//!
//! This crate boots nothing: the vm backend of `sandbox-runner` does.

#[cfg(feature = "builder")]
pub mod build;
mod lease;

pub use lease::{lease, Lease, LeaseError};

/// The languages whose toolchains the image in `dir` holds, as its [`INFO_FILE`] lists
/// them (`None`: no such list, as in an image older than the list, or a folder not
/// made by `image build`).
pub fn languages(dir: &std::path::Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(dir.join(INFO_FILE)).ok()?;
    let info: serde_json::Value = serde_json::from_str(&text).ok()?;
    let names = info.get("languages")?.as_array()?;
    names
        .iter()
        .map(|n| n.as_str().map(str::to_owned))
        .collect()
}

/// The file that marks a finished image and describes it.
pub const INFO_FILE: &str = "image.json";
/// The image's files.
pub const KERNEL_FILE: &str = "vmlinux";
/// See [`KERNEL_FILE`].
pub const INITRD_FILE: &str = "initrd.img";
/// See [`KERNEL_FILE`].
pub const ROOTFS_FILE: &str = "rootfs.ext4";
