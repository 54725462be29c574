//! The runner's configuration: flags and environment variables (clap), validated once
//! into [`RunnerConfig`] and [`SandboxConfig`].

//!
//! - `mod.rs`: the flags, the validated settings, and the checks;
//! - `backend.rs`: the backend's own settings, made from the sandbox flags;
//! - `packages.rs`, `session.rs`: the packages' and the sessions' flags and checks;
//! - `egress.rs`: the hosts opened to sandboxes through the runner's proxy;
//! - `summary.rs`: the start-up line.

use crate::backend::process::agent_binary::AgentBinary;
use crate::backend::process::ProcessConfig;
use crate::backend::vm::{AccelChoice, VmConfig, Vmm};
use crate::languages::{self, Languages};
use crate::pool::PoolConfig;
use crate::session::{OnIdle, SessionConfig};

mod backend;
mod egress;
mod packages;
mod session;
mod summary;
#[cfg(test)]
mod tests;

pub use egress::{EgressArgs, EgressConfig, EgressDefault};
pub use packages::{PackageArgs, DEFAULT_WARM_IMPORTS};
use sandbox_protocol::api::{defaults, Limits};
pub use session::{SessionArgs, DEFAULT_DATA_DIR};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Where the uids of VMM processes start, above `--id-base` (clear of the process
/// backend's id maps).
const VMM_UID_OFFSET: u32 = 500_000;

/// Which backend makes sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// Linux namespaces, cgroups and seccomp around a process tree.
    Process,
    /// A microVM per sandbox (QEMU or Firecracker).
    Vm,
}

impl BackendKind {
    /// How long past a job's run time the backend waits for its sandbox's report: what a
    /// caller adds to a run's timeout for it (`GET /health`'s `limits.answerMarginMs`).
    pub fn report_grace(self) -> Duration {
        match self {
            BackendKind::Process => crate::backend::process::REPORT_GRACE,
            BackendKind::Vm => crate::backend::vm::REPORT_GRACE,
        }
    }
}

