//! Starting a program's processes from its language's [`Recipe`]: the compile command,
//! the run command (cold), or the language's loader started ahead of time (`loader/`),
//! which waits for a request on descriptor 3, then runs the program as the cold start
//! would, or, in a session, as its resident interpreter (`resident.rs`). A Python
//! loader of a sandbox forked from Python's template is the keeper become one
//! (`keeper.rs`), instead of an executed `python3`.

use super::child::{give, harden};
use super::environment::environment;
use super::identity::{as_program_user, program_user};
use super::loader::{
    BASH_SESSION, JVM_LOADER, LUA_LOADER, NODE_LOADER, PERL_LOADER, PYTHON_LOADER, RUBY_LOADER,
};
use super::process::Process;
use sandbox_protocol::language::{LoaderKind, Recipe, BUILD, FILE, LOADER_FILE, LOADER_SOURCE};
use sandbox_protocol::Lang;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The descriptor a loader reads its requests from.
const GO_FD: i32 = 3;
/// The descriptor a loader reports on: a session's program's end, a compile's result.
const DONE_FD: i32 = 4;
/// Where a loader given as a file is written (as the program user), and its name.
const LOADER_DIR: &str = "/tmp/.sandbox-loader";
const JVM_LOADER_FILE: &str = "SandboxLoader.java";
/// The run's build folder, which [`BUILD`] stands for: made empty before a compile.
const BUILD_DIR: &str = "/tmp/.build";

/// A language's loader started ahead of its job, waiting for a request.
pub struct Prepared {
    lang: Lang,
    kind: LoaderKind,
    child: Process,
    go: File,
    done: OwnedFd,
}

/// A loader given its one-shot program: the process, and the pipe it reports on.
pub(crate) struct Started {
    pub(crate) child: Process,
    /// Where a compiling loader says whether the program compiled (`None`: it does not
    /// compile).
    pub(crate) report: Option<OwnedFd>,
}

impl Prepared {
    /// The language it runs.
    pub fn lang(&self) -> &Lang {
        &self.lang
    }

    /// Lets the waiting loader run the program at `path` as a one-shot job, with
    /// `python_paths` ahead of the package set on its import path; a `streamed` job's
    /// (a Python loader then writes its standard output line by line).
    pub(crate) fn start(
        mut self,
        path: &Path,
        python_paths: &[String],
        streamed: bool,
    ) -> io::Result<Started> {
        let mut request = serde_json::json!({ "path": path, "paths": python_paths });
        if streamed {
            request["stream"] = true.into();
        }
        let line = request.to_string() + "\n";
        self.go.write_all(line.as_bytes())?;
        drop(self.go); // end of file: the loader stops reading
        Ok(Started {
            child: self.child,
            report: self.kind.compiles().then_some(self.done),
        })
    }

    /// Ends the waiting loader (the job is in another language).
    pub(crate) fn discard(self) {
        drop(self.go); // the loader reads no request and exits
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its parts, for a session to keep it: language, process, request and report pipes.
    pub(crate) fn into_parts(self) -> (Lang, Process, File, OwnedFd) {
        (self.lang, self.child, self.go, self.done)
    }
}

/// `args` with the placeholders filled: the program's file, the build folder, and the
/// loader (its source text, or the file it was written to).
fn fill(args: &[String], file: &Path, loader: Option<(&str, &str)>) -> Vec<String> {
    let file = file.to_string_lossy();
    args.iter()
        .map(|arg| {
            let mut arg = arg.replace(FILE, &file).replace(BUILD, BUILD_DIR);
            if let Some((source, path)) = loader {
                arg = arg
                    .replace(LOADER_SOURCE, source)
                    .replace(LOADER_FILE, path);
            }
            arg
        })
        .collect()
}

/// Starts the run command of `recipe` on `file`, with `python_paths` ahead of the
/// package set on Python's import path; a session's bash (`session`) in the working
/// directory and with the exported variables of its previous run; a `streamed` job's
/// Python with its standard output unbuffered.
pub(crate) fn cold(
    lang: &Lang,
    recipe: &Recipe,
    file: &Path,
    session: bool,
    python_paths: &[String],
    streamed: bool,
) -> io::Result<Process> {
    let mut args = fill(&recipe.run, file, None);
    if session && *lang == Lang::BASH && args.len() == 2 {
        args.splice(
            1..1,
            ["-c".to_owned(), BASH_SESSION.to_owned(), "bash".to_owned()],
        );
    }
    let mut cmd = command_of(&args, recipe, python_paths)?;
    if streamed {
        cmd.env("PYTHONUNBUFFERED", "1");
    }
    spawn(cmd)
}

/// Starts the compile command of `recipe` on `file`, in a build folder made empty.
pub(crate) fn compile(recipe: &Recipe, file: &Path) -> io::Result<Process> {
    as_program_user(|| {
        let build = Path::new(BUILD_DIR);
        match std::fs::symlink_metadata(build) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(build)?,
            Ok(_) => std::fs::remove_file(build)?,
            Err(_) => {}
        }
        std::fs::create_dir(build)
    })??;
    spawn(command_of(&fill(&recipe.compile, file, None), recipe, &[])?)
}

