//! sandbox-packages: Python and npm packages for sandboxes that have no network.
//!
//! Everything is installed on the host, with the host's pip and npm configuration, into
//! a content-addressed store of read-only sets that sandboxes mount or read:
//!
//! - [`build`] makes a base set (by default [`DEFAULT_PYTHON`] and [`DEFAULT_NODE`])
//!   under `<root>/sets/<key>` and points `<root>/current` at it; building the same
//!   resolution again only repoints `current`.
//! - [`Resolver`] provides a script's PEP 723 dependencies ([`parse_script_metadata`])
//!   under the operator's [`Policy`]: only what the base set lacks, installed under
//!   `<root>/deps/<key>`, cached per request so that a repeat costs a file read.
//!
//! Only prebuilt wheels are installed (nothing is built from source on the host, and no
//! requirement named by URL in a package's metadata is ever followed: pip runs through
//! a guard), each checked against the hash pip resolved; npm runs with install scripts
//! off. Every pip and npm process is bounded in time and killed when its future is
//! dropped; a resolution's pip runs in a [`Scratch`] of a [`Confinement`] the caller
//! gives (the runner's: its own user, cgroup and bounded tmpfs).
//!
//! This crate does not run sandboxes, mount anything or serve HTTP: the runner puts a
//! set's [`PackageSet::python_dir`] and [`InlineSet::python_dir`] on `PYTHONPATH`, maps
//! [`DepsError::code`] and [`DepsError::status`] to its answers, and prints the
//! [`Progress`] of a build.

/// Where a runner keeps its package store unless told otherwise.
pub const DEFAULT_STORE: &str = "/var/lib/sandbox-runner/packages";

mod build;
mod confine;
mod copy;
mod key;
mod metadata;
mod names;
mod npm;
mod pip;
mod policy;
mod process;
mod resolve;
mod stack;
mod store;
mod tree;

pub use build::{build, human, BuildError, BuildReport, BuildSpec, Progress, SANDBOX_PLOTS};
pub use confine::{pip_environment, ConfineError, Confinement, Scratch, Unconfined};
pub use metadata::{parse_script_metadata, python_satisfies, MetadataError, ScriptMetadata};
pub use names::normalize_name;
pub use policy::{Policy, Refusal};
pub use resolve::{DepsError, InlineSet, Resolver, MAX_CLOSURE, MAX_DEPENDENCIES, SCRATCH_MARGIN};
pub use stack::data_stack_modules;
pub use store::{
    Manifest, NodePackage, PackageSet, PythonPackage, Store, StoreError, MANIFEST_FILE,
};

/// The Python packages of the default base set.
pub const DEFAULT_PYTHON: &[&str] = &[
    "numpy",
    "pandas",
    "matplotlib",
    "scipy",
    "sympy",
    "scikit-learn",
    "seaborn",
    "pillow",
    "networkx",
    "openpyxl",
    "pyyaml",
    "beautifulsoup4",
    "lxml",
    "tabulate",
    "requests",
];

/// The npm packages of the default base set.
pub const DEFAULT_NODE: &[&str] = &["lodash", "date-fns", "zod", "typescript@5"];

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send<T: Send>(_: &T) {}

    #[test]
    fn builds_and_resolutions_can_be_spawned() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let spec = BuildSpec::default();
        let mut progress = |_: Progress| {};
        // Futures do nothing until polled: these are only looked at.
        is_send(&build(&store, &spec, &mut progress));
        let confinement = std::sync::Arc::new(Unconfined::new(dir.path()));
        let resolver = Resolver::new(
            store,
            None,
            Policy::default(),
            "/usr/bin/python3",
            confinement,
        );
        let metadata = ScriptMetadata::default();
        is_send(&resolver.resolve(&metadata));
    }
}