/// Sandbox settings, shared by `serve`, `run` and embedding programs.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Backend that makes sandboxes.
    #[arg(long, env = "RUNNER_BACKEND", value_enum, default_value = "process")]
    pub backend: BackendKind,
    /// Timeout of a run that gives none, in milliseconds.
    #[arg(
        long = "default-timeout-ms",
        env = "SANDBOX_TIMEOUT_MS",
        default_value_t = defaults::TIMEOUT_MS
    )]
    pub default_timeout_ms: u64,
    /// Largest timeout a request may ask for, in milliseconds.
    #[arg(long, env = "RUNNER_MAX_TIMEOUT_MS", default_value_t = defaults::MAX_TIMEOUT_MS)]
    pub max_timeout_ms: u64,
    /// Memory of one sandbox in MiB (no swap).
    #[arg(long, env = "RUNNER_MEMORY_MB", default_value_t = defaults::MEMORY_MB)]
    pub memory_mb: u64,
    /// CPUs one sandbox may use (a CFS quota).
    #[arg(long, env = "RUNNER_CPUS", default_value_t = defaults::CPUS)]
    pub cpus: f64,
    /// Most processes and threads in one sandbox.
    #[arg(long, env = "RUNNER_PIDS_MAX", default_value_t = defaults::PIDS_MAX)]
    pub pids_max: u64,
    /// Bytes of stdout, and of stderr, kept per run; more stops the program.
    #[arg(long, env = "RUNNER_OUTPUT_CAP_BYTES", default_value_t = defaults::OUTPUT_CAP_BYTES as usize)]
    pub output_cap_bytes: usize,
    /// Size of /tmp, and of the home folder, in MiB (counted in the memory limit).
    #[arg(long, env = "RUNNER_TMPFS_MB", default_value_t = 64)]
    pub tmpfs_mb: u64,
    /// Host uid/gid that sandbox root maps to; the sandbox user is this + 1000.
    #[arg(long, env = "RUNNER_ID_BASE", default_value_t = 1_000_000)]
    pub id_base: u32,
    /// Make process sandboxes from forks of a template, Python programs from forks of its
    /// interpreter, where the host allows it (a root runner whose kernel lets an
    /// unprivileged user make user namespaces; the host's libpython for Python); `false`:
    /// each from a fresh jail process, each program executed.
    #[arg(long, env = "RUNNER_TEMPLATES", default_value_t = true, action = clap::ArgAction::Set)]
    pub templates: bool,
    /// The binary a template's sandboxes execute as their agent: `auto` (`sandbox-agent`
    /// beside the runner's executable, if it says this build and only root or the
    /// runner's user may change it and its folder; else the runner's own binary), `self`, or a
    /// path to such a `sandbox-agent` (the runner refuses to start if it is not one). A
    /// static `sandbox-agent` costs each sandbox less CPU to execute than the runner's.
    #[arg(long, env = "RUNNER_SANDBOX_AGENT", default_value = "auto")]
    pub sandbox_agent: AgentBinary,
    /// The runner's state folder.
    #[arg(long, env = "RUNNER_STATE_DIR", default_value = "/run/sandbox-runner")]
    pub state_dir: PathBuf,
    /// Where the cgroup hierarchies are mounted.
    #[arg(long, env = "RUNNER_CGROUP_ROOT", default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// The VMM of the vm backend.
    #[arg(long, env = "RUNNER_VMM", value_enum, default_value = "qemu")]
    pub vmm: Vmm,
    /// How the vm backend runs guests: KVM, TCG, or KVM when a probe VM boots with it.
    #[arg(long, env = "RUNNER_ACCEL", value_enum, default_value = "auto")]
    pub accel: AccelChoice,
    /// The image folder of the vm backend (made by `sandbox-runner image build`).
    #[arg(
        long,
        env = "RUNNER_VM_IMAGE",
        default_value = "/var/lib/sandbox-runner/images/current"
    )]
    pub vm_image: PathBuf,
    /// How long booting a VM to its agent may take, in milliseconds.
    #[arg(long, env = "RUNNER_VM_BOOT_TIMEOUT_MS", default_value_t = 60_000)]
    pub vm_boot_timeout_ms: u64,
    /// Guest memory beyond the sandbox's, in MiB: the guest kernel, its page tables and
    /// the init (the guest gets the sandbox's memory plus this, so that the program
    /// really has its limit).
    #[arg(long, env = "RUNNER_VM_GUEST_OVERHEAD_MB", default_value_t = 128)]
    pub vm_guest_overhead_mb: u64,
    /// Memory of the VMM process beyond the guest's, in MiB (its cgroup's cap is the
    /// guest memory plus this).
    #[arg(long, env = "RUNNER_VMM_OVERHEAD_MB", default_value_t = 192)]
    pub vmm_overhead_mb: u64,
    /// The `firecracker` binary (a bare name is looked up on PATH).
    #[arg(long, env = "RUNNER_FIRECRACKER_BIN", default_value = "firecracker")]
    pub firecracker_bin: PathBuf,
    /// Firecracker's `jailer` binary (a bare name is looked up on PATH).
    #[arg(long, env = "RUNNER_JAILER_BIN", default_value = "jailer")]
    pub jailer_bin: PathBuf,
    /// Run Firecracker without its jailer (no chroot, no namespaces of its own; still
    /// an unprivileged user in a cgroup). For hosts where the jailer cannot run.
    #[arg(long, env = "RUNNER_FIRECRACKER_WITHOUT_JAILER")]
    pub firecracker_without_jailer: bool,
    /// UNSAFE: make process sandboxes without cgroups, so without memory and CPU limits
    /// (the process cap stays, as an rlimit). Only for an ordinary user's runner outside
    /// a delegated cgroup v2 subtree; `/health` and sandbox-mcp say so.
    #[arg(long, env = "RUNNER_UNSAFE_NO_RESOURCE_LIMITS")]
    pub unsafe_no_resource_limits: bool,
    /// Refill the pool from a snapshot of a booted VM rather than by booting (Firecracker).
    #[arg(long, env = "RUNNER_VM_SNAPSHOTS", default_value_t = true, action = clap::ArgAction::Set)]
    pub vm_snapshots: bool,
    /// The package set, warm imports and inline dependencies.
    #[command(flatten)]
    pub packages: PackageArgs,
    /// A TOML file of languages: rows added to the built-in ones, replacing them by
    /// name, or removing them (docs/languages.md).
    #[arg(long, env = "RUNNER_LANGUAGES")]
    pub languages: Option<PathBuf>,
    /// The hosts opened to sandboxes through the runner's proxy (none by default).
    #[command(flatten)]
    pub egress: EgressArgs,
}

