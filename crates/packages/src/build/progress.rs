//! [`Progress`]: the steps of a build as the caller shows them, one line each.

use std::fmt;

/// A step of a build, for the caller to show (its `Display` is one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Resolving the Python requirements.
    ResolvingPython {
        /// Requirement lines.
        requirements: usize,
    },
    /// Resolving the npm packages.
    ResolvingNode {
        /// Package specs.
        packages: usize,
    },
    /// Resolved: the set's key, and whether it exists already.
    Resolved {
        /// The key.
        key: String,
        /// Python wheels in the set.
        python: usize,
        /// npm packages in the set.
        node: usize,
        /// The set exists: nothing to install.
        cached: bool,
    },
    /// Installing the wheels.
    InstallingPython {
        /// Wheels.
        wheels: usize,
    },
    /// Installing the npm lock.
    InstallingNode {
        /// Packages.
        packages: usize,
    },
    /// Installed and measured.
    Installed {
        /// Bytes of `python/`.
        python_bytes: u64,
        /// Bytes of `node/`.
        node_bytes: u64,
    },
    /// `current` points at the set.
    Current {
        /// The key.
        key: String,
    },
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Progress::ResolvingPython { requirements } => {
                write!(f, "resolving python packages ({requirements} requested)...")
            }
            Progress::ResolvingNode { packages } => {
                write!(f, "resolving node packages ({packages} requested)...")
            }
            Progress::Resolved {
                key,
                python,
                node,
                cached,
            } => write!(
                f,
                "resolved {python} python and {node} node packages: set {}{}",
                short(key),
                if *cached { " (cached)" } else { "" }
            ),
            Progress::InstallingPython { wheels } => {
                write!(f, "installing {}...", plural(*wheels, "wheel", "wheels"))
            }
            Progress::InstallingNode { packages } => write!(
                f,
                "installing {}...",
                plural(*packages, "node package", "node packages")
            ),
            Progress::Installed {
                python_bytes,
                node_bytes,
            } => write!(
                f,
                "installed: python {}, node {}",
                human(*python_bytes),
                human(*node_bytes)
            ),
            Progress::Current { key } => write!(f, "current -> sets/{key}"),
        }
    }
}

fn short(key: &str) -> &str {
    key.get(..12).unwrap_or(key)
}

/// Bytes for people: `12.3 MiB`, `40 KiB`, `1 bytes`.
pub fn human(bytes: u64) -> String {
    if bytes < 1 << 10 {
        format!("{bytes} bytes")
    } else if bytes < 1 << 20 {
        format!("{} KiB", bytes.div_ceil(1024))
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
