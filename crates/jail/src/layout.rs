//! What a sandbox looks like from inside, whichever backend made it: the sandbox user,
//! its home, the search path, and what `/etc` holds (the jail writes these files into
//! its tmpfs root, and the VM image builder into the image).

/// The search path given to programs.
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The home directory and working directory of programs.
pub const HOME: &str = "/home/sandbox";
/// The sandbox user's id inside a sandbox: the user programs run as.
pub const SANDBOX_UID: u32 = 1000;
/// Where the package set is shown, read-only: `python/` (on `PYTHONPATH`) and
/// `node/node_modules/` (found by Node from [`NODE_MODULES`]).
pub const PACKAGES: &str = "/opt/packages";
/// Where a VM image holds the package set (the image builder copies the runner's
/// current set there); the guest's jail shows it at [`PACKAGES`], as on a host.
pub const IMAGE_PACKAGES: &str = "/var/lib/sandbox-packages";
/// Where a VM image lists the host paths its languages share into sandboxes (one
/// absolute path a line; see `JailSpec::shared`): the guest's jail shares the same.
pub const IMAGE_SHARED_PATHS: &str = "/etc/sandbox-shared-paths";
/// A link at the root to the package set's `node_modules`, where Node's module
/// resolution (CommonJS and ES modules alike) looks last.
pub const NODE_MODULES: &str = "/node_modules";
/// The folder of the `tools` modules (a program's calls to the tools its run offers):
/// a small tmpfs of the sandbox's own, sandbox root's (the agent writes there, a program
/// only reads), holding [`TOOLS_PYTHON`], [`TOOLS_NODE_MODULES`] and the agent's socket.
/// The same path as `sandbox_protocol::tools::MODULES`.
pub const TOOLS: &str = "/run/sandbox-tools";
/// Python's `tools.py` folder, which the agent puts on a Python program's import path
/// for a run that offers tools.
pub const TOOLS_PYTHON: &str = "/run/sandbox-tools/python";
/// The `node_modules` folder of Node's `tools` package.
pub const TOOLS_NODE_MODULES: &str = "/run/sandbox-tools/node_modules";
/// A link to [`TOOLS_NODE_MODULES`] in the home folder's parent: Node's resolution from
/// a program in [`HOME`] (`require` and ES module `import` alike, which ignores
/// `NODE_PATH`) walks up to it, before the package set's [`NODE_MODULES`].
pub const HOME_NODE_MODULES: &str = "/home/node_modules";
/// Where a program's inline dependencies are mounted, read-only, each set in a
/// folder of its own (`DEPS/<key>/python`).
pub const DEPS: &str = "/opt/deps";

/// The generated files of `/etc`: name and content. Users: root, the sandbox user (the
/// one programs run as) and nobody; host names for loopback only; no DNS server.
pub fn etc_files() -> [(&'static str, String); 6] {
    let uid = SANDBOX_UID;
    [
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\n\
                 sandbox:x:{uid}:{uid}:sandbox:{HOME}:/bin/bash\n\
                 nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        ),
        (
            "group",
            format!("root:x:0:\nsandbox:x:{uid}:\nnogroup:x:65534:\n"),
        ),
        (
            "hosts",
            "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n".to_owned(),
        ),
        ("hostname", "sandbox\n".to_owned()),
        (
            "nsswitch.conf",
            "passwd: files\ngroup: files\nhosts: files\n".to_owned(),
        ),
        ("resolv.conf", String::new()),
    ]
}