/// `sandbox-runner serve` settings.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "RUNNER_LISTEN", default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// Bearer token every POST /run must carry.
    #[arg(long, env = "SANDBOX_RUNNER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Serve without a token (accepted on a loopback address only).
    #[arg(long)]
    pub no_auth: bool,
    /// The pool, its queue and the largest program.
    #[command(flatten)]
    pub pool: PoolArgs,
    /// On SIGTERM, how long runs in flight may go on before they are killed, in milliseconds.
    #[arg(long, env = "RUNNER_SHUTDOWN_GRACE_MS", default_value_t = 30_000)]
    pub shutdown_grace_ms: u64,
    /// Limits on HTTP clients.
    #[command(flatten)]
    pub http: HttpLimitArgs,
    /// The sandboxes.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// The pool, its wait queue and the largest program: settings of every runner, also of
/// one embedded in another program (`sandbox-mcp up`).
#[derive(Debug, Clone, clap::Args)]
pub struct PoolArgs {
    /// Sandboxes kept (warm plus running): the most runs at once.
    #[arg(long, env = "RUNNER_POOL_SIZE", default_value_t = defaults::POOL_SIZE)]
    pub pool_size: usize,
    /// Requests that may wait for a sandbox at once; more get 429.
    #[arg(long, env = "RUNNER_QUEUE_SIZE", default_value_t = defaults::QUEUE_SIZE)]
    pub queue_size: usize,
    /// How long a request may wait for a sandbox before it gets 503, in milliseconds.
    #[arg(long, env = "RUNNER_QUEUE_TIMEOUT_MS", default_value_t = defaults::QUEUE_TIMEOUT_MS)]
    pub queue_timeout_ms: u64,
    /// Largest program accepted, in bytes; more gets 413.
    #[arg(long, env = "RUNNER_CODE_CAP_BYTES", default_value_t = defaults::CODE_CAP_BYTES as usize)]
    pub code_cap_bytes: usize,
    /// Sessions: sandboxes that live across runs.
    #[command(flatten)]
    pub sessions: SessionArgs,
}

http_limits::limit_args!(
    /// Limits on HTTP clients (see the `http-limits` crate): `RUNNER_HEADER_TIMEOUT_MS`,
    /// `RUNNER_MAX_HEADER_BYTES`, `RUNNER_MAX_CONNECTIONS`, `RUNNER_BODY_TIMEOUT_MS`.
    pub struct HttpLimitArgs,
    "RUNNER"
);

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An HTTP limit cannot be used.
    #[error("RUNNER_HEADER_TIMEOUT_MS, RUNNER_MAX_HEADER_BYTES, RUNNER_MAX_CONNECTIONS or RUNNER_BODY_TIMEOUT_MS: {0}")]
    HttpLimit(http_limits::LimitError),
    /// No token, and no --no-auth.
    #[error("SANDBOX_RUNNER_TOKEN (or --token) is required; --no-auth serves without one, on loopback only")]
    MissingToken,
    /// --no-auth on an address others can reach.
    #[error("--no-auth is accepted on a loopback address only, not {0}")]
    NoAuthNotLoopback(SocketAddr),
    /// An empty token.
    #[error("the token must not be empty")]
    EmptyToken,
    /// The package store could not be read.
    #[error("RUNNER_PACKAGES_DIR: {0}")]
    Packages(String),
    /// The egress policy cannot be used.
    #[error("RUNNER_EGRESS_ALLOW, RUNNER_EGRESS_ALLOW_CIDRS: {0}")]
    Egress(String),
    /// The language table could not be made.
    #[error("RUNNER_LANGUAGES: {0}")]
    Languages(#[from] crate::languages::LanguagesError),
    /// A value outside its range.
    #[error("{name} must be {rule}, not {value}")]
    OutOfRange {
        /// The name concerned.
        name: &'static str,
        /// The range it must be in.
        rule: &'static str,
        /// The value concerned.
        value: String,
    },
}

