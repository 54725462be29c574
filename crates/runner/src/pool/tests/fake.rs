//! A fake backend: it makes no sandbox, it keeps a log of what the pool asked of it, and
//! it can be told to fail, or to take its time.

use crate::backend::{ArchiveRefusal, ArchiveSummary, RunOutcome};
use crate::live::{Chunk, LiveOutput};
use crate::pool::{PooledSandbox, SandboxFactory};
use sandbox_protocol::agent::{Job, JobOutcome};
use sandbox_protocol::process::Stream;
use sandbox_protocol::Lang;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Why the fake failed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FakeError {
    /// Told to fail a creation.
    #[error("fake: the creation failed")]
    Create,
    /// Told to fail a run.
    #[error("fake: the run failed")]
    Run,
    /// `kill_all` ended the run.
    #[error("fake: the run was killed")]
    Killed,
    /// A restore of a folder the fake did not save into.
    #[error("fake: nothing saved there to restore")]
    Restore,
}

/// What the fake is told to do, and what it saw.
#[derive(Debug, Default)]
pub struct Log {
    /// The next this many creations fail.
    pub fail_creations: usize,
    /// How long a creation takes.
    pub create_time: Duration,
    /// How long a run takes.
    pub run_time: Duration,
    /// Runs fail (after `run_time`).
    pub fail_runs: bool,
    /// Sandboxes are saved whole (as VMs are), rather than not at all (as processes).
    pub saves_whole: bool,

    /// The preparation of every creation asked for, failed or not.
    pub attempts: Vec<Option<Lang>>,
    /// The preparation of each sandbox made; its index is the sandbox's id.
    pub made: Vec<Option<Lang>>,
    /// Whether each sandbox made was asked for the data stack (`warm`), by id.
    pub data: Vec<bool>,
    /// Runs started: the sandbox's id and the job's language.
    pub runs: Vec<(usize, Lang)>,
    /// Runs that went to their end (neither stopped nor killed).
    pub finished: Vec<usize>,
    /// Sandboxes destroyed, and when.
    pub destroyed: Vec<(usize, Instant)>,
    /// Sandboxes dropped without being destroyed.
    pub leaked: Vec<usize>,
    /// Sandboxes whose files were packed, in order.
    pub packed: Vec<usize>,
    /// Sandboxes an archive was unpacked into, in order.
    pub unpacked: Vec<usize>,
    /// Sandboxes saved whole, in order.
    pub saved: Vec<usize>,
    /// Sandboxes restored: the saved one's id and the new one's.
    pub restored: Vec<(usize, usize)>,
    /// Calls to `kill_all`.
    pub kills: usize,
    /// Calls to `shutdown`, each with how many sandboxes were destroyed by then.
    pub shutdowns: Vec<(Instant, usize)>,
}

impl Log {
    /// When the sandbox `id` was destroyed.
    pub fn destroyed_at(&self, id: usize) -> Instant {
        match self.destroyed.iter().find(|(d, _)| *d == id) {
            Some((_, at)) => *at,
            None => panic!("sandbox {id} was not destroyed: {self:?}"),
        }
    }
}

/// The fake backend; clones share their log.
#[derive(Clone)]
pub struct Fake {
    log: Arc<Mutex<Log>>,
    killed: Arc<watch::Sender<bool>>,
}

impl Fake {
    /// A fake that makes sandboxes at once, whose runs end at once.
    pub fn new() -> Self {
        Fake {
            log: Arc::default(),
            killed: Arc::new(watch::channel(false).0),
        }
    }

    /// Its log, to read or to tell it what to do.
    pub fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().expect("the fake's log is not poisoned")
    }

    /// Checks that every sandbox made was destroyed exactly once, none was dropped, and the
    /// backend was shut down once, after the last destruction.
    pub fn assert_all_destroyed_once(&self) {
        let log = self.log();
        let mut destroyed: Vec<usize> = log.destroyed.iter().map(|(id, _)| *id).collect();
        destroyed.sort_unstable();
        let made: Vec<usize> = (0..log.made.len()).collect();
        assert_eq!(
            destroyed, made,
            "each sandbox made is destroyed once: {log:?}"
        );
        assert!(log.leaked.is_empty(), "sandboxes dropped: {log:?}");
        assert_eq!(log.shutdowns.len(), 1, "one backend shutdown: {log:?}");
        assert_eq!(
            log.shutdowns[0].1,
            made.len(),
            "shutdown comes last: {log:?}"
        );
    }
}

