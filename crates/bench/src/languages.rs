//! Languages (issue 14): a hello world in every language the runner offers, run three
//! ways in one run: (a) the direct command on the host (`bash main.sh`, `gcc ... &&
//! ./main`, `go run main.go` with a warm build cache, `java Main.java`, TypeScript
//! transpiled by the package set's compiler in a fresh node, ...), (b) `POST /run`,
//! (c) `tools/call` of `run_<name>` through sandbox-mcp.
//!
//! Every sandboxed run meets a pool prepared for its language: the warm-up round's
//! runs make the pool prepare its refills for the language (a request's replacement is
//! prepared for the request's language), and before every run the pool is at rest (full,
//! every sandbox process asleep: see [`pool_watch::at_rest`]), so the refill's loader
//! (a JVM with javac, a node with the TypeScript compiler) has started. A run that met
//! no sandbox prepared for its language is counted. The runner and sandbox-mcp are
//! fresh, started for this figure.

use crate::clients::{call_tool, timed, McpSession, RunnerApi, Via};
use crate::cpu_group::CpuGroup;
use crate::measure::SETTLE;
use crate::pool_watch::{self, Runner};
use crate::services::{Binaries, Service};
use crate::stats::{self, Latency};
use anyhow::{bail, ensure, Context};
use rmcp::service::Peer;
use rmcp::RoleClient;
use sandbox_protocol::language::LanguageInfo;
use sandbox_protocol::Lang;
use serde::Serialize;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// What every hello world prints.
pub const EXPECTED: &str = "hello world\n";
/// Stands for the bench's folder in a direct command's environment.
const ROOT: &str = "{root}";
/// The package set's npm packages, where the direct TypeScript command finds the
/// compiler (the runner's default store: the bench starts it with a clean environment).
const NODE_MODULES: &str = "/var/lib/sandbox-runner/packages/current/node/node_modules";
/// The direct TypeScript command's program: what `ts-node --transpile-only` does, and
/// what the runner's TypeScript loader does, in a fresh node. Types are stripped by the
/// set's compiler (`transpileModule`, the loader's options, no type check), then the
/// JavaScript runs as node runs a CommonJS main module.
const TRANSPILE_JS: &str = r#"const fs = require('fs');
const path = require('path');
const Module = require('module');
const ts = require('typescript');
const file = path.resolve(process.argv[2]);
const { outputText } = ts.transpileModule(fs.readFileSync(file, 'utf8'), {
  fileName: file,
  compilerOptions: {
    module: ts.ModuleKind.CommonJS,
    target: ts.ScriptTarget.ES2022,
    esModuleInterop: true,
  },
});
const main = new Module(file, null);
main.filename = file;
main.paths = Module._nodeModulePaths(path.dirname(file));
process.argv[1] = file;
main._compile(outputText, file);
"#;
/// The longest one run may take on any path (a compile included).
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the pool may take to come to rest; past it the run goes ahead and is
/// counted in [`LanguageRow::not_at_rest`] (smoke mode must not fail on timing).
const REST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long sandbox-mcp may take to list a run tool for every language measured (it
/// reads the runner's table at start and every 10 s).
const TOOLS_TIMEOUT: Duration = Duration::from_secs(30);

/// One language's hello world and its direct command.
#[derive(Debug, Clone, Copy)]
pub struct Hello {
    /// The language's name in the runner's table.
    pub name: &'static str,
    /// The program's file name (the runner's, in its home folder; the bench's, in the
    /// language's folder).
    pub file: &'static str,
    /// The program.
    pub code: &'static str,
    /// The direct command's steps, run one after the other in the language's folder:
    /// each must succeed, the last prints [`EXPECTED`].
    pub direct: &'static [&'static [&'static str]],
    /// Variables added to the direct command's clean environment ([`ROOT`] stands for
    /// the bench's folder).
    pub env: &'static [(&'static str, &'static str)],
}

/// The languages the runner has built in, in its table's order.
pub const HELLOS: [Hello; 8] = [
    Hello {
        name: "bash",
        file: "main.sh",
        code: "echo \"hello world\"\n",
        direct: &[&["bash", "main.sh"]],
        env: &[],
    },
    Hello {
        name: "python",
        file: "main.py",
        code: "print(\"hello world\")\n",
        direct: &[&["python3", "main.py"]],
        env: &[],
    },
    Hello {
        name: "node",
        file: "main.js",
        code: "console.log(\"hello world\");\n",
        direct: &[&["node", "main.js"]],
        env: &[],
    },
    Hello {
        name: "typescript",
        file: "main.ts",
        code: "const greeting: string = \"hello world\";\nconsole.log(greeting);\n",
        direct: &[&["node", "transpile.js", "main.ts"]],
        env: &[("NODE_PATH", NODE_MODULES)],
    },
    Hello {
        name: "c",
        file: "main.c",
        code: "#include <stdio.h>\n\nint main(void) {\n    puts(\"hello world\");\n    return 0;\n}\n",
        direct: &[
            &["gcc", "-O2", "-std=gnu17", "-Wall", "-o", "main", "main.c", "-lm"],
            &["./main"],
        ],
        env: &[],
    },
    Hello {
        name: "cpp",
        file: "main.cpp",
        code: "#include <iostream>\n\nint main() {\n    std::cout << \"hello world\\n\";\n    return 0;\n}\n",
        direct: &[
            &["g++", "-O2", "-std=gnu++17", "-Wall", "-o", "main", "main.cpp"],
            &["./main"],
        ],
        env: &[],
    },
    Hello {
        name: "go",
        file: "main.go",
        code: "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello world\")\n}\n",
        direct: &[&["go", "run", "main.go"]],
        env: &[
            ("GOCACHE", "{root}/go-build"),
            ("GOPATH", "{root}/go"),
            ("GOPROXY", "off"),
            ("GOFLAGS", "-buildvcs=false"),
            ("GOTELEMETRY", "off"),
        ],
    },
    Hello {
        name: "java",
        file: "Main.java",
        code: "public class Main {\n    public static void main(String[] args) {\n        System.out.println(\"hello world\");\n    }\n}\n",
        direct: &[&["java", "Main.java"]],
        env: &[],
    },
];

impl Hello {
    /// The direct command as a command line (`gcc ... main.c -lm && ./main`).
    pub fn direct_line(&self) -> String {
        let steps: Vec<String> = self.direct.iter().map(|step| step.join(" ")).collect();
        steps.join(" && ")
    }

    /// The MCP tool that runs it.
    fn tool(&self) -> String {
        format!("run_{}", self.name)
    }
}

/// How many runs the figure takes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Measured runs per language and path.
    pub rounds: usize,
    /// Unmeasured rounds first (at least one: it prepares the pool for the language
    /// and fills the direct command's caches).
    pub warmup: usize,
    /// Sandboxes of the runner.
    pub pool_size: usize,
}

/// Everything the figure measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LanguageFigures {
    /// Measured runs per language and path.
    pub rounds: usize,
    /// Unmeasured rounds before them.
    pub warmup: usize,
    /// Sandboxes of the runner.
    pub pool_size: usize,
    /// One row per language measured, in the runner's order.
    pub rows: Vec<LanguageRow>,
    /// Languages the bench has a hello world for that the runner does not offer.
    pub not_offered: Vec<&'static str>,
    /// Languages the runner offers that the bench has no hello world for.
    pub unknown: Vec<String>,
}

