//! Where one Firecracker VM's files are, jailed or not, and the command that starts it.
//!
//! Jailed, each VM lives in the jailer's chroot
//! `<state>/vm/<instance>/jail/firecracker/<id>/root`: the kernel, initramfs, root image
//! and snapshot files are hard links into it (so the state folder and the image must
//! be on one file system), and every path given to Firecracker is inside it. Directly
//! (`--firecracker-without-jailer`), a VM's folder is Firecracker's working folder: the
//! sockets are relative names in it and the image files absolute host paths. Either
//! way the names Firecracker records in a snapshot mean the same in every VM restored
//! from it.

use super::{FirecrackerConfig, AGENT_PORT};
use crate::backend::vm::error::io_error;
use crate::backend::vm::host::VmmUser;
use crate::backend::vm::VmError;
use std::fs;
use std::path::{Path, PathBuf};
use tokio::process::Command;

/// The API socket's name inside a jail (Firecracker's default path).
const JAILED_API_SOCKET: &str = "run/firecracker.socket";
/// The API socket's name in an unjailed VM's folder.
const API_SOCKET: &str = "api.sock";
/// The vsock device's unix socket, as Firecracker is told it (in the VM's root).
const VSOCK_SOCKET: &str = "v.sock";
/// Firecracker's usual file name.
const FIRECRACKER_NAME: &str = "firecracker";

/// Where one Firecracker VM's files are.
pub(super) struct Layout {
    /// The folder removed when the VM is destroyed.
    pub(super) dir: PathBuf,
    /// The VM's root: the jail's root, or `dir` itself.
    pub(super) root: PathBuf,
    /// The jail id, when jailed.
    jail_id: Option<String>,
}

impl Layout {
    /// The layout of VM `name` of a backend whose folder is `instance_dir`.
    pub(super) fn new(config: &FirecrackerConfig, instance_dir: &Path, name: &str) -> Layout {
        match &config.jailer {
            Some(_) => {
                let jail_id = format!("{}-{name}", instance_name(instance_dir));
                let dir = instance_dir
                    .join("jail")
                    .join(exec_name(&config.binary))
                    .join(&jail_id);
                Layout {
                    root: dir.join("root"),
                    dir,
                    jail_id: Some(jail_id),
                }
            }
            None => {
                let dir = instance_dir.join(name);
                Layout {
                    root: dir.clone(),
                    dir,
                    jail_id: None,
                }
            }
        }
    }

    /// Whether the VM runs in the jailer's chroot.
    pub(super) fn jailed(&self) -> bool {
        self.jail_id.is_some()
    }

    /// The host path of the agent's listening socket.
    pub(super) fn agent_socket(&self) -> PathBuf {
        self.root.join(format!("{VSOCK_SOCKET}_{AGENT_PORT}"))
    }

    /// The host path of the API socket.
    pub(super) fn api_socket(&self) -> PathBuf {
        match self.jail_id {
            Some(_) => self.root.join(JAILED_API_SOCKET),
            None => self.root.join(API_SOCKET),
        }
    }

    /// How Firecracker names the vsock socket.
    pub(super) fn vsock_path(&self) -> String {
        match self.jail_id {
            Some(_) => format!("/{VSOCK_SOCKET}"),
            None => VSOCK_SOCKET.to_owned(),
        }
    }

    /// Makes `file` available to the VM as `name`, and returns how Firecracker names
    /// it: a hard link in the jail, or the host path itself.
    pub(super) fn expose(&self, file: &Path, name: &str) -> Result<String, VmError> {
        if self.jail_id.is_none() {
            return Ok(file.to_string_lossy().into_owned());
        }
        let link = self.root.join(name);
        fs::hard_link(file, &link).map_err(|source| VmError::HardLink {
            file: file.to_owned(),
            link: link.clone(),
            source,
        })?;
        Ok(format!("/{name}"))
    }

    /// Makes the folders the VMM needs, owned by `user`.
    pub(super) fn create(&self, user: VmmUser) -> Result<(), VmError> {
        let mut dirs = vec![self.root.clone()];
        if self.jail_id.is_some() {
            dirs.push(self.root.join("run"));
        }
        for dir in &dirs {
            fs::create_dir_all(dir).map_err(io_error("creating", dir))?;
            user.own(dir)?;
        }
        Ok(())
    }