/// A sandbox of the fake backend.
pub struct FakeSandbox {
    /// Its index in [`Log::made`].
    pub id: usize,
    fake: Fake,
    destroyed: bool,
}

impl SandboxFactory for Fake {
    type Sandbox = FakeSandbox;
    type Error = FakeError;

    async fn create(&self, prepare: Option<Lang>, warm: bool) -> Result<FakeSandbox, FakeError> {
        let time = {
            let mut log = self.log();
            log.attempts.push(prepare.clone());
            log.create_time
        };
        if !time.is_zero() {
            tokio::time::sleep(time).await;
        }
        let mut log = self.log();
        if log.fail_creations > 0 {
            log.fail_creations -= 1;
            return Err(FakeError::Create);
        }
        log.made.push(prepare);
        log.data.push(warm);
        Ok(FakeSandbox {
            id: log.made.len() - 1,
            fake: self.clone(),
            destroyed: false,
        })
    }

    /// A new sandbox, with the id of the saved one logged beside it.
    async fn restore(&self, dir: &std::path::Path) -> Result<FakeSandbox, FakeError> {
        let text = tokio::fs::read_to_string(dir.join(SAVED_FILE)).await;
        let saved = text.ok().and_then(|t| t.trim().parse::<usize>().ok());
        let saved = saved.ok_or(FakeError::Restore)?;
        let mut log = self.log();
        log.made.push(None);
        let id = log.made.len() - 1;
        log.restored.push((saved, id));
        Ok(FakeSandbox {
            id,
            fake: self.clone(),
            destroyed: false,
        })
    }

    fn kill_all(&self) {
        self.log().kills += 1;
        self.killed.send_replace(true);
    }

    fn shutdown(&self) {
        let mut log = self.log();
        let destroyed = log.destroyed.len();
        log.shutdowns.push((Instant::now(), destroyed));
    }
}

impl PooledSandbox for FakeSandbox {
    type Error = FakeError;

    /// Its output, `sandbox {id}`, goes to `live` too, as it comes before the outcome.
    async fn run(&mut self, job: Job, live: Option<LiveOutput>) -> Result<RunOutcome, FakeError> {
        let (time, fail) = {
            let mut log = self.fake.log();
            log.runs.push((self.id, job.lang.clone()));
            (log.run_time, log.fail_runs)
        };
        let mut killed = self.fake.killed.subscribe();
        tokio::select! {
            () = tokio::time::sleep(time) => {}
            _ = killed.wait_for(|killed| *killed) => return Err(FakeError::Killed),
        }
        self.fake.log().finished.push(self.id);
        if fail {
            return Err(FakeError::Run);
        }
        let stdout = format!("sandbox {}", self.id);
        if let Some(live) = live {
            live.send(Chunk {
                stream: Stream::Stdout,
                bytes: stdout.clone().into_bytes(),
            });
        }
        Ok(RunOutcome {
            job: JobOutcome {
                stdout,
                stderr: String::new(),
                exit_code: 0,
                signal: None,
                duration_ms: time.as_millis() as u64,
                timed_out: false,
                compile_error: false,
                stdout_truncated: false,
                stderr_truncated: false,
                oom_killed: None,
                outputs: Vec::new(),
                outputs_truncated: false,
                state_lost: false,
                processes_running: 0,
            },
            oom_killed: false,
            resumed: false,
            egress: None,
        })
    }

    /// The pool never freezes; a session's sandbox does (tested for real).
    async fn freeze(&mut self) -> Result<(), FakeError> {
        Ok(())
    }

    async fn thaw(&mut self) -> Result<(), FakeError> {
        Ok(())
    }