/// The command `args` with the recipe's environment ([`command`]).
fn command_of(args: &[String], recipe: &Recipe, python_paths: &[String]) -> io::Result<Command> {
    let (program, rest) = args
        .split_first()
        .ok_or_else(|| io::Error::other("the language's command is empty"))?;
    let mut cmd = command(program, recipe, python_paths);
    cmd.args(rest);
    Ok(cmd)
}

/// Starts `cmd` as the program user.
fn spawn(mut cmd: Command) -> io::Result<Process> {
    let user = program_user();
    // SAFETY: between fork and exec the child only runs `harden`, which is
    // async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(move || harden(user));
    }
    cmd.spawn().map(Process::from)
}

/// Starts the loader of `recipe`, if the language has one; a Python one imports
/// `warm_imports` while it waits.
pub fn prepare(
    lang: &Lang,
    recipe: &Recipe,
    warm_imports: &[String],
) -> io::Result<Option<Prepared>> {
    let Some(loader) = &recipe.loader else {
        return Ok(None);
    };
    let source = match loader.kind {
        LoaderKind::Python => PYTHON_LOADER,
        LoaderKind::Node | LoaderKind::Typescript => NODE_LOADER,
        LoaderKind::Java | LoaderKind::Clojure | LoaderKind::Groovy | LoaderKind::Kotlin => {
            JVM_LOADER
        }
        LoaderKind::Ruby => RUBY_LOADER,
        LoaderKind::Lua => LUA_LOADER,
        LoaderKind::Perl => PERL_LOADER,
    };
    let loader_file = Path::new(LOADER_DIR).join(JVM_LOADER_FILE);
    if loader.command.iter().any(|arg| arg.contains(LOADER_FILE)) {
        as_program_user(|| {
            std::fs::create_dir_all(LOADER_DIR)?;
            std::fs::write(&loader_file, source)
        })??;
    }
    let path = loader_file.to_string_lossy();
    let args = fill(&loader.command, Path::new(""), Some((source, &path)));
    let (program, rest) = args
        .split_first()
        .ok_or_else(|| io::Error::other("the loader's command is empty"))?;
    // Made with the program user's file-system ids, the pipes are that user's: a loader
    // that can only reopen them by path (a JVM, through /proc/self/fd) may.
    let pipes = as_program_user(|| -> nix::Result<_> {
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        Ok((nix::unistd::pipe2(cloexec)?, nix::unistd::pipe2(cloexec)?))
    })?;
    let ((go_read, go_write), (done_read, done_write)) = pipes?;
    if let Some(keeper) = super::keeper::take_for(recipe) {
        let child = keeper.start_loader(recipe, warm_imports, (go_read, done_write))?;
        return Ok(Some(Prepared {
            lang: lang.clone(),
            kind: loader.kind,
            child,
            go: File::from(go_write),
            done: done_read,
        }));
    }
    let mut cmd = command(program, recipe, &[]);
    cmd.args(rest);
    if loader.kind == LoaderKind::Python && !warm_imports.is_empty() {
        cmd.arg(warm_imports.join(","));
    }
    let (go_raw, done_raw) = (go_read.as_raw_fd(), done_write.as_raw_fd());
    let user = program_user();
    // SAFETY: between fork and exec the child makes only async-signal-safe calls, and
    // allocates nothing: `give` hands the loader its two pipe ends as descriptors 3 and
    // 4 (without close-on-exec), then `harden` (see there).
    unsafe {
        cmd.pre_exec(move || {
            give(&[(go_raw, GO_FD), (done_raw, DONE_FD)])?;
            harden(user)
        });
    }
    let child = Process::from(cmd.spawn()?);
    drop::<OwnedFd>(go_read);
    drop::<OwnedFd>(done_write);
    Ok(Some(Prepared {
        lang: lang.clone(),
        kind: loader.kind,
        child,
        go: File::from(go_write),
        done: done_read,
    }))
}

/// A command of the language, with the program's environment: the recipe's variables,
/// the package set's Python folder (after `python_paths`) on `PYTHONPATH`, and
/// matplotlib's backend that turns figures into images in `outputs/` where the set has
/// it.
fn command(program: &str, recipe: &Recipe, python_paths: &[String]) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .envs(environment(&recipe.env, python_paths))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    cmd
}
