//! QEMU: each VM is QEMU's `microvm` machine, under KVM or TCG, started directly as the
//! VM's own uid (`command.rs` builds its command line). The agent channel is a virtio
//! serial port that QEMU connects to a unix socket the runner listens on, in the VM's
//! folder beside the console log and QEMU's own messages; the egress tunnel's port
//! another (`../tunnel.rs`); QMP, the way to QEMU itself, another. A VM can be saved whole and restored (`save.rs`).
//!
//! With `--accel auto` the first VM is a probe: KVM if /dev/kvm opens and a guest boots
//! with it in time, TCG otherwise. TCG guests are told the host's TSC rate (see
//! [`tsc_cmdline`]).

mod command;
mod save;

pub(super) use save::save;

use super::error::io_error;
use super::host::{create_file, kvm_gid, open_kvm, spawn_in_cgroup, Host};
use super::qmp::Qmp;
use super::sandbox::Control;
use super::{AccelChoice, Prepare, VmConfig, VmError, VmSandbox};
use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::net::UnixListener;
use tokio::sync::OnceCell;

/// How long a KVM guest may take to reach its agent before `--accel auto` falls back
/// to TCG (a working KVM boots this kernel in well under a second).
const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The accelerator in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation.
    Kvm,
    /// QEMU's emulator.
    Tcg,
}

impl Accel {
    /// QEMU's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// The runner's listening sockets of a VM whose QEMU has started.
struct Listeners {
    /// For the agent's channel.
    agent: UnixListener,
    /// For QMP.
    qmp: UnixListener,
    /// For the egress tunnel.
    egress: UnixListener,
}

/// The QEMU side of the backend: the accelerator, once chosen, and the TCG guests'
/// clock settings.
pub struct Qemu {
    accel: OnceCell<Accel>,
    /// Extra kernel command line for TCG guests (their clock calibration).
    tcg_cmdline: String,
}

impl Qemu {
    /// Checks what QEMU needs: its binary, and /dev/kvm when KVM is asked for.
    pub(super) fn check(config: &VmConfig) -> Result<(), VmError> {
        if !on_path(command::QEMU) {
            return Err(VmError::NoVmm(command::QEMU));
        }
        if config.accel == AccelChoice::Kvm {
            open_kvm().map_err(VmError::NoKvm)?;
        }
        Ok(())
    }

    /// The QEMU side for `config`: the accelerator is fixed now unless it is `auto`.
    pub(super) fn new(config: &VmConfig) -> Qemu {
        let accel = OnceCell::new();
        match config.accel {
            AccelChoice::Tcg => {
                let _ = accel.set(Accel::Tcg);
            }
            AccelChoice::Kvm => {
                let _ = accel.set(Accel::Kvm);
            }
            AccelChoice::Auto => {}
        }
        Qemu {
            accel,
            tcg_cmdline: tsc_cmdline(),
        }
    }

    /// Boots one VM and waits for its agent's Ready (and, with `prepare`, for its
    /// interpreter to wait for the program).
    pub(super) async fn create(&self, host: &Host, prepare: Prepare) -> Result<VmSandbox, VmError> {
        let accel = self.accel(host).await;
        self.boot(host, accel, host.config.boot_timeout, prepare)
            .await
    }

    /// The accelerator, chosen at the first VM.
    async fn accel(&self, host: &Host) -> Accel {
        *self.accel.get_or_init(|| self.detect_accel(host)).await
    }

    /// For `--accel auto`: KVM if /dev/kvm opens and a guest boots with it in time.
    /// A nested host can offer /dev/kvm on which a standard guest never boots, so
    /// only a real boot tells.
    async fn detect_accel(&self, host: &Host) -> Accel {
        if let Err(e) = open_kvm() {
            tracing::info!(reason = %e, "accel: tcg (no usable /dev/kvm)");
            return Accel::Tcg;
        }
        match self
            .boot(host, Accel::Kvm, KVM_PROBE_TIMEOUT, Prepare::default())
            .await
        {
            Ok(probe) => {
                probe.destroy().await;
                tracing::info!("accel: kvm (a probe VM booted)");
                Accel::Kvm
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "accel: tcg (/dev/kvm opens, but a probe VM failed with KVM or did \
                     not reach its agent within {KVM_PROBE_TIMEOUT:?}); set --accel to \
                     skip the probe"
                );
                Accel::Tcg
            }
        }
    }

