//! Whether sandboxes' user namespaces can be created by their own unprivileged host
//! identity (so that the kernel charges what happens inside to that identity, never to
//! host root), found once at start by a probe process.
//!
//! Some kernels refuse unprivileged user namespaces (a sysctl, or an LSM such as
//! Ubuntu's AppArmor restriction, which lets the namespace be made but takes the
//! capabilities inside away). Sandboxes are then made by root, as before, and the
//! runner says so at start: the per-sandbox host ids still keep per-user counts apart,
//! and the kernel objects counted against a namespace's owner are refused inside.

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{setresgid, setresuid, Gid, Uid};
use std::path::Path;
use std::process::{Command, Stdio};

/// The first argument that selects the probe in a multicall binary.
pub const PROBE_ARG: &str = "__sandbox-userns-probe";

/// Runs the probe (this same binary, with [`PROBE_ARG`]) as host id `uid` (the first
/// sandbox identity): `Ok` when it could make a user and mount namespace and mount in
/// it, else why not.
pub fn unprivileged_userns(uid: u32) -> Result<(), String> {
    let output = Command::new("/proc/self/exe")
        .args([PROBE_ARG, &uid.to_string()])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match output {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        Err(e) => Err(format!("could not run the user namespace probe: {e}")),
    }
}

/// The probe's body: become `uid` entirely, make a user and a mount namespace, and
/// mount a tmpfs in it. Exit code 0 when all of it worked.
pub fn probe_main(uid: &str) -> i32 {
    match probe(uid) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn probe(uid: &str) -> Result<(), String> {
    let id: u32 = uid.parse().map_err(|e| format!("bad uid {uid:?}: {e}"))?;
    // Root becomes `id` first; an ordinary user probes as itself.
    if nix::unistd::geteuid().is_root() {
        let (u, g) = (Uid::from_raw(id), Gid::from_raw(id));
        nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
        setresgid(g, g, g).map_err(|e| format!("setresgid {id}: {e}"))?;
        setresuid(u, u, u).map_err(|e| format!("setresuid {id}: {e}"))?;
    }
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("unshare(CLONE_NEWUSER | CLONE_NEWNS) as uid {id}: {e}"))?;
    let root = Path::new("/");
    mount(
        None::<&str>,
        root,
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("making / private in the new namespace: {e}"))?;
    mount(
        Some("tmpfs"),
        root,
        Some("tmpfs"),
        MsFlags::empty(),
        Some("size=4k"),
    )
    .map_err(|e| format!("mounting a tmpfs in the new namespace: {e}"))
}
