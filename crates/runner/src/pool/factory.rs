//! What the pool needs of a backend, as a trait: the real backends implement it, and the
//! pool's unit tests use a fake one, without root or real sandboxes.

use crate::backend::{
    ArchiveRefusal, ArchiveSummary, Backend, BackendError, DepsMount, RunOutcome, Sandbox,
};
use crate::live::LiveOutput;
use sandbox_protocol::agent::{AgentMessage, FileRequest, Job};
use sandbox_protocol::process::ProcessRequest;
use sandbox_protocol::Lang;
use std::future::Future;
use std::path::Path;

/// Makes the sandboxes of a pool, and releases what they hold on the host.
///
/// The pool holds it in an `Arc` and uses it from spawned tasks: it is shared between
/// threads and its futures are `Send`.
pub trait SandboxFactory: Send + Sync + 'static {
    /// A sandbox it makes.
    type Sandbox: PooledSandbox<Error = Self::Error>;
    /// Why a sandbox could not be made or could not run its job.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Makes a sandbox and waits until it is ready for its job, with the interpreter of
    /// `prepare` started ahead when one is given (with `warm`, a Python one holds the
    /// warm imports, the data stack, or imports them while it waits; without, it is
    /// lean).
    fn create(
        &self,
        prepare: Option<Lang>,
        warm: bool,
    ) -> impl Future<Output = Result<Self::Sandbox, Self::Error>> + Send;

    /// A sandbox restored from what [`PooledSandbox::save`] wrote in `dir` (which it
    /// must not change: a fork restores the same folder several times, at once), with
    /// fresh entropy and the host's time, ready for its next job as the saved one was
    /// (a session's: frozen as a VM's init keeps it between calls). Bounded in time
    /// like a boot.
    fn restore(
        &self,
        dir: &Path,
    ) -> impl Future<Output = Result<Self::Sandbox, Self::Error>> + Send;

    /// Kills every process of every sandbox it made (their runs end at once).
    fn kill_all(&self);

    /// Releases what it holds on the host, once every sandbox is destroyed.
    fn shutdown(&self);
}

