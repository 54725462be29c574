//! The process backend: each sandbox is a process tree in fresh Linux namespaces, in a
//! cgroup of its own, under a seccomp filter (see [`jail`] for the steps and
//! docs/security.md for what each one stops).

pub mod deps;
mod freeze;
pub mod identity;
pub mod leader;
pub mod rootless;
pub mod template;

use super::cgroup::{self, Cgroup, CgroupError, CgroupLimits, Freezer, Hierarchy};
use super::channel::{self, ChannelError};
use super::RunOutcome;
use crate::languages::{Language, Languages};
use deps::{DepsMountError, DepsMounts};
use identity::{IdLayout, Identities, Identity};
use leader::Leader;
use rootless::{RootlessError, RootlessSetup};
use sandbox_agent::template::PythonSpec;
use sandbox_jail::{owner, HostIds, JailSpec};
use sandbox_protocol::agent::{AgentMessage, FileRequest, Job};
use sandbox_protocol::language::LoaderKind;
use sandbox_protocol::Lang;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use template::{Template, TemplateError};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::net::UnixStream;
use tokio::process::Command;

/// How long the agent may take, past the job's run time ([`Job::run_time`]), to report
/// (`GET /health` publishes it: `limits.answerMarginMs`).
pub const REPORT_GRACE: Duration = Duration::from_secs(5);
/// How long a sandbox without a cgroup may take to end by itself once its channel is
/// closed, before its jail is killed.
const SELF_END_GRACE: Duration = Duration::from_secs(2);
/// The most sandbox indices a template serves: its id maps hold two lines per index,
/// and the kernel at most 340 lines.
const TEMPLATE_SLOTS_MAX: usize = 160;
/// The most bytes of the jail's standard error kept for an error message.
const JAIL_STDERR_CAP: u64 = 4096;

/// How process sandboxes are made.
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// Where the cgroup hierarchies are mounted (normally `/sys/fs/cgroup`).
    pub cgroup_mount: PathBuf,
    /// The runner's state folder; `root/` below it is where each jail mounts its stage.
    pub state_dir: PathBuf,
    /// The first host uid/gid of sandboxes: sandbox `i` maps its root to
    /// `id_base + i * 65536` and its user to that + 1000 (see [`identity`]).
    pub id_base: u32,
    /// Memory, CPU and process limits.
    pub limits: CgroupLimits,
    /// Size of /tmp, and of the home folder, in bytes.
    pub tmpfs_bytes: u64,
    /// Most open files per process.
    pub nofile: u64,
    /// How long making a sandbox may take.
    pub create_timeout: Duration,
    /// Make sandboxes without cgroups: no memory or CPU limit (the process cap stays,
    /// as an rlimit). For an ordinary user outside a delegated cgroup v2 subtree, who
    /// asked for it by name.
    pub unsafe_no_resource_limits: bool,
    /// The package set shown read-only in every sandbox (none: the standard library).
    pub packages: Option<PathBuf>,
    /// Modules a warm Python interpreter imports while it waits.
    pub warm_imports: Vec<String>,
    /// The languages offered: what a sandbox prepared for one starts.
    pub languages: Arc<Languages>,
    /// Make sandboxes from forks of a template where this host allows it (a root
    /// runner whose kernel lets an unprivileged user make user namespaces); otherwise,
    /// or if the template cannot start, each from a fresh jail process.
    pub templates: bool,
}

