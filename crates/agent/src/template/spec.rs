//! What the runner tells a template, and what it names it by: its first argument, its
//! spec (and the interpreter it holds), its sandboxes' device folders.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The first argument that selects the template in a multicall binary.
pub const TEMPLATE_ARG: &str = "__sandbox-template";

/// What the template is told at start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TemplateSpec {
    /// The host uid and gid it runs as once set up: one of its own (no sandbox's).
    pub id: u32,
    /// An existing host folder on which it mounts, in its own mount namespace, a tmpfs of
    /// device nodes: `<devices>/<i>/{null,zero,full,random,urandom}` for sandbox index
    /// `i` below `slots` (a forked sandbox binds its index's, so that no two sandboxes
    /// alive at once share a device inode, nor any with the host).
    pub devices: PathBuf,
    /// How many sandbox indices get device nodes.
    pub slots: usize,
    /// The package set (a host folder holding `python/` and `node/`), shown read-only
    /// at [`PACKAGES`](sandbox_jail::layout::PACKAGES) in the template's mount namespace
    /// before it confines itself, where its sandboxes reach it wherever it is on the host
    /// (see [`ShownFolders`](sandbox_jail::rootfs::ShownFolders)); with an interpreter, what the template imports has the
    /// paths a sandbox sees.
    #[serde(default)]
    pub packages: Option<PathBuf>,
    /// The host folders the languages show (each sandbox's
    /// [`JailSpec::shared`](sandbox_jail::JailSpec::shared)): what of them is below
    /// `/etc` is copied at the template's start with the host's `/etc` folders
    /// ([`EtcTree`](sandbox_jail::rootfs::EtcTree)).
    #[serde(default)]
    pub shared: Vec<PathBuf>,
    /// The binary its sandboxes execute as their agent: a `sandbox-agent` of the
    /// runner's build (smaller than the runner's, so cheaper to execute); none: the
    /// template's own binary. Opened once, as host root, before the template confines
    /// itself.
    #[serde(default)]
    pub agent: Option<PathBuf>,
    /// The interpreter it starts (once confined), from which the sandboxes' Python
    /// programs are forked; none: they are executed, as a jail's are.
    pub python: Option<PythonSpec>,
}

/// The interpreter a template holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PythonSpec {
    /// Its shared library (`libpython3.X.so.1.0`).
    pub library: PathBuf,
    /// The interpreter it stands for (`/usr/bin/python3`): `sys.executable`, and the
    /// only command a loader it replaces may name.
    pub program: String,
    /// Modules imported once, in the template (the runner's warm imports): every
    /// sandbox forked from it has them, their pages shared until written.
    #[serde(default)]
    pub warm_imports: Vec<String>,
}

impl PythonSpec {
    /// The spec of `program` (`/usr/bin/python3`), if this binary can embed it and the
    /// host has its shared library.
    pub fn of(program: &Path) -> Option<PythonSpec> {
        #[cfg(feature = "embedded-python")]
        {
            let library = sandbox_pyembed::shared_library_of(program).ok()??;
            Some(PythonSpec {
                library,
                program: program.to_str()?.to_owned(),
                warm_imports: Vec::new(),
            })
        }
        #[cfg(not(feature = "embedded-python"))]
        {
            let _ = program;
            None
        }
    }
}

/// The device folder of sandbox index `index` under `devices`.
pub fn devices_of(devices: &Path, index: usize) -> PathBuf {
    devices.join(index.to_string())
}
