//! The agent's build: a digest of the sources the agent is compiled from (this crate and
//! the workspace crates it depends on, and the lock file), as `SANDBOX_AGENT_BUILD`. A
//! runner executes a separate `sandbox-agent` binary as its sandboxes' agent only when
//! that binary says the same build as the runner's own copy of this crate: the two speak
//! the agent's private protocol (its arguments, descriptors and frames), which no
//! version number tracks.

use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace crates the agent is compiled from, beside this one.
const CRATES: [&str; 4] = ["agent", "protocol", "jail", "archive"];
/// How deep a source tree may nest (a loop of links would otherwise never end).
const DEPTH_MAX: usize = 16;

fn main() {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let crates = here.parent().expect("crates/agent has a parent");
    let mut files = Vec::new();
    for name in CRATES {
        let dir = crates.join(name);
        for part in ["src", "Cargo.toml"] {
            let path = dir.join(part);
            println!("cargo:rerun-if-changed={}", path.display());
            collect(&path, 0, &mut files);
        }
    }
    let lock = crates.join("../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    files.push(lock);
    files.sort();
    let mut digest = Sha256::new();
    for file in &files {
        let name = file.strip_prefix(crates).unwrap_or(file);
        digest.update(name.to_string_lossy().as_bytes());
        digest.update([0]);
        let bytes = fs::read(file).unwrap_or_default();
        digest.update((bytes.len() as u64).to_le_bytes());
        digest.update(&bytes);
    }
    let hex: String = digest.finalize()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    println!("cargo:rustc-env=SANDBOX_AGENT_BUILD={hex}");
}

/// Every file at or below `path`.
fn collect(path: &Path, depth: usize, files: &mut Vec<PathBuf>) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_file() {
        files.push(path.to_owned());
    } else if meta.is_dir() && depth < DEPTH_MAX {
        if let Ok(entries) = fs::read_dir(path) {
            for entry in entries.flatten() {
                collect(&entry.path(), depth + 1, files);
            }
        }
    }
}