/// One language's figures.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LanguageRow {
    /// The language.
    pub name: &'static str,
    /// The toolchain's version, as the runner reports it.
    pub version: String,
    /// (a), as a command line.
    pub direct: String,
    /// How the runner compiles and runs it (its `/health`).
    pub sandboxed: String,
    /// Whether the runner starts its runtime ahead (a loader).
    pub warm: bool,
    /// (a), (b) and (c), in [`Via::ALL`] order.
    pub paths: Vec<(Via, Latency)>,
    /// Measured runs that went ahead on a pool not at rest within [`REST_TIMEOUT`].
    pub not_at_rest: usize,
    /// Measured sandboxed runs before which the pool held no sandbox prepared for the
    /// language (its loader running, or none for a language without one).
    pub unprepared: usize,
}

/// What the runs need.
struct Paths<'a> {
    runner: Runner<'a>,
    mcp: Peer<RoleClient>,
    direct: &'a Direct,
}

/// Starts a runner and sandbox-mcp in front of it, measures every language both the
/// runner and the bench know, and stops both whatever happened.
pub async fn measure(
    bins: &Binaries,
    token: &str,
    sizes: &Sizes,
) -> anyhow::Result<LanguageFigures> {
    let direct = Direct::new()?;
    let measured = with_runner(bins, token, &direct, sizes).await;
    let removed = direct.remove();
    let measured = measured?;
    removed?;
    Ok(measured)
}

