//! The template's own confinement, taken once at its start as host root (see the
//! module above), and the ceilings of the per-user counts its sandboxes share.

use super::error::TemplateError;
use super::requests::exchange;
use super::spec::TemplateSpec;
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{setresgid, setresuid, Gid, Uid};
use sandbox_jail::rootfs::{EtcTree, HostView, ShownFolders};
use std::io;
use std::path::Path;

/// Where the template's copy of the host's `/etc` folders is, in its own `/home` tmpfs.
const ETC_COPY: &str = "/home/.etc";

/// Started as host root: takes mount, network, IPC and UTS namespaces of its own, makes
/// the device nodes, shows the package set and copies the `/etc` folders of `host` and
/// of the languages (where its sandboxes reach them: returned), then becomes `spec.id`
/// for good (which clears every capability), with no_new_privs, dying with the runner.
pub(super) fn confine(spec: &TemplateSpec, host: &HostView) -> Result<ShownFolders, TemplateError> {
    let step = |step: &'static str| {
        move |e: nix::Error| TemplateError::Confine {
            step,
            source: e.into(),
        }
    };
    let namespaces = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    unshare(namespaces).map_err(step("taking namespaces of its own"))?;
    // The host's later mounts (a program's inline dependencies) still propagate in.
    let slave = MsFlags::MS_REC | MsFlags::MS_SLAVE;
    mount(None::<&str>, "/", None::<&str>, slave, None::<&str>)
        .map_err(step("making its mounts slaves"))?;
    make_devices(spec)?;
    // Before the host's homes are hidden: the set may be below one.
    let at = Path::new(sandbox_jail::layout::PACKAGES);
    let shown = ShownFolders::show(spec.packages.as_deref(), at)?;
    make_home(spec.id)?;
    let copied = host.etc_copied(&spec.shared);
    let shown = shown.with_etc(EtcTree::make(Path::new(ETC_COPY), &copied)?);
    lift_shared_rlimits()?;
    nix::unistd::setgroups(&[]).map_err(step("dropping supplementary groups"))?;
    let (uid, gid) = (Uid::from_raw(spec.id), Gid::from_raw(spec.id));
    setresgid(gid, gid, gid).map_err(step("taking its gid"))?;
    setresuid(uid, uid, uid).map_err(step("taking its uid"))?;
    unshare(CloneFlags::CLONE_NEWUSER).map_err(step("taking a user namespace of its own"))?;
    exchange(b'U', "asking the runner for its id maps")?;
    nix::sys::prctl::set_no_new_privs().map_err(step("setting no_new_privs"))?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(step("dying with the runner"))?;
    Ok(shown)
}

/// A tmpfs on `spec.devices` (in the template's mount namespace only), with a folder of
/// device nodes per sandbox index, then made read-only: every sandbox of an index binds
/// the same nodes, and none may leave on them what the next one would read (their
/// times, mode, owner, attributes).
fn make_devices(spec: &TemplateSpec) -> Result<(), TemplateError> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    let options = format!("size=64k,nr_inodes={},mode=0755", 16 + spec.slots * 8);
    mount(
        Some("tmpfs"),
        &spec.devices,
        Some("tmpfs"),
        flags,
        Some(options.as_str()),
    )
    .map_err(|e| TemplateError::Confine {
        step: "mounting the device nodes' tmpfs",
        source: e.into(),
    })?;
    for index in 0..spec.slots {
        let dir = spec.devices.join(index.to_string());
        std::fs::create_dir(&dir).map_err(|source| TemplateError::Confine {
            step: "making a device folder",
            source,
        })?;
        for name in sandbox_jail::rootfs::DEVICES {
            sandbox_jail::rootfs::make_device(name, &dir.join(name))?;
        }
    }
    let read_only = MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | flags;
    mount(
        None::<&str>,
        &spec.devices,
        None::<&str>,
        read_only,
        None::<&str>,
    )
    .map_err(|e| TemplateError::Confine {
        step: "making the device nodes read-only",
        source: e.into(),
    })
}