/// Why a process sandbox could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// An ordinary user's runner lacks what stands in for root.
    #[error(transparent)]
    Rootless(#[from] RootlessError),
    /// A cgroup step failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The state folder could not be made.
    #[error("creating state folder {path}: {source}")]
    StateDir {
        /// The file or folder concerned.
        path: PathBuf,
        /// What failed underneath.
        source: std::io::Error,
    },
    /// The state folder's path cannot name an overlay layer.
    #[error("the state folder {0} may not contain ',', ':' or '\\' (it names overlay layers)")]
    StatePath(PathBuf),
    /// Every host identity is held.
    #[error(transparent)]
    Identities(#[from] identity::Exhausted),
    /// The jail could not be started.
    #[error("starting the jail: {0}")]
    Spawn(std::io::Error),
    /// The jail failed to set the sandbox up: its own words, which name the step.
    #[error("sandbox setup failed: {0}")]
    Jail(String),
    /// The task making the cgroup failed.
    #[error("sandbox setup failed: the cgroup task: {0}")]
    CgroupTask(tokio::task::JoinError),
    /// The jail's spec could not be encoded.
    #[error("sandbox setup failed: encoding the jail spec: {0}")]
    Spec(serde_json::Error),
    /// The jail was started without a pipe on its standard error.
    #[error("sandbox setup failed: the jail's standard error is not piped")]
    NoStderr,
    /// The new sandbox's agent did not get ready (said nothing, or failed to start the
    /// interpreter).
    #[error("sandbox setup failed: {0}")]
    NotReady(ChannelError),
    /// The sandbox was not ready in time.
    #[error("sandbox setup took longer than {0:?}")]
    SetupTimeout(Duration),
    /// The exchange with the agent failed.
    #[error(transparent)]
    Channel(#[from] ChannelError),
    /// Inline dependencies could not be mounted.
    #[error(transparent)]
    Deps(#[from] DepsMountError),
    /// The task mounting inline dependencies failed.
    #[error("mounting inline dependencies: the task: {0}")]
    DepsTask(tokio::task::JoinError),
    /// This runner mounts no inline dependencies (an ordinary user's cannot).
    #[error("inline dependencies need a runner started as root")]
    NoDeps,
    /// The template could not make the sandbox.
    #[error("sandbox setup failed: {0}")]
    Template(#[from] TemplateError),
    /// A session's sandbox could not be frozen or thawed.
    #[error("freezing or thawing the session's sandbox: {0}")]
    Freezer(CgroupError),
    /// The task freezing or thawing a session's sandbox failed.
    #[error("freezing or thawing the session's sandbox: the task: {0}")]
    FreezerTask(tokio::task::JoinError),
}

/// Who makes the sandboxes' user namespaces and maps their ids.
enum Privilege {
    /// Root: the jail writes the maps; the namespace is created by the sandbox's own
    /// host identity where the kernel lets it.
    Root {
        /// The namespace's owner is the sandbox's identity, not root.
        unprivileged_owner: bool,
    },
    /// An ordinary user (see [`rootless`]).
    User(Box<RootlessSetup>),
}

/// Makes process sandboxes.
pub struct ProcessBackend {
    config: ProcessConfig,
    /// None: sandboxes without cgroups (`unsafe_no_resource_limits`).
    hierarchy: Option<Arc<Hierarchy>>,
    stage_dir: PathBuf,
    next_id: AtomicU64,
    identities: Arc<Identities>,
    privilege: Privilege,
    /// Where inline dependencies are mounted into sandboxes (root only).
    deps: Option<Arc<DepsMounts>>,
    /// The template sandboxes are forked from, where there is one.
    template: Option<Template>,
    /// The template holding Python's interpreter, for sandboxes prepared for Python
    /// (whose programs are forked from it): a sandbox forked from a process that big
    /// copies, and tears down, the page tables of its ~100 MiB, which only a Python
    /// program makes up for.
    python_template: Option<Template>,
}

impl ProcessBackend {
    /// Checks what the backend needs for `sandboxes` at once (root or what stands in for
    /// it, cgroups unless the operator opted out), cleans up after dead runners, and
    /// makes the state folder.
    pub fn new(config: ProcessConfig, sandboxes: usize) -> Result<Self, ProcessError> {
        let root = nix::unistd::geteuid().is_root();
        let privilege = if root {
            Privilege::Root {
                unprivileged_owner: unprivileged_owner(config.id_base),
            }
        } else {
            let uid = nix::unistd::getuid().as_raw();
            Privilege::User(Box::new(rootless::check(sandboxes as u64, || {
                owner::unprivileged_userns(uid)
            })?))
        };
        let hierarchy = if config.unsafe_no_resource_limits {
            warn_no_limits();
            None
        } else {
            match open_hierarchy(&config, root) {
                Ok(hierarchy) => Some(Arc::new(hierarchy)),
                Err(ProcessError::Cgroup(e)) if !root => {
                    return Err(RootlessError::NoLimits(e).into())
                }
                Err(e) => return Err(e),
            }
        };
        let layout = match &privilege {
            Privilege::Root { .. } => IdLayout::root(config.id_base),
            Privilege::User(setup) => IdLayout::subordinate(setup.uids, setup.gids),
        };
        let deps = match privilege {
            Privilege::Root { .. } => Some(Arc::new(DepsMounts::setup(&config.state_dir)?)),
            Privilege::User(_) => None,
        };
        let stage_dir = match privilege {
            Privilege::Root { .. } => make_stage_dir(&config)?,
            // The jail's child, a subordinate id of the user, mounts its stage there in
            // its own mount namespace: a folder everyone may search (the user's own state
            // folder may not be), hidden by the mount from nothing that the jail needs.
            Privilege::User(_) => PathBuf::from(rootless::STAGE_DIR),
        };
        let (template, python_template) = match privilege {
            Privilege::Root {
                unprivileged_owner: true,
            } if config.templates => start_templates(&config, sandboxes),
            _ => (None, None),
        };
        Ok(ProcessBackend {
            identities: Arc::new(Identities::new(layout)),
            template,
            python_template,
            config,
            hierarchy,
            stage_dir,
            next_id: AtomicU64::new(1),
            privilege,
            deps,
        })
    }

    /// Makes one sandbox and waits for its agent's Ready (and, with `prepare`, for its
    /// interpreter to wait for the program; with `warm`, a Python one imports the warm
    /// imports meanwhile). From the template where there is one; if the template fails
    /// to make it, the template is left for good (logged) and a jail makes it.
    pub async fn create(
        &self,
        prepare: Option<Lang>,
        warm: bool,
    ) -> Result<ProcessSandbox, ProcessError> {
        match self.make(prepare.clone(), warm, true).await {
            Err(ProcessError::Template(_)) => self.make(prepare, warm, false).await,
            made => made,
        }
    }

    /// [`create`](Self::create), by the template only if `by_template`.
    async fn make(
        &self,
        prepare: Option<Lang>,
        warm: bool,
        by_template: bool,
    ) -> Result<ProcessSandbox, ProcessError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cgroup = match &self.hierarchy {
            Some(hierarchy) => Some(self.make_cgroup(hierarchy, id).await?),
            None => None,
        };
        let identity = match self.identities.take() {
            Ok(identity) => identity,
            Err(e) => {
                remove_cgroup(cgroup).await;
                return Err(e.into());
            }
        };
        let deps_dir = match self.deps.as_ref().map(|d| d.sandbox_dir(id)).transpose() {
            Ok(dir) => dir,
            Err(e) => {
                if remove_cgroup(cgroup).await {
                    self.identities.give_back(identity);
                }
                return Err(e.into());
            }
        };
        let spec = JailSpec {
            cgroup_procs: cgroup.as_ref().map(Cgroup::procs_files).unwrap_or_default(),
            stage_dir: self.stage_dir.clone(),
            ids: identity.ids,
            gids: identity.gids,
            unprivileged_owner: matches!(
                self.privilege,
                Privilege::Root {
                    unprivileged_owner: true
                }
            ),
            rootless: match &self.privilege {
                Privilege::Root { .. } => None,
                Privilege::User(setup) => Some(setup.helpers.clone()),
            },
            nproc: cgroup.is_none().then_some(self.config.limits.pids_max),
            tmp_bytes: self.config.tmpfs_bytes,
            home_bytes: self.config.tmpfs_bytes,
            nofile: self.config.nofile,
            // Above the tmpfs size, so that filling /tmp ends in ENOSPC, not SIGXFSZ.
            fsize_bytes: self.config.tmpfs_bytes.saturating_mul(2),
            packages: self.config.packages.clone(),
            deps: deps_dir,
            devices: None,
            memlock_bytes: None,
            sigpending: None,
            shared: self.config.languages.shared_paths().to_vec(),
        };
        let template = self
            .template_for(prepare.as_ref())
            .filter(|t| by_template && t.serves(identity.index()));
        let started = match template {
            Some(template) => {
                let forked = self.fork(template, &spec, identity.index()).await;
                if let Err(ProcessError::Template(e)) = &forked {
                    template.leave(e);
                }
                forked
            }
            None => start(&spec).await,
        };
        match started {
            Ok((child, channel, stderr)) => {
                let mut sandbox = ProcessSandbox {
                    id,
                    freezer: cgroup.as_ref().map(Cgroup::freezer),
                    cgroup,
                    identity: Some(identity),
                    identities: self.identities.clone(),
                    leader: child,
                    channel,
                    stderr: Some(stderr),
                    oom_kills: 0,
                    deps: self.deps.clone(),
                };
                let warm_imports = if warm {
                    &self.config.warm_imports[..]
                } else {
                    &[]
                };
                let language = prepare.and_then(|l| self.config.languages.get(l.as_str()).ok());
                let ready = sandbox.await_ready(language, warm_imports);
                match tokio::time::timeout(self.config.create_timeout, ready).await {
                    Ok(Ok(())) => {
                        sandbox.log_stderr();
                        Ok(sandbox)
                    }
                    Ok(Err(e)) => Err(sandbox.fail(e).await),
                    Err(_) => {
                        let timeout = ProcessError::SetupTimeout(self.config.create_timeout);
                        Err(sandbox.fail(timeout).await)
                    }
                }
            }
            Err(e) => {
                if let Some(deps) = &self.deps {
                    deps.release(id);
                }
                if remove_cgroup(cgroup).await {
                    self.identities.give_back(identity);
                }
                Err(e)
            }
        }
    }

    /// The template a sandbox prepared for `prepare` is forked from: Python's for a
    /// language whose loader is Python's, the plain one otherwise.
    fn template_for(&self, prepare: Option<&Lang>) -> Option<&Template> {
        let python = prepare
            .and_then(|lang| self.config.languages.get(lang.as_str()).ok())
            .and_then(|language| language.recipe.loader.as_ref())
            .is_some_and(|loader| loader.kind == LoaderKind::Python);
        match (python, &self.python_template) {
            (true, Some(template)) if template.alive() => Some(template),
            _ => self.template.as_ref(),
        }
    }

    /// Asks `template` for the sandbox `spec` describes (index `index`).
    async fn fork(
        &self,
        template: &Template,
        spec: &JailSpec,
        index: usize,
    ) -> Result<(Leader, UnixStream, pipe::Receiver), ProcessError> {
        let mut spec = spec.clone();
        spec.stage_dir = PathBuf::from(rootless::STAGE_DIR);
        let forked = template
            .make(&spec, index, self.config.create_timeout)
            .await?;
        let spawn = ProcessError::Spawn;
        // SAFETY: the pidfd is an OwnedFd moved into the AsyncFd, which alone holds it
        // (open, the same descriptor) until the AsyncFd is dropped.
        let pidfd = unsafe { tokio::io::unix::AsyncFd::register(forked.leader) }
            .map_err(|e| spawn(e.into()))?;
        forked.channel.set_nonblocking(true).map_err(spawn)?;
        let channel = UnixStream::from_std(forked.channel).map_err(spawn)?;
        let stderr = pipe::Receiver::from_owned_fd(forked.stderr).map_err(spawn)?;
        Ok((Leader::Forked(pidfd), channel, stderr))
    }

    async fn make_cgroup(
        &self,
        hierarchy: &Arc<Hierarchy>,
        id: u64,
    ) -> Result<Cgroup, ProcessError> {
        let (hierarchy, limits) = (hierarchy.clone(), self.config.limits);
        let name = format!("sb{id}");
        Ok(
            tokio::task::spawn_blocking(move || hierarchy.create(&name, &limits))
                .await
                .map_err(ProcessError::CgroupTask)??,
        )
    }

    /// Kills every process in this runner's sandbox cgroups (without cgroups, each
    /// sandbox ends when it is destroyed).
    pub fn kill_all(&self) {
        if let Some(hierarchy) = &self.hierarchy {
            hierarchy.kill_all();
        }
    }

    /// Removes this runner's cgroup folders and inline-dependency mounts (every sandbox
    /// must be destroyed first).
    pub fn shutdown(&self) {
        if let Some(deps) = &self.deps {
            deps.remove();
        }
        if let Some(Err(e)) = self.hierarchy.as_ref().map(|h| h.remove_instance()) {
            tracing::warn!(error = %e, "cgroup folders left behind");
        }
    }
}

/// `<state dir>/root`, where each jail mounts its stage in a mount namespace of its own.
fn make_stage_dir(config: &ProcessConfig) -> Result<PathBuf, ProcessError> {
    let stage_dir = config.state_dir.join("root");
    if stage_dir.to_string_lossy().contains([',', ':', '\\']) {
        return Err(ProcessError::StatePath(config.state_dir.clone()));
    }
    std::fs::create_dir_all(&stage_dir).map_err(|source| ProcessError::StateDir {
        path: stage_dir.clone(),
        source,
    })?;
    Ok(stage_dir)
}

/// This runner's place in the host's cgroup trees (as root, at their roots; as an
/// ordinary user, below the subtree delegated to it), with what dead runners left
/// removed.
fn open_hierarchy(config: &ProcessConfig, root: bool) -> Result<Hierarchy, ProcessError> {
    let instance = cgroup::instance_name();
    let hierarchy = if root {
        Hierarchy::open(&config.cgroup_mount, &instance)?
    } else {
        Hierarchy::open_delegated(&config.cgroup_mount, &instance)?
    };
    let removed = hierarchy.remove_stale()?;
    if removed > 0 {
        tracing::warn!(
            removed,
            "removed sandboxes left behind by a runner that died"
        );
    }
    tracing::info!(version = ?hierarchy.version(), "cgroups ready");
    Ok(hierarchy)
}

/// Says loudly that the sandboxes have no memory and CPU limits.
fn warn_no_limits() {
    tracing::warn!(
        "UNSAFE: --unsafe-no-resource-limits: sandboxes have no memory and no CPU limit \
         (their processes are still capped); a program can take all of this host's memory \
         and CPU, and no cgroup freezer holds a session between its calls (its agent stops \
         its processes with SIGSTOP, which a program can leave)"
    );
}

/// Whether sandboxes' user namespaces can be created by their own host identity (so
/// that the kernel charges what happens inside to it, never to host root). Some kernels
/// refuse (a sysctl, or an LSM such as Ubuntu's AppArmor restriction): root then makes
/// them, the per-sandbox host ids still keep per-user counts apart, and the objects
/// counted against a namespace's owner are refused inside.
fn unprivileged_owner(first_id: u32) -> bool {
    match owner::unprivileged_userns(first_id) {
        Ok(()) => {
            tracing::info!("sandboxes' user namespaces are created by their own host identity");
            true
        }
        Err(reason) => {
            tracing::warn!(
                %reason,
                "this kernel refuses unprivileged user namespaces: sandboxes' namespaces \
                 are created by root (their per-user kernel counts are still separate, and \
                 the objects counted against a namespace's owner are refused inside)"
            );
            false
        }
    }
}

/// The templates that start (a warning says why one does not: its sandboxes are then made
/// by the other, or by jails): the plain one, and Python's where the host has its
/// library. They run as the second and third host ids of sandbox index 0's range, which
/// no sandbox uses.
fn start_templates(
    config: &ProcessConfig,
    sandboxes: usize,
) -> (Option<Template>, Option<Template>) {
    let layout = IdLayout::root(config.id_base);
    let plain = start_template(config, &layout, sandboxes, 1, None);
    let python = config
        .languages
        .get("python")
        .ok()
        .and_then(|_| PythonSpec::of(Path::new("/usr/bin/python3")))
        .map(|spec| PythonSpec {
            warm_imports: config.warm_imports.clone(),
            ..spec
        });
    let python = python.and_then(|spec| start_template(config, &layout, sandboxes, 2, Some(spec)));
    (plain, python)
}

/// A template, if it starts (a warning says why not), as host id `id_base + offset`,
/// holding `python`'s interpreter if given.
fn start_template(
    config: &ProcessConfig,
    layout: &IdLayout,
    sandboxes: usize,
    offset: u32,
    python: Option<PythonSpec>,
) -> Option<Template> {
    let kind = if python.is_some() { "python" } else { "plain" };
    let devices = config.state_dir.join(format!("devices-{kind}"));
    if let Err(e) = std::fs::create_dir_all(&devices) {
        tracing::warn!(error = %e, "no template: making {}", devices.display());
        return None;
    }
    // Twice the pool (an index is held past its sandbox while a process may survive),
    // within what one id map can hold (two lines per sandbox).
    let slots = (sandboxes * 2).min(TEMPLATE_SLOTS_MAX);
    let ids: Vec<HostIds> = (0..slots).map(|i| layout.ids_of(i).0).collect();
    let packages = config.packages.as_deref();
    match Template::start(config.id_base + offset, &devices, &ids, packages, python) {
        Ok(template) => {
            tracing::info!(template = kind, "sandboxes are forked from a template");
            Some(template)
        }
        Err(e) => {
            tracing::warn!(template = kind, error = %e, "no template: its sandboxes are made otherwise");
            None
        }
    }
}

/// Starts the jail: this binary with the jail argument, the channel on descriptor 3.
async fn start(spec: &JailSpec) -> Result<(Leader, UnixStream, pipe::Receiver), ProcessError> {
    let spec_json = serde_json::to_string(spec).map_err(ProcessError::Spec)?;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(ProcessError::Spawn)?;
    let theirs = OwnedFd::from(theirs);
    let theirs_raw = theirs.as_raw_fd();
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg(sandbox_jail::JAIL_ARG)
        .arg(spec_json)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe calls; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || sandbox_jail::channel_to_fd3(theirs_raw));
    }
    let mut child = cmd.spawn().map_err(ProcessError::Spawn)?;
    drop(theirs);
    let stderr = child.stderr.take().ok_or(ProcessError::NoStderr)?;
    let stderr = stderr.into_owned_fd().map_err(ProcessError::Spawn)?;
    let stderr = pipe::Receiver::from_owned_fd(stderr).map_err(ProcessError::Spawn)?;
    ours.set_nonblocking(true).map_err(ProcessError::Spawn)?;
    let channel = UnixStream::from_std(ours).map_err(ProcessError::Spawn)?;
    Ok((Leader::Jail(child), channel, stderr))
}

/// One warm sandbox: its jail process, its cgroup and the channel to its agent.
pub struct ProcessSandbox {
    id: u64,
    cgroup: Option<Cgroup>,
    /// Its cgroup's freezer, which holds a session between its calls (none without
    /// cgroups: the agent then stops the session's processes with SIGSTOP).
    freezer: Option<Freezer>,
    /// Given back once the cgroup is gone, with every process in it.
    identity: Option<Identity>,
    identities: Arc<Identities>,
    leader: Leader,
    channel: UnixStream,
    stderr: Option<pipe::Receiver>,
    /// The cgroup's OOM kills before the current job.
    oom_kills: u64,
    /// Where its inline dependencies are mounted (none: it can have none).
    deps: Option<Arc<DepsMounts>>,
}

impl ProcessSandbox {
    async fn await_ready(
        &mut self,
        prepare: Option<&Language>,
        warm_imports: &[String],
    ) -> Result<(), ProcessError> {
        let setup = ProcessError::NotReady;
        channel::expect_ready(&mut self.channel)
            .await
            .map_err(setup)?;
        if let Some(language) = prepare {
            channel::prepare(&mut self.channel, language, warm_imports)
                .await
                .map_err(setup)?;
        }
        Ok(())
    }

    /// Mounts the inline-dependency set `key` (the host folder `source`) read-only in
    /// this sandbox, and returns the folder it shows at inside.
    pub async fn add_deps(&mut self, key: &str, source: &Path) -> Result<String, ProcessError> {
        let deps = self.deps.clone().ok_or(ProcessError::NoDeps)?;
        let (id, key, source) = (self.id, key.to_owned(), source.to_owned());
        tokio::task::spawn_blocking(move || deps.mount(id, &key, &source))
            .await
            .map_err(ProcessError::DepsTask)?
            .map_err(ProcessError::from)
    }

    /// Turns a setup failure into the jail's own words where it left some, and
    /// destroys what was made.
    async fn fail(mut self, e: ProcessError) -> ProcessError {
        self.leader.start_kill();
        self.leader.wait().await;
        let mut said = String::new();
        if let Some(stderr) = self.stderr.take() {
            let _ = stderr.take(JAIL_STDERR_CAP).read_to_string(&mut said).await;
        }
        self.destroy().await;
        let said = said.trim();
        if said.is_empty() {
            e
        } else {
            ProcessError::Jail(said.to_owned())
        }
    }

    /// Logs what the agent writes to standard error (it should write nothing).
    fn log_stderr(&mut self) {
        let Some(mut stderr) = self.stderr.take() else {
            return;
        };
        let id = self.id;
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = (&mut stderr)
                .take(JAIL_STDERR_CAP)
                .read_to_end(&mut buf)
                .await;
            if !buf.is_empty() {
                tracing::warn!(sandbox = id, said = %String::from_utf8_lossy(&buf), "agent stderr");
            }
            // Keep draining, so that the agent can never block on a full pipe.
            let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
        });
    }

    /// Sends the job and waits for the result. A one-shot sandbox is spent after it
    /// ([`destroy`](Self::destroy) must follow); a session's takes the next.
    pub async fn run(&mut self, mut job: Job) -> Result<RunOutcome, ProcessError> {
        job.sigstop_between_runs = job.session && self.freezer.is_none();
        // A language whose toolchain needs more memory: the limit grows before the job
        // (and stays so for a session's later runs: it is never lowered under a
        // program's feet).
        if let (Some(mb), Some(cgroup)) = (job.recipe.memory_mb, &self.cgroup) {
            cgroup.raise_memory(mb * 1024 * 1024)?;
        }
        let result = channel::run_job(&mut self.channel, &job, REPORT_GRACE).await;
        // The cgroup's count covers the sandbox's life; a session's sandbox runs more
        // than one job.
        let kills = self.cgroup.as_ref().and_then(|c| c.oom_kills().ok());
        let oom_killed = kills.is_some_and(|n| n > self.oom_kills);
        self.oom_kills = kills.unwrap_or(self.oom_kills);
        Ok(RunOutcome {
            job: result?,
            oom_killed,
        })
    }

    /// Does a session's file operation.
    pub async fn file(&mut self, request: FileRequest) -> Result<AgentMessage, ProcessError> {
        Ok(channel::file(&mut self.channel, request).await?)
    }

    /// Kills every process of the sandbox, removes its cgroup and gives its host
    /// identity back (kept from reuse if a process may have survived). Without a
    /// cgroup, the sandbox ends from the inside: the agent, PID 1 of its namespace, exits
    /// when its channel closes (the kernel then kills every process of the namespace)
    /// and the jail reaps it and exits; the jail is killed only if that takes too long
    /// (the agent then dies of its parent-death signal). The ids are given back once no
    /// process has them.
    pub async fn destroy(mut self) {
        let cgroup = self.cgroup.take();
        let had_cgroup = cgroup.is_some();
        if !had_cgroup {
            let _ = nix::sys::socket::shutdown(
                self.channel.as_raw_fd(),
                nix::sys::socket::Shutdown::Both,
            );
            let _ = tokio::time::timeout(SELF_END_GRACE, self.leader.wait()).await;
        }
        self.leader.start_kill();
        let mut gone = remove_cgroup(cgroup).await;
        self.leader.wait().await;
        if let Some(deps) = self.deps.take() {
            deps.release(self.id);
        }
        if let Some(identity) = self.identity.take() {
            if !had_cgroup {
                let ids = identity.ids;
                gone = tokio::task::spawn_blocking(move || no_process_left(ids))
                    .await
                    .unwrap_or(false);
            }
            if gone {
                self.identities.give_back(identity);
            } else {
                tracing::error!(sandbox = self.id, ids = ?identity.ids, "host ids kept from reuse");
            }
        }
    }
}

/// Waits (up to 5 s) until no process runs as either of `ids`; false if one still does.
fn no_process_left(ids: HostIds) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if !any_process_of(ids) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether a live process of the host (zombies hold nothing but their number) has
/// `ids.root` or `ids.user` as its real uid.
fn any_process_of(ids: HostIds) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let zombie = status.lines().any(|l| l.starts_with("State:\tZ"));
        !zombie
            && status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|uids| uids.split_whitespace().next()?.parse::<u32>().ok())
                .is_some_and(|uid| uid == ids.root || uid == ids.user)
    })
}

/// Kills the cgroup's processes and removes it; false if it is left behind (true when
/// there is none).
async fn remove_cgroup(cgroup: Option<Cgroup>) -> bool {
    let Some(cgroup) = cgroup else {
        return true;
    };
    match tokio::task::spawn_blocking(move || cgroup.kill_and_remove()).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "sandbox cgroup left behind");
            false
        }
        Err(e) => {
            tracing::error!(error = %e, "cgroup removal task failed");
            false
        }
    }
}