async fn with_runner(
    bins: &Binaries,
    token: &str,
    direct: &Direct,
    sizes: &Sizes,
) -> anyhow::Result<LanguageFigures> {
    let runner = Service::runner(&bins.runner, token, sizes.pool_size).await?;
    let measured = with_mcp(bins, token, &runner, direct, sizes).await;
    let stopped = runner.stop().await.context("stopping sandbox-runner");
    let measured = measured?;
    stopped?;
    Ok(measured)
}

async fn with_mcp(
    bins: &Binaries,
    token: &str,
    runner: &Service,
    direct: &Direct,
    sizes: &Sizes,
) -> anyhow::Result<LanguageFigures> {
    let mcp_token = crate::token()?;
    let mcp = Service::mcp(&bins.mcp, &mcp_token, &runner.url, token).await?;
    let measured = async {
        let api = RunnerApi::new(&runner.url, token)?;
        let offered = api
            .health()
            .await?
            .languages
            .context("the runner's /health lists no languages")?;
        let mut figures = pair_up(&offered, sizes);
        let session = McpSession::connect(&mcp.url, &mcp_token).await?;
        let paths = Paths {
            runner: Runner {
                api: &api,
                pid: runner.pid,
            },
            mcp: session.peer(),
            direct,
        };
        let measured = measure_offered(&paths, &offered, sizes, &mut figures).await;
        let closed = session.close().await;
        measured?;
        closed?;
        anyhow::Ok(figures)
    }
    .await;
    let stopped = mcp.stop().await.context("stopping sandbox-mcp");
    let measured = measured?;
    stopped?;
    Ok(measured)
}

/// The figures' frame: which languages are measured, which are left out and why.
fn pair_up(offered: &[LanguageInfo], sizes: &Sizes) -> LanguageFigures {
    let offers = |name: &str| offered.iter().any(|l| l.name.as_str() == name);
    let knows = |name: &str| HELLOS.iter().any(|h| h.name == name);
    LanguageFigures {
        rounds: sizes.rounds,
        warmup: sizes.warmup,
        pool_size: sizes.pool_size,
        rows: Vec::new(),
        not_offered: HELLOS
            .iter()
            .map(|h| h.name)
            .filter(|name| !offers(name))
            .collect(),
        unknown: offered
            .iter()
            .map(|l| l.name.as_str())
            .filter(|name| !knows(name))
            .map(str::to_owned)
            .collect(),
    }
}

/// Each language both know, in the runner's order, in the bench's CPU group.
async fn measure_offered(
    paths: &Paths<'_>,
    offered: &[LanguageInfo],
    sizes: &Sizes,
    figures: &mut LanguageFigures,
) -> anyhow::Result<()> {
    let measured: Vec<(Hello, &LanguageInfo)> = offered
        .iter()
        .filter_map(|info| {
            let hello = HELLOS.iter().find(|h| h.name == info.name.as_str())?;
            Some((*hello, info))
        })
        .collect();
    let tools: Vec<String> = measured.iter().map(|(hello, _)| hello.tool()).collect();
    wait_for_tools(&paths.mcp, &tools).await?;
    let group = CpuGroup::join()?;
    let mut rows = Vec::new();
    for (hello, info) in measured {
        match measure_language(paths, hello, info, sizes).await {
            Ok(row) => rows.push(row),
            Err(e) => {
                let _ = group.leave();
                return Err(e);
            }
        }
    }
    figures.rows = rows;
    group.leave()
}