    async fn boot(
        &self,
        host: &Host,
        accel: Accel,
        timeout: Duration,
        prepare: Prepare,
    ) -> Result<VmSandbox, VmError> {
        let (mut sandbox, listeners) = self.start(host, accel, false).await?;
        let started = Instant::now();
        let ready = async {
            sandbox.accept(&listeners.agent).await?;
            let qmp = sandbox.accept_control(&listeners.qmp).await?;
            sandbox.control = Some(Control::Qmp(Qmp::new(qmp)));
            let egress = sandbox.accept_control(&listeners.egress).await?;
            host.ready(&mut sandbox, &prepare).await?;
            sandbox.attach_egress(egress, host.egress.as_deref(), None);
            Ok(())
        };
        let outcome = tokio::time::timeout(timeout, ready).await;
        let sandbox = sandbox.booted(outcome, timeout).await?;
        tracing::debug!(
            vm = sandbox.id,
            ?accel,
            boot_ms = started.elapsed().as_millis() as u64,
            "VM ready"
        );
        Ok(sandbox)
    }

    /// Starts one VM's QEMU (waiting for a saved state with `incoming`): its id, cgroup,
    /// uid and folder, the runner's sockets, and the machine it is.
    async fn start(
        &self,
        host: &Host,
        accel: Accel,
        incoming: bool,
    ) -> Result<(VmSandbox, Listeners), VmError> {
        let machine = save::machine(host, accel)?;
        let gid = match accel {
            Accel::Kvm => kvm_gid()?,
            Accel::Tcg => host.config.vmm_uid_base,
        };
        let vm = host
            .allocate(|name| host.instance_dir.join(name), gid)
            .await?;
        let listen = |name: &str| {
            let socket = vm.dir.join(name);
            let listener =
                UnixListener::bind(&socket).map_err(io_error("listening on", &socket))?;
            vm.user.own(&socket)?;
            Ok::<_, VmError>((socket, listener))
        };
        let (socket, agent) = listen("agent.sock")?;
        let (qmp_socket, qmp) = listen("qmp.sock")?;
        let (egress_socket, egress) = listen("egress.sock")?;
        let console = vm.dir.join("console.log");
        let cmdline = self.cmdline(host, accel);
        let spec = command::QemuSpec {
            image: &host.image,
            accel,
            memory_mb: host.config.guest_memory_mb,
            socket: &socket,
            egress: &egress_socket,
            qmp: &qmp_socket,
            console: &console,
            cmdline: &cmdline,
            incoming,
        };
        let cmd = command::command(&spec);
        let log = Stdio::from(create_file(&vm.dir.join("vmm.log"))?);
        let child = spawn_in_cgroup(cmd, &vm.procs, Some(vm.user), Stdio::null(), log)?;
        let mut sandbox = VmSandbox::started(vm.id, child, vm.leftovers);
        sandbox.machine = Some(machine);
        Ok((sandbox, Listeners { agent, qmp, egress }))
    }

    /// The guest kernel's command line: the common part, TCG's clock settings, and the
    /// agent's argument.
    fn cmdline(&self, host: &Host, accel: Accel) -> String {
        let mut cmdline = host.common_cmdline();
        if accel == Accel::Tcg {
            cmdline.push(' ');
            cmdline.push_str(&self.tcg_cmdline);
        }
        cmdline.push_str(" -- ");
        cmdline.push_str(sandbox_agent::init::INIT_ARG);
        cmdline
    }
}

/// A TCG guest's kernel can hang calibrating its clock against the emulated PIT; told
/// the TSC rate (the host's, which TCG passes through), it skips the calibration. And
/// since the emulated CPU does not claim an invariant TSC, the kernel would fall back
/// to a jiffies clock (4 ms steps, lost ticks when QEMU is throttled) unless told the
/// TSC is reliable, which the host's TSC, read through TCG, is. Public for tests that
/// boot a TCG guest of their own.
pub fn tsc_cmdline() -> String {
    let khz = fs::read_to_string("/proc/cpuinfo").ok().and_then(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("cpu MHz"))
            .and_then(|rest| {
                rest.trim_start_matches([' ', '\t', ':'])
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map(|mhz| (mhz * 1000.0).round() as u64)
    });
    match khz {
        Some(khz) => format!("tsc_early_khz={khz} tsc=reliable"),
        None => "tsc=reliable".to_owned(),
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