    /// The command that starts Firecracker for this VM as `user`, and whether the
    /// runner must switch to `user` itself (the jailer does it on its own).
    pub(super) fn command(&self, config: &FirecrackerConfig, user: VmmUser) -> (Command, bool) {
        match (&config.jailer, &self.jail_id) {
            (Some(jailer), Some(id)) => {
                let mut cmd = Command::new(jailer);
                cmd.arg("--id")
                    .arg(id)
                    .arg("--exec-file")
                    .arg(&config.binary)
                    .arg("--uid")
                    .arg(user.uid.to_string())
                    .arg("--gid")
                    .arg(user.gid.to_string())
                    .arg("--chroot-base-dir")
                    .arg(self.chroot_base())
                    .args(["--", "--api-sock"])
                    .arg(format!("/{JAILED_API_SOCKET}"));
                // The jailer needs root to chroot and drop to `user` itself.
                (cmd, false)
            }
            _ => {
                let mut cmd = Command::new(&config.binary);
                cmd.args(["--api-sock", API_SOCKET]).current_dir(&self.root);
                (cmd, true)
            }
        }
    }

    /// The jailer's `--chroot-base-dir`: two levels above the VM's folder.
    fn chroot_base(&self) -> PathBuf {
        self.dir
            .parent()
            .and_then(Path::parent)
            .map(Path::to_owned)
            .unwrap_or_else(|| self.dir.clone())
    }
}

fn instance_name(instance_dir: &Path) -> String {
    instance_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The jailer names the jail's folder after the binary's file name.
fn exec_name(binary: &Path) -> String {
    binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| FIRECRACKER_NAME.to_owned())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::backend::vm::firecracker) fn config(jailed: bool) -> FirecrackerConfig {
        FirecrackerConfig {
            binary: "/usr/local/bin/firecracker".into(),
            jailer: jailed.then(|| "/usr/local/bin/jailer".into()),
            snapshots: true,
        }
    }

    #[test]
    fn a_jailed_vm_lives_in_the_jailers_chroot() {
        let layout = Layout::new(&config(true), Path::new("/run/sr/vm/r42"), "vm7");
        assert_eq!(
            layout.dir,
            Path::new("/run/sr/vm/r42/jail/firecracker/r42-vm7")
        );
        assert_eq!(layout.root, layout.dir.join("root"));
        assert_eq!(layout.chroot_base(), Path::new("/run/sr/vm/r42/jail"));
        assert_eq!(
            layout.api_socket(),
            layout.root.join("run/firecracker.socket")
        );
        assert_eq!(layout.agent_socket(), layout.root.join("v.sock_1024"));
        assert_eq!(layout.vsock_path(), "/v.sock");
        let user = VmmUser { uid: 7, gid: 8 };
        let (cmd, as_user) = layout.command(&config(true), user);
        assert!(!as_user, "the jailer drops privileges itself");
        let args: Vec<String> = cmd
            .as_std()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "--id",
                "r42-vm7",
                "--exec-file",
                "/usr/local/bin/firecracker",
                "--uid",
                "7",
                "--gid",
                "8",
                "--chroot-base-dir",
                "/run/sr/vm/r42/jail",
                "--",
                "--api-sock",
                "/run/firecracker.socket"
            ]
        );
    }

    #[test]
    fn an_unjailed_vm_works_in_its_own_folder() {
        let layout = Layout::new(&config(false), Path::new("/run/sr/vm/r42"), "vm7");
        assert_eq!(layout.dir, Path::new("/run/sr/vm/r42/vm7"));
        assert_eq!(layout.root, layout.dir);
        assert_eq!(layout.vsock_path(), "v.sock");
        assert_eq!(
            layout.expose(Path::new("/img/vmlinux"), "vmlinux").unwrap(),
            "/img/vmlinux"
        );
        let (cmd, as_user) = layout.command(&config(false), VmmUser { uid: 7, gid: 8 });
        assert!(as_user);
        assert_eq!(cmd.as_std().get_current_dir(), Some(layout.dir.as_path()));
    }
}