/// Validated sandbox settings.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The timeout of a run that gives none.
    pub default_timeout: Duration,
    /// The largest timeout a run may ask for.
    pub max_timeout: Duration,
    /// Bytes of stdout, and of stderr, kept per run.
    pub output_cap_bytes: usize,
    /// The backend and its own settings.
    pub backend: BackendConfig,
    /// The package set, warm imports and inline dependencies.
    pub packages: PackagesConfig,
    /// The languages offered.
    pub languages: Arc<Languages>,
    /// The hosts opened to sandboxes (none: egress off).
    pub egress: EgressConfig,
}

/// Validated packages' settings.
#[derive(Debug, Clone)]
pub struct PackagesConfig {
    /// The package store.
    pub store: PathBuf,
    /// The set every sandbox sees (none: the standard library only).
    pub set: Option<sandbox_packages::PackageSet>,
    /// Modules a warm Python interpreter imports while it waits.
    pub warm_imports: Vec<String>,
    /// How inline dependencies are resolved (none: refused).
    pub deps: Option<sandbox_packages::Policy>,
}

/// The settings of the one backend in use (the other's flags are not read into it).
#[derive(Debug, Clone)]
pub enum BackendConfig {
    /// Namespaces, cgroups and seccomp.
    Process(ProcessConfig),
    /// A microVM per sandbox.
    Vm(VmConfig),
}

impl BackendConfig {
    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        match self {
            BackendConfig::Process(_) => BackendKind::Process,
            BackendConfig::Vm(_) => BackendKind::Vm,
        }
    }
}

/// Validated `serve` settings.
#[derive(Clone)]
pub struct RunnerConfig {
    /// The address to listen on.
    pub listen: SocketAddr,
    /// `None` only with --no-auth on loopback.
    pub token: Option<String>,
    /// The pool's size and queue.
    pub pool: PoolConfig,
    /// The largest program, bytes.
    pub code_cap_bytes: usize,
    /// On SIGTERM, how long runs in flight may go on.
    pub shutdown_grace: Duration,
    /// Limits on HTTP clients.
    pub http: http_limits::Limits,
    /// The sandboxes.
    pub sandbox: SandboxConfig,
    /// What `GET /health` publishes of the limits above.
    pub limits: Limits,
    /// The sessions.
    pub sessions: SessionConfig,
    /// The data folder: paused sessions and snapshots.
    pub store: crate::store::StoreConfig,
}

impl RunnerConfig {
    /// The most sandboxes that exist at once: the pool's and the sessions'.
    pub fn sandboxes(&self) -> usize {
        self.pool.size + self.sessions.max_sessions
    }
}

fn check(
    ok: bool,
    name: &'static str,
    rule: &'static str,
    value: impl fmt::Display,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            name,
            rule,
            value: value.to_string(),
        })
    }
}

impl SandboxArgs {
    /// Checks the values and builds the backend settings.
    pub fn validate(&self) -> Result<SandboxConfig, ConfigError> {
        self.check_ranges()?;
        let packages = self.packages_config()?;
        let egress = self.egress.validate(self.backend, self.vmm)?;
        let mut languages = self.languages(&packages)?;
        if egress.is_on() {
            languages.add_env(&sandbox_egress::proxy_env());
        }
        let languages = Arc::new(languages);
        let backend = match self.backend {
            BackendKind::Process => {
                BackendConfig::Process(self.process_config(&packages, languages.clone()))
            }
            BackendKind::Vm => BackendConfig::Vm(self.vm_config(&packages, languages.clone())),
        };
        Ok(SandboxConfig {
            default_timeout: Duration::from_millis(self.default_timeout_ms),
            max_timeout: Duration::from_millis(self.max_timeout_ms),
            output_cap_bytes: self.output_cap_bytes,
            backend,
            packages,
            languages,
            egress,
        })
    }

