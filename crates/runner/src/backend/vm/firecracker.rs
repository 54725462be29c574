//! Firecracker: one microVM per sandbox, started through its jailer (or directly where
//! the operator says so), configured over its API socket, with the agent on vsock.
//!
//! The agent connects from the guest to port [`AGENT_PORT`] of the host; Firecracker
//! turns that into a connection to the unix socket `<uds_path>_<port>`, which the
//! runner listens on before the VM starts.
//!
//! **Snapshots.** With snapshots on, the backend boots one template VM, waits for its
//! agent, tells it a snapshot is coming (the agent then lets its connection go and keeps
//! reconnecting), pauses it and snapshots it (the guest's memory and the VM's state),
//! then kills it. Every later sandbox is restored from that snapshot: the restored agent
//! reconnects, and the runner hands it fresh entropy from the host before anything else
//! ([`Reseed`](sandbox_protocol::agent::Reseed)), which the agent credits to the guest
//! kernel's pool and reseeds its generator with. So siblings share no random-number
//! state, the hazard Firecracker's snapshot documentation warns of; and nothing else
//! they share is secret: the template never ran a job, started no interpreter, holds no
//! token. Interpreters (Prepare) start after the restore.
//!
//! **Layout.** Jailed, each VM lives in the jailer's chroot
//! `<state>/vm/<instance>/jail/firecracker/<id>/root`: the kernel, initramfs, root image
//! and snapshot files are hard links into it (so the state folder and the image must
//! be on one file system), and every path given to Firecracker is inside it. Directly
//! (`--firecracker-without-jailer`), a VM's folder is Firecracker's working folder: the
//! sockets are relative names in it and the image files absolute host paths. Either
//! way the names Firecracker records in a snapshot mean the same in every VM restored
//! from it.

use super::{io_error, VmBackend, VmError, VmImage, VmSandbox, VmmUser};
use crate::backend::channel;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use sandbox_protocol::Lang;
use serde_json::{json, Value};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::net::UnixListener;
use tokio::net::UnixStream;
use tokio::process::Child;
use tokio::process::Command;

/// The vsock port of the host the agent connects to.
pub const AGENT_PORT: u32 = 1024;
/// The guest's vsock address (any value from 3 up; each VM has its own device).
const GUEST_CID: u32 = 3;
/// How long Firecracker may take to open its API socket.
const API_WAIT: Duration = Duration::from_secs(5);
/// The API socket's name inside a jail (Firecracker's default path).
const JAILED_API_SOCKET: &str = "run/firecracker.socket";
/// The API socket's name in an unjailed VM's folder.
const API_SOCKET: &str = "api.sock";
/// The vsock device's unix socket, as Firecracker is told it (in the VM's root).
const VSOCK_SOCKET: &str = "v.sock";
/// The snapshot files of the template, in the backend's folder and in each VM's root.
const SNAPSHOT_FILE: &str = "vm.snap";
const MEMORY_FILE: &str = "vm.mem";

/// How Firecracker is run.
#[derive(Debug, Clone)]
pub struct FirecrackerConfig {
    /// The `firecracker` binary.
    pub binary: PathBuf,
    /// The `jailer` binary; `None` runs Firecracker directly (the operator's choice).
    pub jailer: Option<PathBuf>,
    /// Refill the pool by restoring a snapshot rather than by booting.
    pub snapshots: bool,
}

/// Where one Firecracker VM's files are.
struct Layout {
    /// The folder removed when the VM is destroyed.
    dir: PathBuf,
    /// The VM's root: the jail's root, or `dir` itself.
    root: PathBuf,
    /// The jail id, when jailed.
    jail_id: Option<String>,
}