/// A sandbox of a pool: it runs one job, then is destroyed.
pub trait PooledSandbox: Send + 'static {
    /// Why the job could not be run.
    type Error;

    /// Its grant and counters at the runner's proxy (none: no host is open to it).
    fn egress(&self) -> Option<&sandbox_egress::SandboxEgress> {
        None
    }

    /// Runs the job, its output sent to `live` as it comes where the sandbox can stream
    /// it. The sandbox is spent whatever happened (and also when this future is dropped
    /// before it completes): [`destroy`](Self::destroy) must follow.
    fn run(
        &mut self,
        job: Job,
        live: Option<LiveOutput>,
    ) -> impl Future<Output = Result<RunOutcome, Self::Error>> + Send;

    /// Mounts a set of inline dependencies read-only in the sandbox; the folder it
    /// shows at inside.
    fn add_deps(
        &mut self,
        deps: &DepsMount,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send;

    /// Runs the job (its output to `live`), with `deps` mounted first and put on its
    /// import path.
    fn run_with(
        &mut self,
        mut job: Job,
        deps: Option<&DepsMount>,
        live: Option<LiveOutput>,
    ) -> impl Future<Output = Result<RunOutcome, Self::Error>> + Send {
        async move {
            if let Some(deps) = deps {
                let inside = self.add_deps(deps).await?;
                job.python_paths.push(format!("{inside}/python"));
            }
            self.run(job, live).await
        }
    }

    /// Does a session's file operation (see [`FileRequest`]).
    fn file(
        &mut self,
        request: FileRequest,
    ) -> impl Future<Output = Result<AgentMessage, Self::Error>> + Send;

    /// Writes the session's files (home folder and /tmp) as a session archive to the
    /// file `to` (created 0600, truncated), at most `max_bytes` of archive: beyond it,
    /// TooLarge (the rest of the agent's chunks are drained, the file is left for the
    /// caller to delete). The sandbox must be thawed (see
    /// [`session_pack`](Self::session_pack)). The outer error means the sandbox failed
    /// (the caller ends the session); the inner refusal leaves it as it was.
    fn pack(
        &mut self,
        to: &Path,
        max_bytes: u64,
    ) -> impl Future<Output = Result<Result<ArchiveSummary, ArchiveRefusal>, Self::Error>> + Send;

    /// Restores a session archive (a file the runner wrote, already checked) into the
    /// sandbox's home folder and /tmp. The sandbox must be thawed (see
    /// [`session_unpack`](Self::session_unpack)); errors as for [`pack`](Self::pack).
    fn unpack(
        &mut self,
        from: &Path,
    ) -> impl Future<Output = Result<Result<ArchiveSummary, ArchiveRefusal>, Self::Error>> + Send;

    /// Does a session's process operation (see [`ProcessRequest`]).
    fn process(
        &mut self,
        request: ProcessRequest,
    ) -> impl Future<Output = Result<AgentMessage, Self::Error>> + Send;

    /// Freezes every process of the sandbox (a session between its calls): none runs,
    /// whatever signal it gets, until [`thaw`](Self::thaw). Returns once all are frozen.
    fn freeze(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Lets the processes [`freeze`](Self::freeze) froze run again.
    fn thaw(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// A session's run: [`run_with`](Self::run_with), the sandbox thawed for it and
    /// frozen again before the answer is handed on, unless processes of the session run
    /// ([`JobOutcome::processes_running`](sandbox_protocol::agent::JobOutcome)).
    fn session_run(
        &mut self,
        job: Job,
        deps: Option<&DepsMount>,
        live: Option<LiveOutput>,
    ) -> impl Future<Output = Result<RunOutcome, Self::Error>> + Send {
        async move {
            self.thaw().await?;
            let outcome = self.run_with(job, deps, live).await?;
            if outcome.job.processes_running == 0 {
                self.freeze().await?;
            }
            Ok(outcome)
        }
    }

    /// A session's file operation: [`file`](Self::file), the sandbox thawed for it (its
    /// agent does it) and frozen again before the answer is handed on, unless
    /// `processes_run` (processes of the session run: it stays awake for them).
    fn session_file(
        &mut self,
        request: FileRequest,
        processes_run: bool,
    ) -> impl Future<Output = Result<AgentMessage, Self::Error>> + Send {
        async move {
            self.thaw().await?;
            let answer = self.file(request).await?;
            if !processes_run {
                self.freeze().await?;
            }
            Ok(answer)
        }
    }

    /// [`pack`](Self::pack) with the sandbox thawed for it and frozen again after,
    /// unless `processes_run` (as [`session_file`](Self::session_file) does).
    fn session_pack(
        &mut self,
        to: &Path,
        max_bytes: u64,
        processes_run: bool,
    ) -> impl Future<Output = Result<Result<ArchiveSummary, ArchiveRefusal>, Self::Error>> + Send
    {
        async move {
            self.thaw().await?;
            let packed = self.pack(to, max_bytes).await?;
            if !processes_run {
                self.freeze().await?;
            }
            Ok(packed)
        }
    }

    /// [`unpack`](Self::unpack) with the sandbox thawed for it and frozen again after,
    /// unless `processes_run` (as [`session_file`](Self::session_file) does).
    fn session_unpack(
        &mut self,
        from: &Path,
        processes_run: bool,
    ) -> impl Future<Output = Result<Result<ArchiveSummary, ArchiveRefusal>, Self::Error>> + Send
    {
        async move {
            self.thaw().await?;
            let unpacked = self.unpack(from).await?;
            if !processes_run {
                self.freeze().await?;
            }
            Ok(unpacked)
        }
    }

    /// A session's process operation: [`process`](Self::process), the sandbox thawed for
    /// it and frozen again before the answer is handed on if no process of the session
    /// runs then.
    fn session_process(
        &mut self,
        request: ProcessRequest,
    ) -> impl Future<Output = Result<AgentMessage, Self::Error>> + Send {
        async move {
            self.thaw().await?;
            let answer = self.process(request).await?;
            if matches!(answer, AgentMessage::Process { running: 0, .. }) {
                self.freeze().await?;
            }
            Ok(answer)
        }
    }

    /// Saves the whole sandbox into the folder `dir` (made by the caller, empty, 0700):
    /// memory and devices where the backend can (a VM: its VMM's snapshot), for
    /// [`SandboxFactory::restore`]; the bytes written, or None where it cannot (a
    /// process sandbox: the caller keeps its files with
    /// [`session_pack`](Self::session_pack) instead). The sandbox is spent after a Some
    /// (destroy must follow); after None it is as it was. After an error, a QEMU VM
    /// runs on as it was (its save undone, `dir` left empty) and a Firecracker one is
    /// spent.
    fn save(&mut self, dir: &Path)
        -> impl Future<Output = Result<Option<u64>, Self::Error>> + Send;

    /// Kills every process of the sandbox and releases what it holds on the host.
    fn destroy(self) -> impl Future<Output = ()> + Send;
}

impl SandboxFactory for Backend {
    type Sandbox = Sandbox;
    type Error = BackendError;

    fn create(
        &self,
        prepare: Option<Lang>,
        warm: bool,
    ) -> impl Future<Output = Result<Sandbox, BackendError>> + Send {
        Backend::create(self, prepare, warm)
    }

    fn restore(&self, dir: &Path) -> impl Future<Output = Result<Sandbox, BackendError>> + Send {
        Backend::restore(self, dir)
    }

    fn kill_all(&self) {
        Backend::kill_all(self)
    }

    fn shutdown(&self) {
        Backend::shutdown(self)
    }
}

impl PooledSandbox for Sandbox {
    type Error = BackendError;

    fn egress(&self) -> Option<&sandbox_egress::SandboxEgress> {
        match self {
            Sandbox::Process(s) => s.egress(),
            Sandbox::Vm(s) => s.egress(),
        }
    }

    fn run(
        &mut self,
        job: Job,
        live: Option<LiveOutput>,
    ) -> impl Future<Output = Result<RunOutcome, BackendError>> + Send {
        Sandbox::run(self, job, live)
    }

    fn file(
        &mut self,
        request: FileRequest,
    ) -> impl Future<Output = Result<AgentMessage, BackendError>> + Send {
        Sandbox::file(self, request)
    }

    fn add_deps(
        &mut self,
        deps: &DepsMount,
    ) -> impl Future<Output = Result<String, BackendError>> + Send {
        Sandbox::add_deps(self, deps)
    }

    fn process(
        &mut self,
        request: ProcessRequest,
    ) -> impl Future<Output = Result<AgentMessage, BackendError>> + Send {
        Sandbox::process(self, request)
    }

    fn pack(
        &mut self,
        to: &Path,
        max_bytes: u64,
    ) -> impl Future<Output = Result<Result<ArchiveSummary, ArchiveRefusal>, BackendError>> + Send
    {
        Sandbox::pack(self, to, max_bytes)
    }

    fn unpack(
        &mut self,
        from: &Path,
    ) -> impl Future<Output = Result<Result<ArchiveSummary, ArchiveRefusal>, BackendError>> + Send
    {
        Sandbox::unpack(self, from)
    }

    fn freeze(&mut self) -> impl Future<Output = Result<(), BackendError>> + Send {
        Sandbox::freeze(self)
    }

    fn thaw(&mut self) -> impl Future<Output = Result<(), BackendError>> + Send {
        Sandbox::thaw(self)
    }

    fn save(
        &mut self,
        dir: &Path,
    ) -> impl Future<Output = Result<Option<u64>, BackendError>> + Send {
        Sandbox::save(self, dir)
    }

    fn destroy(self) -> impl Future<Output = ()> + Send {
        Sandbox::destroy(self)
    }
}