    /// Checks that each value is in its range, and that the backend takes them.
    fn check_ranges(&self) -> Result<(), ConfigError> {
        check(
            self.max_timeout_ms >= 1,
            "RUNNER_MAX_TIMEOUT_MS",
            "at least 1",
            self.max_timeout_ms,
        )?;
        check(
            (1..=self.max_timeout_ms).contains(&self.default_timeout_ms),
            "SANDBOX_TIMEOUT_MS",
            "between 1 and RUNNER_MAX_TIMEOUT_MS",
            self.default_timeout_ms,
        )?;
        check(
            self.memory_mb >= 16,
            "RUNNER_MEMORY_MB",
            "at least 16",
            self.memory_mb,
        )?;
        check(
            self.cpus >= 0.01 && self.cpus <= 1024.0,
            "RUNNER_CPUS",
            "between 0.01 and 1024",
            self.cpus,
        )?;
        check(
            self.pids_max >= 8,
            "RUNNER_PIDS_MAX",
            "at least 8",
            self.pids_max,
        )?;
        check(
            self.output_cap_bytes >= 1,
            "RUNNER_OUTPUT_CAP_BYTES",
            "at least 1",
            self.output_cap_bytes,
        )?;
        check(
            self.tmpfs_mb >= 1,
            "RUNNER_TMPFS_MB",
            "at least 1",
            self.tmpfs_mb,
        )?;
        check(
            self.id_base >= 1
                && self.id_base < u32::MAX - VMM_UID_OFFSET - crate::backend::vm::VMM_UIDS,
            "RUNNER_ID_BASE",
            "a non-root uid with room for 1000 more",
            self.id_base,
        )?;
        check(
            self.vm_boot_timeout_ms >= 1,
            "RUNNER_VM_BOOT_TIMEOUT_MS",
            "at least 1",
            self.vm_boot_timeout_ms,
        )?;
        check(
            !(self.unsafe_no_resource_limits && self.backend == BackendKind::Vm),
            "RUNNER_UNSAFE_NO_RESOURCE_LIMITS",
            "off with the vm backend (its limits are the guest's own)",
            self.unsafe_no_resource_limits,
        )
    }

    /// The languages offered: the table, checked on this host, and on the vm backend
    /// only those its guests can run.
    fn languages(&self, packages: &PackagesConfig) -> Result<Languages, ConfigError> {
        let context = languages::Context {
            memory_mb: self.memory_mb,
            packages: packages.set.as_ref().map(|set| set.dir.clone()),
        };
        let mut languages = Languages::load(self.languages.as_deref(), &context)?;
        if self.backend == BackendKind::Vm {
            // A guest runs what its image holds: a language whose toolchain the image
            // lacks (built before it was offered) is not offered.
            let image = std::fs::canonicalize(&self.vm_image).unwrap_or(self.vm_image.clone());
            if let Some(present) = sandbox_image::languages(&image) {
                languages.keep_only(&present, &format!("the VM image {}", image.display()))?;
            }
            languages.without_own_memory()?;
        }
        Ok(languages)
    }

    /// The packages' settings, with the store's current set (a VM sees the set its
    /// image was built with).
    fn packages_config(&self) -> Result<PackagesConfig, ConfigError> {
        let store = &self.packages.packages_dir;
        Ok(PackagesConfig {
            store: store.clone(),
            set: current_package_set(store)?,
            warm_imports: self.packages.warm_imports()?,
            deps: self.packages.deps_policy()?,
        })
    }
}