impl Layout {
    /// The layout of VM `name` of a backend whose folder is `instance_dir`.
    fn new(config: &FirecrackerConfig, instance_dir: &Path, name: &str) -> Layout {
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

    /// The host path of the agent's listening socket.
    fn agent_socket(&self) -> PathBuf {
        self.root.join(format!("{VSOCK_SOCKET}_{AGENT_PORT}"))
    }

    /// The host path of the API socket.
    fn api_socket(&self) -> PathBuf {
        match self.jail_id {
            Some(_) => self.root.join(JAILED_API_SOCKET),
            None => self.root.join(API_SOCKET),
        }
    }

    /// How Firecracker names the vsock socket.
    fn vsock_path(&self) -> String {
        match self.jail_id {
            Some(_) => format!("/{VSOCK_SOCKET}"),
            None => VSOCK_SOCKET.to_owned(),
        }
    }

    /// Makes `file` available to the VM as `name`, and returns how Firecracker names
    /// it: a hard link in the jail, or the host path itself.
    fn expose(&self, file: &Path, name: &str) -> Result<String, VmError> {
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
    fn create(&self, user: VmmUser) -> Result<(), VmError> {
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

    /// The command that starts Firecracker for this VM as `user`.
    fn command(&self, config: &FirecrackerConfig, user: VmmUser) -> (Command, bool) {
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

/// Firecracker's usual file name.
const FIRECRACKER_NAME: &str = "firecracker";

/// The kernel command line of a Firecracker guest: `reboot=k` so that the agent's
/// reset at the end ends Firecracker; the agent's channel on vsock.
fn boot_args(common: &str) -> String {
    format!("reboot=k pci=off {common} sandbox.vsock_port={AGENT_PORT}")
}

/// Configures a fresh Firecracker for a cold boot and starts the guest.
async fn configure_and_start(
    api: &mut Api,
    layout: &Layout,
    image: &VmImage,
    memory_mb: u64,
    cmdline: &str,
) -> Result<(), VmError> {
    let kernel = layout.expose(&image.kernel, crate::image::KERNEL_FILE)?;
    let initrd = layout.expose(&image.initrd, crate::image::INITRD_FILE)?;
    let rootfs = layout.expose(&image.rootfs, crate::image::ROOTFS_FILE)?;
    for (path, body) in cold_boot_requests(&kernel, &initrd, &rootfs, memory_mb, cmdline, layout) {
        api.call(Method::PUT, path, body).await?;
    }
    Ok(())
}

/// The API calls of a cold boot, in order: machine, kernel, root image, vsock, entropy
/// device, start. No network interface is ever configured.
fn cold_boot_requests(
    kernel: &str,
    initrd: &str,
    rootfs: &str,
    memory_mb: u64,
    cmdline: &str,
    layout: &Layout,
) -> Vec<(&'static str, Value)> {
    vec![
        (
            "/machine-config",
            json!({"vcpu_count": 1, "mem_size_mib": memory_mb, "smt": false}),
        ),
        (
            "/boot-source",
            json!({"kernel_image_path": kernel, "initrd_path": initrd, "boot_args": cmdline}),
        ),
        (
            "/drives/root",
            json!({
                "drive_id": "root",
                "path_on_host": rootfs,
                "is_root_device": false,
                "is_read_only": true
            }),
        ),
        (
            "/vsock",
            json!({"guest_cid": GUEST_CID, "uds_path": layout.vsock_path()}),
        ),
        ("/entropy", json!({})),
        ("/actions", json!({"action_type": "InstanceStart"})),
    ]
}

/// The template's snapshot, which every restored VM starts from.
#[derive(Debug)]
pub struct Template {
    snapshot: PathBuf,
    memory: PathBuf,
}

impl Template {
    /// Pauses the template VM and snapshots it into `dir` (readable by `group`, which
    /// every VMM of this backend runs in).
    async fn take(
        api: &mut Api,
        layout: &Layout,
        dir: &Path,
        group: u32,
    ) -> Result<Template, VmError> {
        api.call(Method::PATCH, "/vm", json!({"state": "Paused"}))
            .await?;
        let (snap_name, mem_name) = match layout.jail_id {
            Some(_) => (format!("/{SNAPSHOT_FILE}"), format!("/{MEMORY_FILE}")),
            None => (SNAPSHOT_FILE.to_owned(), MEMORY_FILE.to_owned()),
        };
        let started = Instant::now();
        api.call(
            Method::PUT,
            "/snapshot/create",
            json!({"snapshot_type": "Full", "snapshot_path": snap_name, "mem_file_path": mem_name}),
        )
        .await?;
        fs::create_dir_all(dir).map_err(io_error("creating", dir))?;
        let template = Template {
            snapshot: dir.join(SNAPSHOT_FILE),
            memory: dir.join(MEMORY_FILE),
        };
        for (made, kept) in [
            (layout.root.join(SNAPSHOT_FILE), &template.snapshot),
            (layout.root.join(MEMORY_FILE), &template.memory),
        ] {
            fs::rename(&made, kept).map_err(io_error("keeping the snapshot file", &made))?;
            nix::unistd::chown(kept, Some(0.into()), Some(group.into()))
                .map_err(|e| io_error("handing the snapshot to the VMM group", kept)(e.into()))?;
            fs::set_permissions(kept, fs::Permissions::from_mode(0o640))
                .map_err(io_error("protecting", kept))?;
        }
        tracing::info!(
            snapshot_ms = started.elapsed().as_millis() as u64,
            "Firecracker template snapshot taken"
        );
        Ok(template)
    }

    /// Loads the snapshot into a fresh Firecracker and resumes the VM.
    async fn restore(&self, api: &mut Api, layout: &Layout) -> Result<(), VmError> {
        let snapshot = layout.expose(&self.snapshot, SNAPSHOT_FILE)?;
        let memory = layout.expose(&self.memory, MEMORY_FILE)?;
        api.call(
            Method::PUT,
            "/snapshot/load",
            json!({
                "snapshot_path": snapshot,
                "mem_backend": {"backend_type": "File", "backend_path": memory},
                "resume_vm": true
            }),
        )
        .await
    }
}

/// A connection to one Firecracker's API socket.
pub struct Api {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

/// How many random bytes a restored VM's kernel gets.
const RESEED_BYTES: usize = 64;

/// How a Firecracker VM starts.
enum Start<'a> {
    /// Boots the kernel.
    Cold,
    /// Restores the template's snapshot.
    Restore(&'a Template),
}

/// A Firecracker VM whose VMM runs, before its agent is reached.
struct Launched {
    sandbox: VmSandbox,
    api: Api,
    layout: Layout,
    listener: UnixListener,
    gid: u32,
}

impl VmBackend {
    /// A Firecracker sandbox: restored from the template when snapshots are on and the
    /// template could be made, booted cold otherwise.
    pub(super) async fn create_firecracker(
        &self,
        prepare: Option<Lang>,
    ) -> Result<VmSandbox, VmError> {
        let template = match self.config.firecracker.snapshots {
            true => self.template.get_or_init(|| self.make_template()).await,
            false => &None,
        };
        let start = match template {
            Some(template) => Start::Restore(template),
            None => Start::Cold,
        };
        let timeout = self.config.boot_timeout;
        let launched = self.launch().await?;
        let Launched {
            mut sandbox,
            mut api,
            layout,
            listener,
            ..
        } = launched;
        let started = Instant::now();
        let ready = async {
            match start {
                Start::Cold => {
                    self.configure_cold(&mut api, &layout).await?;
                    sandbox.accept(&listener).await?;
                }
                Start::Restore(template) => {
                    template.restore(&mut api, &layout).await?;
                    sandbox.accept(&listener).await?;
                    let channel = sandbox.channel.as_mut().ok_or(VmError::NoChannel)?;
                    channel::reseed(channel, fresh_entropy()?, unix_time_ms()).await?;
                }
            }
            sandbox.ready(prepare).await
        };
        let outcome = tokio::time::timeout(timeout, ready).await;
        let sandbox = sandbox.booted(outcome, timeout).await?;
        tracing::debug!(
            vm = sandbox.id,
            restored = template.is_some(),
            ready_ms = started.elapsed().as_millis() as u64,
            "Firecracker VM ready"
        );
        Ok(sandbox)
    }

    /// Boots the template VM to its agent and snapshots it; `None` (every VM then boots
    /// cold) if that fails.
    async fn make_template(&self) -> Option<Template> {
        match tokio::time::timeout(self.config.boot_timeout, self.take_template()).await {
            Ok(Ok(template)) => Some(template),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "no snapshot template: every VM boots cold");
                None
            }
            Err(_) => {
                tracing::warn!("the snapshot template took too long: every VM boots cold");
                None
            }
        }
    }

    async fn take_template(&self) -> Result<Template, VmError> {
        let Launched {
            mut sandbox,
            mut api,
            layout,
            listener,
            gid,
        } = self.launch().await?;
        let taken = async {
            self.configure_cold(&mut api, &layout).await?;
            sandbox.accept(&listener).await?;
            sandbox.ready(None).await?;
            let channel = sandbox.channel.as_mut().ok_or(VmError::NoChannel)?;
            channel::announce_snapshot(channel).await?;
            // The agent now keeps reconnecting: nobody listens until a restored VM's
            // runner does.
            sandbox.channel = None;
            drop(listener);
            let _ = fs::remove_file(layout.agent_socket());
            Template::take(&mut api, &layout, &self.instance_dir.join("template"), gid).await
        };
        let result = taken.await;
        match result {
            Ok(template) => {
                sandbox.destroy().await;
                Ok(template)
            }
            Err(e) => Err(sandbox.fail(e).await),
        }
    }

    /// Allocates a VM, lays out its folder, listens for its agent, starts its VMM and
    /// connects to the VMM's API.
    async fn launch(&self) -> Result<Launched, VmError> {
        let fc = &self.config.firecracker;
        let gid = match fc.jailer {
            // The jailer makes the jail's /dev/kvm for the VMM's user and group.
            Some(_) => self.config.vmm_uid_base,
            None => super::kvm_gid()?,
        };
        let vm = self
            .allocate(|name| Layout::new(fc, &self.instance_dir, name).dir, gid)
            .await?;
        let layout = Layout::new(fc, &self.instance_dir, &vm.name);
        layout.create(vm.user)?;
        let socket = layout.agent_socket();
        let listener = UnixListener::bind(&socket).map_err(io_error("listening on", &socket))?;
        vm.user.own(&socket)?;
        let (cmd, as_user) = layout.command(fc, vm.user);
        let console = Stdio::from(super::create_file(&vm.dir.join("console.log"))?);
        let log = Stdio::from(super::create_file(&vm.dir.join("vmm.log"))?);
        let user = as_user.then_some(vm.user);
        let child = super::spawn_in_cgroup(cmd, &vm.procs, user, console, log)?;
        let mut sandbox = VmSandbox {
            id: vm.id,
            child,
            channel: None,
            leftovers: vm.leftovers,
        };
        match Api::connect(&layout.api_socket(), &mut sandbox.child).await {
            Ok(api) => Ok(Launched {
                sandbox,
                api,
                layout,
                listener,
                gid,
            }),
            Err(e) => Err(sandbox.fail(e).await),
        }
    }

    async fn configure_cold(&self, api: &mut Api, layout: &Layout) -> Result<(), VmError> {
        let cmdline = format!(
            "{} -- {}",
            boot_args(&self.common_cmdline()),
            sandbox_agent::init::INIT_ARG
        );
        configure_and_start(api, layout, &self.image, self.config.memory_mb, &cmdline).await
    }
}

/// The host's wall-clock time, for a restored guest whose clock stopped at the snapshot.
fn unix_time_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Random bytes from the host's kernel.
fn fresh_entropy() -> Result<Vec<u8>, VmError> {
    use std::io::Read;
    let path = Path::new("/dev/urandom");
    let mut bytes = vec![0u8; RESEED_BYTES];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io_error("reading", path))?;
    Ok(bytes)
}

impl Api {
    /// Connects, waiting for Firecracker to open the socket; fails early if the VMM
    /// (or the jailer before it) exits.
    async fn connect(socket: &Path, vmm: &mut Child) -> Result<Api, VmError> {
        let deadline = Instant::now() + API_WAIT;
        let stream = loop {
            match UnixStream::connect(socket).await {
                Ok(stream) => break stream,
                Err(e) if Instant::now() >= deadline => {
                    return Err(VmError::Boot(format!(
                        "Firecracker's API socket {} did not open within {API_WAIT:?}: {e}",
                        socket.display()
                    )))
                }
                Err(_) => {}
            }
            if let Ok(Some(status)) = vmm.try_wait() {
                return Err(VmError::Boot(format!("the VMM exited ({status})")));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| VmError::Api(format!("connecting: {e}")))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "Firecracker API connection ended");
            }
        });
        Ok(Api { sender })
    }