    /// The pool never asks for files; a session's sandbox does (tested for real).
    async fn file(
        &mut self,
        _request: sandbox_protocol::agent::FileRequest,
    ) -> Result<sandbox_protocol::agent::AgentMessage, FakeError> {
        Ok(sandbox_protocol::agent::AgentMessage::Stored)
    }

    /// The pool never asks for processes; a session's sandbox does (tested for real).
    async fn process(
        &mut self,
        _request: sandbox_protocol::process::ProcessRequest,
    ) -> Result<sandbox_protocol::agent::AgentMessage, FakeError> {
        Ok(sandbox_protocol::agent::AgentMessage::Process {
            answer: sandbox_protocol::process::ProcessAnswer::Listed(Vec::new()),
            running: 0,
        })
    }

    /// Writes a real session archive holding only `home` and `tmp` (the fake holds no
    /// files).
    async fn pack(
        &mut self,
        to: &std::path::Path,
        max_bytes: u64,
    ) -> Result<Result<ArchiveSummary, ArchiveRefusal>, FakeError> {
        self.fake.log().packed.push(self.id);
        let archive = empty_archive();
        if archive.len() as u64 > max_bytes {
            return Ok(Err(ArchiveRefusal::TooLarge { limit: max_bytes }));
        }
        Ok(match tokio::fs::write(to, &archive).await {
            Ok(()) => Ok(ArchiveSummary {
                bytes: archive.len() as u64,
                entries: 2,
            }),
            Err(e) => Err(ArchiveRefusal::Io(e)),
        })
    }

    /// Reads the archive's size (the fake restores nothing).
    async fn unpack(
        &mut self,
        from: &std::path::Path,
    ) -> Result<Result<ArchiveSummary, ArchiveRefusal>, FakeError> {
        self.fake.log().unpacked.push(self.id);
        Ok(match tokio::fs::metadata(from).await {
            Ok(meta) => Ok(ArchiveSummary {
                bytes: meta.len(),
                entries: 0,
            }),
            Err(e) => Err(ArchiveRefusal::Io(e)),
        })
    }

    /// With [`Log::saves_whole`], writes its id into `dir`; the bytes written. Without,
    /// nothing (as a process sandbox).
    async fn save(&mut self, dir: &std::path::Path) -> Result<Option<u64>, FakeError> {
        if !self.fake.log().saves_whole {
            return Ok(None);
        }
        let id = self.id.to_string();
        match tokio::fs::write(dir.join(SAVED_FILE), &id).await {
            Ok(()) => {
                self.fake.log().saved.push(self.id);
                Ok(Some(id.len() as u64))
            }
            Err(_) => Err(FakeError::Run),
        }
    }

    /// The pool never mounts inline dependencies; the runner's routes do (tested for
    /// real).
    async fn add_deps(&mut self, deps: &crate::backend::DepsMount) -> Result<String, FakeError> {
        Ok(format!("/opt/deps/{}", deps.key))
    }

    async fn destroy(mut self) {
        self.destroyed = true;
        let now = Instant::now();
        self.fake.log().destroyed.push((self.id, now));
    }
}

/// What a saved fake sandbox writes into its folder: its id.
const SAVED_FILE: &str = "fake.saved";

/// A session archive of an empty session: the folders `home` and `tmp`.
fn empty_archive() -> Vec<u8> {
    let mut writer = sandbox_archive::Writer::new(Vec::new());
    for root in ["home", "tmp"] {
        let path = root.as_bytes().to_vec();
        let entry = sandbox_archive::Entry {
            path,
            kind: sandbox_archive::Kind::Dir,
            mode: 0o755,
            mtime: 0,
        };
        let mut nothing = std::io::empty();
        if writer
            .add(&entry, &mut nothing, sandbox_archive::Short::Fail)
            .is_err()
        {
            panic!("an archive in memory takes its folders");
        }
    }
    match writer.finish() {
        Ok((archive, _)) => archive,
        Err(e) => panic!("an archive in memory ends: {e}"),
    }
}

impl Drop for FakeSandbox {
    fn drop(&mut self) {
        if !self.destroyed {
            if let Ok(mut log) = self.fake.log.lock() {
                log.leaked.push(self.id);
            }
        }
    }
}