impl ServeArgs {
    /// Checks the values; refuses to serve without a token unless --no-auth on loopback.
    pub fn validate(&self) -> Result<RunnerConfig, ConfigError> {
        let token = match (&self.token, self.no_auth) {
            (_, true) if !self.listen.ip().is_loopback() => {
                return Err(ConfigError::NoAuthNotLoopback(self.listen))
            }
            (_, true) => None,
            (None, false) => return Err(ConfigError::MissingToken),
            (Some(t), false) if t.is_empty() => return Err(ConfigError::EmptyToken),
            (Some(t), false) => Some(t.clone()),
        };
        check(
            (1..=1024).contains(&self.pool.pool_size),
            "RUNNER_POOL_SIZE",
            "between 1 and 1024",
            self.pool.pool_size,
        )?;
        check(
            crate::backend::process::identity::range_end(
                self.sandbox.id_base,
                self.pool.pool_size + self.pool.sessions.max_sandbox_sessions,
            ) + u64::from(sandbox_jail::layout::SANDBOX_UID)
                < u64::from(u32::MAX),
            "RUNNER_ID_BASE",
            "low enough for 65536 host ids per sandbox of the pool and the sessions below 2^32",
            self.sandbox.id_base,
        )?;
        check(
            self.pool.queue_timeout_ms >= 1,
            "RUNNER_QUEUE_TIMEOUT_MS",
            "at least 1",
            self.pool.queue_timeout_ms,
        )?;
        check(
            self.pool.code_cap_bytes >= 1,
            "RUNNER_CODE_CAP_BYTES",
            "at least 1",
            self.pool.code_cap_bytes,
        )?;
        let sandbox = self.sandbox.validate()?;
        let limits = Limits {
            memory_mb: self.sandbox.memory_mb,
            cpus: self.sandbox.cpus,
            pids_max: self.sandbox.pids_max,
            default_timeout_ms: self.sandbox.default_timeout_ms,
            max_timeout_ms: self.sandbox.max_timeout_ms,
            output_cap_bytes: self.sandbox.output_cap_bytes as u64,
            code_cap_bytes: self.pool.code_cap_bytes as u64,
            queue_timeout_ms: self.pool.queue_timeout_ms,
            network: sandbox.egress.is_on(),
            network_hosts: sandbox.egress.policy.names(),
            network_by_default: sandbox.egress.is_on()
                && sandbox.egress.default == EgressDefault::All,
            resource_limits: !self.sandbox.unsafe_no_resource_limits,
            // Every sandbox with a cgroup (a VM's too, in its guest) is frozen between a
            // session's calls.
            sessions_frozen: !self.sandbox.unsafe_no_resource_limits,
            answer_margin_ms: self.sandbox.backend.report_grace().as_millis() as u64,
            dependencies_timeout_ms: dependencies_timeout(&sandbox),
            idle_sessions_pause: self.pool.sessions.session_on_idle == OnIdle::Pause,
            paused_ttl_ms: self.pool.sessions.paused_ttl_ms,
            snapshot_ttl_ms: self.pool.sessions.snapshot_ttl_ms,
        };
        Ok(RunnerConfig {
            listen: self.listen,
            token,
            limits,
            pool: PoolConfig {
                size: self.pool.pool_size,
                queue_size: self.pool.queue_size,
                queue_timeout: Duration::from_millis(self.pool.queue_timeout_ms),
            },
            code_cap_bytes: self.pool.code_cap_bytes,
            shutdown_grace: Duration::from_millis(self.shutdown_grace_ms),
            http: self.http.to_limits().map_err(ConfigError::HttpLimit)?,
            sandbox,
            sessions: self.pool.sessions.validate()?,
            store: self.pool.sessions.store()?,
        })
    }
}

/// The package store's current set: none when the store was never made (the first
/// `packages build` makes it) or has no current set.
pub fn current_package_set(
    store: &Path,
) -> Result<Option<sandbox_packages::PackageSet>, ConfigError> {
    if store.join("current").symlink_metadata().is_err() {
        return Ok(None);
    }
    sandbox_packages::Store::open(store)
        .and_then(|store| store.current())
        .map_err(|e| ConfigError::Packages(e.to_string()))
}

/// How long a program's inline dependencies may take to resolve before its run, as
/// `/health` publishes it: the policy's timeout where the process backend takes them, 0
/// where they are refused at once (turned off, or VM sandboxes).
fn dependencies_timeout(sandbox: &SandboxConfig) -> u64 {
    match (&sandbox.packages.deps, sandbox.backend.kind()) {
        (Some(policy), BackendKind::Process) => policy.timeout.as_millis() as u64,
        _ => 0,
    }
}