/// A tmpfs on `/home` (in the template's mount namespace: the host's homes are hidden
/// from it) holding the sandboxes' home folder, the template's uid's alone: its
/// interpreter's `HOME` is then the path every sandbox's is (matplotlib keeps the
/// folders it found at import, and a forked program keeps what the template found).
fn make_home(id: u32) -> Result<(), TemplateError> {
    let failed =
        |step: &'static str| move |source: io::Error| TemplateError::Confine { step, source };
    let home = Path::new(sandbox_jail::layout::HOME);
    let parent = home.parent().unwrap_or(Path::new("/home"));
    std::fs::create_dir_all(parent).map_err(failed("making /home"))?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount(
        Some("tmpfs"),
        parent,
        Some("tmpfs"),
        flags,
        Some("size=16m,mode=0755"),
    )
    .map_err(|e| failed("mounting its /home")(e.into()))?;
    std::fs::create_dir(home).map_err(failed("making its home"))?;
    std::os::unix::fs::chown(home, Some(id), Some(id))
        .map_err(failed("making its home its own"))?;
    let private = std::os::unix::fs::PermissionsExt::from_mode(0o700);
    std::fs::set_permissions(home, private).map_err(failed("making its home private"))
}

/// The per-user limits the kernel also counts at a user namespace's owner, lifted for
/// the template (as root, before it makes its user namespace): what the sandboxes make
/// is counted, above their own namespaces, against the template's uid, with these as
/// ceilings, shared by all of them. Where root may not raise a hard limit (no
/// CAP_SYS_RESOURCE), the soft one rises to it, and the runner gives each sandbox a
/// share of what the ceiling is (see [`Ceilings`]).
fn lift_shared_rlimits() -> Result<(), TemplateError> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
    for resource in [
        Resource::RLIMIT_NPROC,
        Resource::RLIMIT_SIGPENDING,
        Resource::RLIMIT_MEMLOCK,
        Resource::RLIMIT_MSGQUEUE,
    ] {
        let lifted = setrlimit(resource, RLIM_INFINITY, RLIM_INFINITY).or_else(|_| {
            let (_, hard) = getrlimit(resource)?;
            setrlimit(resource, hard, hard)
        });
        lifted.map_err(|e| TemplateError::Confine {
            step: "lifting its per-user rlimits",
            source: e.into(),
        })?;
    }
    Ok(())
}

/// The template's ceilings of the per-user counts its sandboxes share above their own
/// namespaces (`u64::MAX`: none), which it reports when ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    /// Locked memory, bytes.
    pub memlock_bytes: u64,
    /// Queued signals.
    pub sigpending: u64,
}

impl Ceilings {
    /// The length of the ready message: `R` and the two ceilings.
    pub const MESSAGE_LEN: usize = 17;

    pub(super) fn now() -> Ceilings {
        use nix::sys::resource::{getrlimit, Resource};
        let soft = |r| getrlimit(r).map_or(0, |(soft, _)| soft);
        Ceilings {
            memlock_bytes: soft(Resource::RLIMIT_MEMLOCK),
            sigpending: soft(Resource::RLIMIT_SIGPENDING),
        }
    }

    pub(super) fn message(&self) -> [u8; Self::MESSAGE_LEN] {
        let mut message = [0u8; Self::MESSAGE_LEN];
        message[0] = b'R';
        message[1..9].copy_from_slice(&self.memlock_bytes.to_le_bytes());
        message[9..].copy_from_slice(&self.sigpending.to_le_bytes());
        message
    }

    /// The ceilings of a ready message; `None` if it is not one.
    pub fn from_message(message: &[u8]) -> Option<Ceilings> {
        if message.len() != Self::MESSAGE_LEN || message[0] != b'R' {
            return None;
        }
        let number = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().unwrap_or_default());
        Some(Ceilings {
            memlock_bytes: number(&message[1..9]),
            sigpending: number(&message[9..]),
        })
    }
}
