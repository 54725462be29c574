//! A process sandbox: what it holds before its first process starts ([`Reservation`]),
//! and once it runs ([`ProcessSandbox`]): waiting for its agent, its jobs and file
//! operations, and its destruction, which gives its host ids back once no process has
//! them.

use super::deps::DepsMounts;
use super::error::ProcessError;
use super::identity::{Identities, Identity};
use super::launch::Launched;
use super::leader::Leader;
use super::proxy_link::{self, ProxyLink};
use crate::backend::archive::{ArchiveRefusal, ArchiveSummary};
use crate::backend::cgroup::{Cgroup, Freezer};
use crate::backend::channel;
use crate::backend::RunOutcome;
use crate::languages::Language;
use crate::live::LiveOutput;
use sandbox_jail::HostIds;
use sandbox_protocol::agent::{AgentMessage, FileRequest, Job};
use sandbox_protocol::process::ProcessRequest;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::net::UnixStream;

/// How long the agent may take, past the job's run time ([`Job::run_time`]), to report
/// (`GET /health` publishes it: `limits.answerMarginMs`).
pub const REPORT_GRACE: Duration = Duration::from_secs(5);
/// How long a sandbox without a cgroup may take to end by itself once its channel is
/// closed, before its jail is killed.
const SELF_END_GRACE: Duration = Duration::from_secs(2);
/// The most bytes of the jail's standard error kept for an error message.
const JAIL_STDERR_CAP: u64 = 4096;

/// What a sandbox-to-be holds before its first process starts: its number, then its
/// cgroup, its host identity and its folder for inline dependencies, as they are taken.
/// Should a step fail before the first process starts, [`release`](Self::release) gives
/// back whatever was taken, in the order [`ProcessSandbox::destroy`] does (the identity
/// only once the cgroup is gone); once it has started, [`into_sandbox`](Self::into_sandbox)
/// hands all of it to the sandbox. Released by an awaited call rather than on drop:
/// removing the cgroup waits for the kernel, and a creation retried at once (by a jail,
/// after the template failed) must find the identity given back.
pub(super) struct Reservation {
    /// The sandbox's number.
    pub id: u64,
    /// Its cgroup (none: sandboxes without cgroups, or not made yet).
    pub cgroup: Option<Cgroup>,
    /// Its host identity, once taken.
    pub identity: Option<Identity>,
    /// Its folder for inline dependencies, once made.
    pub deps_dir: Option<PathBuf>,
    identities: Arc<Identities>,
    deps: Option<Arc<DepsMounts>>,
}

impl Reservation {
    /// Nothing taken yet for sandbox `id`, whose identity comes from `identities` and
    /// whose inline dependencies are mounted by `deps`.
    pub fn new(id: u64, identities: Arc<Identities>, deps: Option<Arc<DepsMounts>>) -> Self {
        Reservation {
            id,
            cgroup: None,
            identity: None,
            deps_dir: None,
            identities,
            deps,
        }
    }

    /// Gives back what was taken: the dependencies' folder, the cgroup (its processes
    /// killed), and the identity if the cgroup is gone.
    pub async fn release(self) {
        if let (Some(deps), Some(_)) = (&self.deps, &self.deps_dir) {
            deps.release(self.id);
        }
        if remove_cgroup(self.cgroup).await {
            if let Some(identity) = self.identity {
                self.identities.give_back(identity);
            }
        }
    }

    /// The sandbox whose first process is `launched`.
    pub fn into_sandbox(self, launched: Launched) -> ProcessSandbox {
        ProcessSandbox {
            id: self.id,
            freezer: self.cgroup.as_ref().map(Cgroup::freezer),
            cgroup: self.cgroup,
            identity: self.identity,
            identities: self.identities,
            leader: launched.leader,
            channel: launched.channel,
            stderr: Some(launched.stderr),
            oom_kills: 0,
            deps: self.deps,
            proxy: None,
        }
    }
}

/// One warm sandbox: its jail process, its cgroup and the channel to its agent.
pub struct ProcessSandbox {
    id: u64,
    cgroup: Option<Cgroup>,
    /// Its cgroup's freezer, which holds a session between its calls (none without
    /// cgroups: the agent then stops the session's processes with SIGSTOP).
    pub(super) freezer: Option<Freezer>,
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
    /// Its way to the runner's proxy (none: the operator opened no host).
    proxy: Option<ProxyLink>,
}