    /// Sends one request; anything but a 2xx is an error with Firecracker's message.
    async fn call(&mut self, method: Method, path: &str, body: Value) -> Result<(), VmError> {
        let request = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(hyper::header::HOST, "localhost")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| VmError::Api(format!("{method} {path}: {e}")))?;
        let sender = &mut self.sender;
        sender
            .ready()
            .await
            .map_err(|e| VmError::Api(format!("{method} {path}: {e}")))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| VmError::Api(format!("{method} {path}: {e}")))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        Err(VmError::Api(format!(
            "{method} {path}: {status}: {}",
            fault_message(status, &body)
        )))
    }
}

/// Firecracker's error body is `{"fault_message": "..."}`.
fn fault_message(status: StatusCode, body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("fault_message")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body).trim().to_owned();
            if text.is_empty() {
                status.canonical_reason().unwrap_or("no message").to_owned()
            } else {
                text
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(jailed: bool) -> FirecrackerConfig {
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

    #[test]
    fn a_cold_boot_configures_no_network_and_one_vcpu() {
        let layout = Layout::new(&config(true), Path::new("/s/vm/r1"), "vm1");
        let calls = cold_boot_requests("/k", "/i", "/r", 256, "args", &layout);
        let paths: Vec<&str> = calls.iter().map(|(p, _)| *p).collect();
        assert_eq!(
            paths,
            [
                "/machine-config",
                "/boot-source",
                "/drives/root",
                "/vsock",
                "/entropy",
                "/actions"
            ]
        );
        assert!(!paths.iter().any(|p| p.starts_with("/network-interfaces")));
        assert_eq!(calls[0].1["vcpu_count"], 1);
        assert_eq!(calls[0].1["mem_size_mib"], 256);
        assert_eq!(calls[2].1["is_read_only"], true);
        assert_eq!(calls[3].1["uds_path"], "/v.sock");
        assert_eq!(calls[5].1["action_type"], "InstanceStart");
    }

    #[test]
    fn firecrackers_fault_message_is_what_an_error_says() {
        let body = br#"{"fault_message":"Invalid kernel path"}"#;
        assert_eq!(
            fault_message(StatusCode::BAD_REQUEST, body),
            "Invalid kernel path"
        );
        assert_eq!(fault_message(StatusCode::BAD_REQUEST, b""), "Bad Request");
    }
}