/// Waits until sandbox-mcp lists every tool of `tools`.
async fn wait_for_tools(mcp: &Peer<RoleClient>, tools: &[String]) -> anyhow::Result<()> {
    let deadline = Instant::now() + TOOLS_TIMEOUT;
    loop {
        let listed = mcp.list_all_tools().await.context("tools/list")?;
        let missing: Vec<&String> = tools
            .iter()
            .filter(|tool| !listed.iter().any(|t| t.name == tool.as_str()))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("sandbox-mcp does not list {missing:?} after {TOOLS_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `warmup + rounds` rounds of (a), (b), (c), each run on a pool at rest.
async fn measure_language(
    paths: &Paths<'_>,
    hello: Hello,
    info: &LanguageInfo,
    sizes: &Sizes,
) -> anyhow::Result<LanguageRow> {
    eprintln!(
        "bench: languages, {}: {} rounds (after {} warm-up)",
        hello.name, sizes.rounds, sizes.warmup
    );
    let lang = Lang::new(hello.name).with_context(|| format!("language {}", hello.name))?;
    let prepared = info.warm.then_some(hello.name);
    let mut samples = vec![Vec::with_capacity(sizes.rounds); Via::ALL.len()];
    let (mut not_at_rest, mut unprepared) = (0, 0);
    for round in 0..sizes.warmup + sizes.rounds {
        let counted = round >= sizes.warmup;
        for (via, series) in Via::ALL.iter().zip(samples.iter_mut()) {
            let (_, rested) = pool_watch::at_rest(&[&paths.runner], REST_TIMEOUT).await?;
            if counted && *via != Via::Direct {
                let found = pool_watch::preparations(paths.runner.pid)?;
                unprepared += usize::from(!found.contains(&prepared));
            }
            not_at_rest += usize::from(counted && !rested);
            tokio::time::sleep(SETTLE).await;
            let took = run(paths, *via, &hello, &lang)
                .await
                .with_context(|| format!("{} of the {} hello world", via.label(), hello.name))?;
            if counted {
                series.push(took);
            }
        }
    }
    Ok(LanguageRow {
        name: hello.name,
        version: info.version.clone(),
        direct: hello.direct_line(),
        sandboxed: sandboxed_line(info),
        warm: info.warm,
        paths: summarize(&samples)?,
        not_at_rest,
        unprepared,
    })
}

fn summarize(samples: &[Vec<Duration>]) -> anyhow::Result<Vec<(Via, Latency)>> {
    Via::ALL
        .iter()
        .zip(samples)
        .map(|(via, series)| {
            stats::latency(series)
                .map(|l| (*via, l))
                .context("no run was measured")
        })
        .collect()
}

/// How the runner compiles and runs a language, as its `/health` says.
fn sandboxed_line(info: &LanguageInfo) -> String {
    match &info.compile {
        Some(compile) => format!("{compile} && {}", info.run),
        None => info.run.clone(),
    }
}

/// Runs the hello world once on `via`, checks its output, and returns how long it took.
async fn run(paths: &Paths<'_>, via: Via, hello: &Hello, lang: &Lang) -> anyhow::Result<Duration> {
    match via {
        Via::Direct => within(paths.direct.run(hello)).await,
        Via::Run => within(post_run(paths.runner.api, lang, hello.code)).await,
        Via::ToolsCall => within(tools_call(&paths.mcp, &hello.tool(), hello.code)).await,
    }
}

/// How long `run` takes to succeed, within [`RUN_TIMEOUT`].
async fn within(run: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<Duration> {
    tokio::time::timeout(RUN_TIMEOUT, timed(run))
        .await
        .with_context(|| format!("the run took over {RUN_TIMEOUT:?}"))?
}

/// (b): `POST /run`; it must have compiled, printed [`EXPECTED`] and exited 0.
async fn post_run(api: &RunnerApi, lang: &Lang, code: &str) -> anyhow::Result<()> {
    let answer = api.run_code(lang, code).await?;
    ensure!(
        answer.stdout == EXPECTED && answer.exit_code == 0 && !answer.compile_error,
        "unexpected answer {answer:?}"
    );
    Ok(())
}

/// (c): `tools/call run_<name>`; the same checks on `structuredContent`.
async fn tools_call(mcp: &Peer<RoleClient>, tool: &str, code: &str) -> anyhow::Result<()> {
    let result = call_tool(mcp, tool, code).await?;
    let structured = result
        .structured_content
        .as_ref()
        .context("the result has no structuredContent")?;
    ensure!(
        result.is_error != Some(true)
            && structured["stdout"] == EXPECTED
            && structured["exitCode"] == 0
            && structured["compileError"] != true,
        "unexpected result {structured}"
    );
    Ok(())
}

/// The direct commands' folders: a home, a folder per language holding its program
/// (and the TypeScript command's `transpile.js`), and Go's build cache, kept across
/// runs (warm, as on a developer's machine, once the warm-up round has filled it).
struct Direct {
    root: PathBuf,
}

impl Direct {
    fn new() -> anyhow::Result<Direct> {
        let root = std::env::temp_dir().join(format!("bench-languages-{}", std::process::id()));
        let direct = Direct { root };
        direct.write_programs()?;
        Ok(direct)
    }

    fn write_programs(&self) -> anyhow::Result<()> {
        create_dir(&self.root.join("home"))?;
        for hello in &HELLOS {
            let dir = self.root.join(hello.name);
            create_dir(&dir)?;
            write(&dir.join(hello.file), hello.code)?;
        }
        write(&self.root.join("typescript/transpile.js"), TRANSPILE_JS)
    }

    /// (a): the steps in the language's folder, with the agent's clean environment, the
    /// bench's home and the language's variables; the last must print [`EXPECTED`].
    async fn run(&self, hello: &Hello) -> anyhow::Result<()> {
        let dir = self.root.join(hello.name);
        let last = hello.direct.len().saturating_sub(1);
        for (i, step) in hello.direct.iter().enumerate() {
            let output = self.step(hello, &dir, step).await?;
            let stdout = String::from_utf8_lossy(&output.stdout);
            ensure!(
                output.status.success(),
                "{} exited with {}; stdout: {stdout}; stderr: {}",
                step.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            ensure!(i < last || stdout == EXPECTED, "printed {stdout:?}");
        }
        Ok(())
    }

    async fn step(
        &self,
        hello: &Hello,
        dir: &Path,
        step: &[&str],
    ) -> anyhow::Result<std::process::Output> {
        let (program, args) = step.split_first().context("an empty direct step")?;
        // `./main` is the folder's: spawned by its full path.
        let program = match program.strip_prefix("./") {
            Some(local) => dir.join(local),
            None => PathBuf::from(program),
        };
        let root = self.root.to_string_lossy();
        Command::new(&program)
            .args(args)
            .current_dir(dir)
            .env_clear()
            .envs(crate::cases::Case::clean_env())
            .env("HOME", self.root.join("home"))
            .envs(hello.env.iter().map(|(k, v)| (k, v.replace(ROOT, &root))))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| format!("spawning {}", program.display()))
    }

    fn remove(&self) -> anyhow::Result<()> {
        std::fs::remove_dir_all(&self.root)
            .with_context(|| format!("removing {}", self.root.display()))
    }
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &'static str, compile: Option<&str>, run: &str) -> LanguageInfo {
        LanguageInfo {
            name: Lang::new(name).unwrap(),
            version: "1".into(),
            file: "main".into(),
            compile: compile.map(str::to_owned),
            run: run.into(),
            compile_timeout_ms: 0,
            warm: false,
            keeps_state: false,
            memory_mb: None,
        }
    }

    #[test]
    fn every_hello_has_a_direct_command_and_a_distinct_name() {
        for (i, hello) in HELLOS.iter().enumerate() {
            assert!(!hello.direct.is_empty() && hello.direct.iter().all(|s| !s.is_empty()));
            assert!(hello.direct_line().contains(hello.file), "{hello:?}");
            assert!(HELLOS[..i].iter().all(|h| h.name != hello.name));
        }
        let c = HELLOS.iter().find(|h| h.name == "c").unwrap();
        assert_eq!(
            c.direct_line(),
            "gcc -O2 -std=gnu17 -Wall -o main main.c -lm && ./main"
        );
    }

    #[test]
    fn languages_are_paired_with_what_the_runner_offers() {
        let offered = [
            info("bash", None, "bash main.sh"),
            info("perl", None, "perl main.pl"),
            info("c", Some("gcc main.c"), "/tmp/.build/main"),
        ];
        let sizes = Sizes {
            rounds: 2,
            warmup: 1,
            pool_size: 8,
        };
        let figures = pair_up(&offered, &sizes);
        assert_eq!(figures.unknown, ["perl"]);
        assert_eq!(
            figures.not_offered,
            ["python", "node", "typescript", "cpp", "go", "java"]
        );
        assert_eq!(
            sandboxed_line(&offered[2]),
            "gcc main.c && /tmp/.build/main"
        );
    }
}
