//! A real sandbox without the runner: this crate's `sandbox-agent` executed as the jail
//! (as the runner executes its own binary), with a socketpair as the agent's channel,
//! and the test playing the runner on it: it sends a job, reads the agent's frames,
//! and answers each tool call the program makes (or holds it).

use sandbox_jail::{HostIds, JailSpec, JAIL_ARG};
use sandbox_protocol::agent::{
    decode_bytes, AgentMessage, Job, JobOutcome, Prepare, RunnerMessage,
};
use sandbox_protocol::frame;
use sandbox_protocol::language::{Loader, LoaderKind, Recipe};
use sandbox_protocol::process::Stream;
use sandbox_protocol::tools::{ToolAnswer, ToolCall, ToolReply, ToolsOffer};
use sandbox_protocol::Lang;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where the runner keeps its package set (the README's test command builds one):
/// TypeScript's compiler comes from it.
const PACKAGES: &str = "/var/lib/sandbox-runner/packages/current";

/// The longest the test waits for any one frame of the agent's.
const FRAME_WAIT: Duration = Duration::from_secs(60);

/// How the test, as the runner, answers a program's call: `None` holds it.
pub type Answering<'a> = &'a mut dyn FnMut(&ToolCall) -> Option<ToolAnswer>;

/// A jailed agent and its channel.
pub struct Sandbox {
    jail: Child,
    channel: UnixStream,
    _stage: tempfile::TempDir,
}

/// What a job's exchange brought: its outcome, the output frames and the calls.
#[derive(Debug)]
pub struct Ran {
    pub outcome: JobOutcome,
    pub live_stdout: String,
    pub calls: Vec<ToolCall>,
    /// How long from the job's frame to its answer.
    pub took: Duration,
}

impl Sandbox {
    /// A new sandbox, its agent Ready.
    pub fn start() -> Sandbox {
        assert!(
            nix::unistd::geteuid().is_root(),
            "these tests make real sandboxes and must run as root (the README's test command does)"
        );
        let stage = tempfile::tempdir().expect("a stage folder");
        let spec = spec(stage.path());
        let (ours, theirs) = UnixStream::pair().expect("a socketpair");
        let theirs = OwnedFd::from(theirs);
        let raw = theirs.as_raw_fd();
        let mut command = Command::new(env!("CARGO_BIN_EXE_sandbox-agent"));
        command
            .arg(JAIL_ARG)
            .arg(serde_json::to_string(&spec).expect("the spec"))
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe calls (dup2, fcntl); it allocates nothing.
        unsafe {
            command.pre_exec(move || sandbox_jail::channel_to_fd3(raw));
        }
        let jail = command.spawn().expect("the jail starts");
        drop(theirs);
        ours.set_read_timeout(Some(FRAME_WAIT)).expect("a timeout");
        let mut sandbox = Sandbox {
            jail,
            channel: ours,
            _stage: stage,
        };
        assert_eq!(sandbox.read(), AgentMessage::Ready, "the agent is ready");
        sandbox
    }

    /// Starts `lang`'s loader ahead of the job.
    pub fn prepare(&mut self, lang: &str) {
        let prepare = RunnerMessage::Prepare(Prepare {
            prepare: Lang::new(lang).expect("a language"),
            recipe: recipe(lang),
            warm_imports: Vec::new(),
            rehearse: false,
        });
        frame::write(&mut self.channel, &prepare).expect("Prepare sent");
        assert_eq!(self.read(), AgentMessage::Ready, "the {lang} loader waits");
    }

    /// Runs `job`, answering its program's calls with `answering`.
    pub fn run(&mut self, job: Job, answering: Answering<'_>) -> Ran {
        let started = Instant::now();
        frame::write(&mut self.channel, &RunnerMessage::Job(job)).expect("the job sent");
        let mut live_stdout = Vec::new();
        let mut calls = Vec::new();
        loop {
            match self.read() {
                AgentMessage::Output { stream, data } => {
                    if stream == Stream::Stdout {
                        live_stdout.extend(decode_bytes(&data).expect("base64"));
                    }
                }
                AgentMessage::ToolCall(call) => {
                    calls.push(call.clone());
                    if let Some(answer) = answering(&call) {
                        self.reply(&call.id, answer);
                    }
                }
                AgentMessage::Done(outcome) => {
                    return Ran {
                        outcome,
                        live_stdout: String::from_utf8_lossy(&live_stdout).into_owned(),
                        calls,
                        took: started.elapsed(),
                    }
                }
                other => panic!("the agent answered {other:?}"),
            }
        }
    }

    /// Sends the answer to the call `id`.
    pub fn reply(&mut self, id: &str, answer: ToolAnswer) {
        let reply = RunnerMessage::ToolReply(ToolReply {
            tool_result: id.into(),
            answer,
        });
        frame::write(&mut self.channel, &reply).expect("the reply sent");
    }

    fn read(&mut self) -> AgentMessage {
        frame::read(&mut self.channel)
            .expect("a frame within the wait")
            .expect("the agent's channel open")
    }
}

impl Drop for Sandbox {
    /// The runner lets go: the agent exits, and the jail with it.
    fn drop(&mut self) {
        let _ = self.channel.shutdown(std::net::Shutdown::Both);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.jail.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.jail.kill();
        let _ = self.jail.wait();
    }
}

/// Host ids of their own for each sandbox of this test binary: far above the runner's
/// and the rootless battery's ranges, and apart per process.
fn host_ids() -> HostIds {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let root = 3_700_000_000 + (std::process::id() % 100_000) * 512 + n * 2;
    HostIds {
        root,
        user: root + 1,
    }
}

fn spec(stage: &Path) -> JailSpec {
    let ids = host_ids();
    let packages = std::fs::canonicalize(PACKAGES).ok();
    JailSpec {
        cgroup_procs: Vec::new(),
        stage_dir: stage.to_owned(),
        ids,
        gids: ids,
        unprivileged_owner: true,
        rootless: None,
        nproc: Some(512),
        tmp_bytes: 64 << 20,
        home_bytes: 64 << 20,
        nofile: 1024,
        fsize_bytes: 128 << 20,
        packages,
        deps: None,
        devices: None,
        memlock_bytes: None,
        sigpending: None,
        shared: Vec::new(),
    }
}

/// The built-in row of `lang` (crates/runner/src/languages/builtin.toml), as the agent
/// gets it.
pub fn recipe(lang: &str) -> Recipe {
    let strings = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let loader = |kind, command: &[&str]| {
        Some(Loader {
            kind,
            command: strings(command),
        })
    };
    let (file, run, loader, compile_timeout_ms) = match lang {
        "python" => (
            "main.py",
            strings(&["python3", "{file}"]),
            loader(LoaderKind::Python, &["python3", "-c", "{loader}"]),
            0,
        ),
        "node" => (
            "main.js",
            strings(&["node", "--experimental-detect-module", "{file}"]),
            loader(
                LoaderKind::Node,
                &["node", "--experimental-detect-module", "-e", "{loader}"],
            ),
            0,
        ),
        "typescript" => (
            "main.ts",
            Vec::new(),
            loader(
                LoaderKind::Typescript,
                &["node", "-e", "{loader}", "typescript"],
            ),
            20_000,
        ),
        other => panic!("no recipe for {other}"),
    };
    Recipe {
        file: file.into(),
        compile: Vec::new(),
        run,
        env: Default::default(),
        compile_timeout_ms,
        loader,
        memory_mb: None,
    }
}

/// A streamed job of `lang` running `code`, offered `tools`.
pub fn job(lang: &str, code: &str, tools: Option<ToolsOffer>) -> Job {
    Job {
        lang: Lang::new(lang).expect("a language"),
        recipe: recipe(lang),
        code: code.into(),
        timeout_ms: 20_000,
        stdout_cap: 1 << 20,
        stderr_cap: 1 << 20,
        session: false,
        sigstop_between_runs: false,
        outputs: None,
        python_paths: Vec::new(),
        stream: true,
        tools,
    }
}

/// Whether the package set (and TypeScript's compiler in it) is there.
pub fn typescript_available() -> bool {
    PathBuf::from(PACKAGES)
        .join("node/node_modules/typescript/package.json")
        .exists()
}
