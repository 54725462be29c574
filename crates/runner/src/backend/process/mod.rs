//! The process backend: each sandbox is a process tree in fresh Linux namespaces, in a
//! cgroup of its own, under a seccomp filter (see [`jail`] for the steps and
//! docs/security.md for what each one stops).
//!
//! This module makes sandboxes ([`ProcessBackend`]); `sandbox.rs` is one sandbox's life,
//! `launch.rs` how its first process starts (a jail or a template's fork), `error.rs` what
//! can fail.

pub mod agent_binary;
pub mod deps;
mod error;
mod freeze;
pub mod identity;
mod launch;
pub mod leader;
mod proxy_link;
pub mod rootless;
mod sandbox;
pub mod template;

pub use error::ProcessError;
pub use proxy_link::ProxyLink;
pub use sandbox::ProcessSandbox;

use super::cgroup::{self, Cgroup, CgroupLimits, Hierarchy};
use crate::languages::Languages;
use agent_binary::AgentBinary;
use deps::DepsMounts;
use identity::{IdLayout, Identities, Identity};
use launch::Launched;
use rootless::{RootlessError, RootlessSetup};
use sandbox::Reservation;
pub use sandbox::REPORT_GRACE;
use sandbox_agent::template::PythonSpec;
use sandbox_egress::Egress;
use sandbox_jail::{owner, HostIds, JailSpec};
use sandbox_protocol::language::LoaderKind;
use sandbox_protocol::Lang;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use template::Template;

/// The most sandbox indices a template serves: its id maps hold two lines per index,
/// and the kernel at most 340 lines.
const TEMPLATE_SLOTS_MAX: usize = 160;

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
    /// The binary a template's sandboxes execute as their agent ([`AgentBinary`]).
    pub agent: AgentBinary,
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
    /// The templates holding Python's interpreter, for sandboxes prepared for Python
    /// (whose programs are forked from them).
    python: PythonTemplates,
    /// The runner's proxy, where the operator opened hosts: each sandbox gets a way to
    /// it ([`ProxyLink`]).
    egress: Option<Arc<Egress>>,
}