impl ProcessSandbox {
    /// Waits, at most `timeout`, for the agent's Ready (and, with `prepare`, for its
    /// interpreter to wait for the program, having imported `warm_imports`). On failure
    /// the sandbox is destroyed, and the error is the jail's own words where it left
    /// some.
    pub(super) async fn ready(
        mut self,
        prepare: Option<&Language>,
        warm_imports: &[String],
        timeout: Duration,
    ) -> Result<Self, ProcessError> {
        let waited = tokio::time::timeout(timeout, self.await_ready(prepare, warm_imports)).await;
        match waited {
            Ok(Ok(())) => {
                self.log_stderr();
                Ok(self)
            }
            Ok(Err(e)) => Err(self.fail(e).await),
            Err(_) => Err(self.fail(ProcessError::SetupTimeout(timeout)).await),
        }
    }

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

    /// Gives the ready sandbox its way to `egress` ([`proxy_link`]); on failure the
    /// sandbox is destroyed.
    pub(super) async fn link_proxy(
        mut self,
        egress: &sandbox_egress::Egress,
    ) -> Result<Self, ProcessError> {
        match proxy_link::open(egress, &self.leader).await {
            Ok(link) => {
                self.proxy = Some(link);
                Ok(self)
            }
            Err(e) => {
                self.destroy().await;
                Err(e)
            }
        }
    }

    /// Its grant and counters at the runner's proxy (none: the operator opened no
    /// host).
    pub fn egress(&self) -> Option<&sandbox_egress::SandboxEgress> {
        self.proxy.as_ref().map(|link| &link.handle)
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

    /// Sends the job and waits for the result, the output sent to `live` as it comes. A
    /// one-shot sandbox is spent after it ([`destroy`](Self::destroy) must follow); a
    /// session's takes the next.
    pub async fn run(
        &mut self,
        mut job: Job,
        live: Option<&LiveOutput>,
    ) -> Result<RunOutcome, ProcessError> {
        job.sigstop_between_runs = job.session && self.freezer.is_none();
        // A language whose toolchain needs more memory: the limit grows before the job
        // (and stays so for a session's later runs: it is never lowered under a
        // program's feet).
        if let (Some(mb), Some(cgroup)) = (job.recipe.memory_mb, &self.cgroup) {
            cgroup.raise_memory(mb * 1024 * 1024)?;
        }
        let before = self.egress().map(|e| e.usage());
        let result = channel::run_job(&mut self.channel, &job, REPORT_GRACE, live).await;
        // The cgroup's count covers the sandbox's life; a session's sandbox runs more
        // than one job.
        let kills = self.cgroup.as_ref().and_then(|c| c.oom_kills().ok());
        let oom_killed = kills.is_some_and(|n| n > self.oom_kills);
        self.oom_kills = kills.unwrap_or(self.oom_kills);
        Ok(RunOutcome {
            job: result?,
            oom_killed,
            resumed: false,
            egress: crate::backend::run_egress(self.egress(), before),
        })
    }

    /// Does a session's file operation.
    pub async fn file(&mut self, request: FileRequest) -> Result<AgentMessage, ProcessError> {
        Ok(channel::file(&mut self.channel, request).await?)
    }

    /// Writes the session archive to the file `to`, at most `max_bytes` of it.
    pub async fn pack(
        &mut self,
        to: &Path,
        max_bytes: u64,
    ) -> Result<Result<ArchiveSummary, ArchiveRefusal>, ProcessError> {
        Ok(channel::pack_to(&mut self.channel, to, max_bytes).await?)
    }

    /// Restores the session archive in the file `from`.
    pub async fn unpack(
        &mut self,
        from: &Path,
    ) -> Result<Result<ArchiveSummary, ArchiveRefusal>, ProcessError> {
        Ok(channel::unpack_from(&mut self.channel, from).await?)
    }

    /// Does a session's process operation.
    pub async fn process(&mut self, request: ProcessRequest) -> Result<AgentMessage, ProcessError> {
        Ok(channel::process(&mut self.channel, request).await?)
    }

    /// Kills every process of the sandbox, removes its cgroup and gives its host
    /// identity back (kept from reuse if a process may have survived). Without a
    /// cgroup, the sandbox ends from the inside: the agent, PID 1 of its namespace, exits
    /// when its channel closes (the kernel then kills every process of the namespace)
    /// and the jail reaps it and exits; the jail is killed only if that takes too long
    /// (the agent then dies of its parent-death signal). The ids are given back once no
    /// process has them.
    pub async fn destroy(mut self) {
        // Its listener goes first: nothing new reaches the proxy from a dying sandbox.
        drop(self.proxy.take());
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