impl ProcessBackend {
    /// Checks what the backend needs for `sandboxes` at once (root or what stands in for
    /// it, cgroups unless the operator opted out), cleans up after dead runners, and
    /// makes the state folder. With `egress`, each sandbox gets a way to that proxy (a
    /// root runner only: refused otherwise).
    pub fn new(
        config: ProcessConfig,
        sandboxes: usize,
        egress: Option<Arc<Egress>>,
    ) -> Result<Self, ProcessError> {
        let root = nix::unistd::geteuid().is_root();
        if egress.is_some() && !root {
            return Err(ProcessError::EgressRootless);
        }
        // Checked whether or not templates start: a binary the operator named that
        // cannot serve is a mistake to report, not to carry.
        let agent = agent_binary::resolve(&config.agent).map_err(ProcessError::AgentBinary)?;
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
        let (template, python) = match privilege {
            Privilege::Root {
                unprivileged_owner: true,
            } if config.templates => start_templates(&config, sandboxes, agent.as_deref()),
            _ => (None, PythonTemplates::default()),
        };
        Ok(ProcessBackend {
            identities: Arc::new(Identities::new(layout)),
            template,
            python,
            config,
            hierarchy,
            stage_dir,
            next_id: AtomicU64::new(1),
            privilege,
            deps,
            egress,
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
        let mut reservation = Reservation::new(id, self.identities.clone(), self.deps.clone());
        let launched = match self
            .launch(&mut reservation, prepare.as_ref(), warm, by_template)
            .await
        {
            Ok(launched) => launched,
            Err(e) => {
                reservation.release().await;
                return Err(e);
            }
        };
        let language = prepare.and_then(|l| self.config.languages.get(l.as_str()).ok());
        let warm_imports = if warm {
            &self.config.warm_imports[..]
        } else {
            &[]
        };
        let sandbox = reservation.into_sandbox(launched);
        let sandbox = sandbox
            .ready(language, warm_imports, self.config.create_timeout)
            .await?;
        match &self.egress {
            Some(egress) => sandbox.link_proxy(egress).await,
            None => Ok(sandbox),
        }
    }

    /// Takes what the sandbox needs into `reservation` (a cgroup, a host identity, a
    /// folder for its inline dependencies) and starts its first process: a fork of the
    /// template for `prepare` (and `warm`) if `by_template` and it serves the identity's
    /// index, a jail otherwise. A template that fails is left for good (logged).
    async fn launch(
        &self,
        reservation: &mut Reservation,
        prepare: Option<&Lang>,
        warm: bool,
        by_template: bool,
    ) -> Result<Launched, ProcessError> {
        if let Some(hierarchy) = &self.hierarchy {
            reservation.cgroup = Some(self.make_cgroup(hierarchy, reservation.id).await?);
        }
        let identity = &*reservation.identity.insert(self.identities.take()?);
        reservation.deps_dir = self
            .deps
            .as_ref()
            .map(|d| d.sandbox_dir(reservation.id))
            .transpose()?;
        let spec = self.jail_spec(
            reservation.cgroup.as_ref(),
            identity,
            reservation.deps_dir.clone(),
        );
        let template = self
            .template_for(prepare, warm)
            .filter(|t| by_template && t.serves(identity.index()));
        let Some(template) = template else {
            return launch::jail(&spec).await;
        };
        let forked = launch::fork(
            template,
            &spec,
            identity.index(),
            self.config.create_timeout,
        )
        .await;
        if let Err(ProcessError::Template(e)) = &forked {
            template.leave(e);
        }
        forked
    }

    /// What the jail (or the template) is told of the sandbox with `cgroup`, `identity`
    /// and the inline dependencies' folder `deps`.
    fn jail_spec(
        &self,
        cgroup: Option<&Cgroup>,
        identity: &Identity,
        deps: Option<PathBuf>,
    ) -> JailSpec {
        JailSpec {
            cgroup_procs: cgroup.map(Cgroup::procs_files).unwrap_or_default(),
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
            deps,
            devices: None,
            memlock_bytes: None,
            sigpending: None,
            shared: self.config.languages.shared_paths().to_vec(),
        }
    }

    /// The template a sandbox prepared for `prepare` is forked from: for a language
    /// whose loader is Python's, the Python template with the data stack if `warm`, the
    /// lean one otherwise (either if the other has gone); the plain one otherwise.
    fn template_for(&self, prepare: Option<&Lang>, warm: bool) -> Option<&Template> {
        let python = prepare
            .and_then(|lang| self.config.languages.get(lang.as_str()).ok())
            .and_then(|language| language.recipe.loader.as_ref())
            .is_some_and(|loader| loader.kind == LoaderKind::Python);
        if !python {
            return self.template.as_ref();
        }
        let (first, second) = match warm {
            true => (&self.python.data, &self.python.lean),
            false => (&self.python.lean, &self.python.data),
        };
        [first, second]
            .into_iter()
            .flatten()
            .find(|t| t.alive())
            .or(self.template.as_ref())
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

/// The templates holding Python's interpreter: a sandbox forked from a process that
/// big copies, and tears down, its page tables, which only a Python program makes up
/// for; and one with the warm imports (~100 MiB with the default ones) costs a fresh
/// sandbox several times what a lean one (~20 MiB) does, which only a program that
/// uses them makes up for.
#[derive(Default)]
struct PythonTemplates {
    /// The interpreter with the loader's imports only.
    lean: Option<Template>,
    /// The interpreter with the warm imports too (none without warm imports).
    data: Option<Template>,
}

/// The templates that start (a warning says why one does not: its sandboxes are then made
/// by another, or by jails): the plain one, and Python's two where the host has its
/// library (the one with the data stack only with warm imports). They run as the
/// second, third and fifth host ids of sandbox index 0's range (the fourth is the
/// resolver's), which no sandbox uses.
fn start_templates(
    config: &ProcessConfig,
    sandboxes: usize,
    agent: Option<&Path>,
) -> (Option<Template>, PythonTemplates) {
    if let Some(path) = agent {
        tracing::info!(agent = %path.display(), "forked sandboxes execute this agent binary");
    }
    let layout = IdLayout::root(config.id_base);
    let start = |offset, python| start_template(config, &layout, sandboxes, offset, python, agent);
    let plain = start(1, None);
    let Some(spec) = config
        .languages
        .get("python")
        .ok()
        .and_then(|_| PythonSpec::of(Path::new("/usr/bin/python3")))
    else {
        return (plain, PythonTemplates::default());
    };
    let data = (!config.warm_imports.is_empty()).then(|| PythonSpec {
        warm_imports: config.warm_imports.clone(),
        ..spec.clone()
    });
    let python = PythonTemplates {
        lean: start(2, Some(spec)),
        data: data.and_then(|spec| start(4, Some(spec))),
    };
    (plain, python)
}

/// A template, if it starts (a warning says why not), as host id `id_base + offset`,
/// holding `python`'s interpreter if given, its sandboxes executing `agent` (none: the
/// runner's binary).
fn start_template(
    config: &ProcessConfig,
    layout: &IdLayout,
    sandboxes: usize,
    offset: u32,
    python: Option<PythonSpec>,
    agent: Option<&Path>,
) -> Option<Template> {
    let kind = match &python {
        None => "plain",
        Some(spec) if spec.warm_imports.is_empty() => "python",
        Some(_) => "python-data",
    };
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
    let shared = config.languages.shared_paths();
    let id = config.id_base + offset;
    match Template::start(id, &devices, &ids, packages, shared, python, agent) {
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
