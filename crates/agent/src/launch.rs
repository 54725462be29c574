//! Starting a program's processes from its language's [`Recipe`]: the compile command,
//! the run command (cold), or the language's loader started ahead of time, which waits
//! for a request on descriptor 3, then runs the program as the cold start would, or, in
//! a session, as its [`Resident`](crate::resident::Resident) interpreter.

use crate::identity::{as_program_user, become_program_user, program_user};
use crate::process::Process;
use crate::{HOME, HOME_C, PATH};
use sandbox_jail::layout::PACKAGES;
use sandbox_protocol::language::{LoaderKind, Recipe, BUILD, FILE, LOADER_FILE, LOADER_SOURCE};
use sandbox_protocol::Lang;
use std::collections::BTreeMap;
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
pub(crate) const PYTHON_LOADER: &str = include_str!("loader/python.py");
const NODE_LOADER: &str = include_str!("loader/node.js");
const JAVA_LOADER: &str = include_str!("loader/SandboxLoader.java");
const BASH_SESSION: &str = include_str!("loader/bash_session.sh");
/// Where a loader given as a file is written (as the program user), and its name.
const LOADER_DIR: &str = "/tmp/.sandbox-loader";
const JAVA_LOADER_FILE: &str = "SandboxLoader.java";
/// The run's build folder, which [`BUILD`] stands for: made empty before a compile.
pub(crate) const BUILD_DIR: &str = "/tmp/.build";
/// The matplotlib backend of the package set that saves figures into `outputs/`.
const PLOTS_MODULE_FILE: &str = "sandbox_plots.py";
const PLOTS_BACKEND: &str = "module://sandbox_plots";

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
    /// `python_paths` ahead of the package set on its import path.
    pub(crate) fn start(mut self, path: &Path, python_paths: &[String]) -> io::Result<Started> {
        let request = serde_json::json!({ "path": path, "paths": python_paths });
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
/// directory and with the exported variables of its previous run.
pub(crate) fn cold(
    lang: &Lang,
    recipe: &Recipe,
    file: &Path,
    session: bool,
    python_paths: &[String],
) -> io::Result<Process> {
    let mut args = fill(&recipe.run, file, None);
    if session && *lang == Lang::BASH && args.len() == 2 {
        args.splice(
            1..1,
            ["-c".to_owned(), BASH_SESSION.to_owned(), "bash".to_owned()],
        );
    }
    spawn(&args, recipe, python_paths)
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
    spawn(&fill(&recipe.compile, file, None), recipe, &[])
}

/// Starts `args` as the program user, with the recipe's environment.
fn spawn(args: &[String], recipe: &Recipe, python_paths: &[String]) -> io::Result<Process> {
    let (program, rest) = args
        .split_first()
        .ok_or_else(|| io::Error::other("the language's command is empty"))?;
    let mut cmd = command(program, recipe, python_paths);
    cmd.args(rest);
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
        LoaderKind::Java => JAVA_LOADER,
    };
    let loader_file = Path::new(LOADER_DIR).join(JAVA_LOADER_FILE);
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
    #[cfg(feature = "embedded-python")]
    if let Some(keeper) = crate::embedded::keeper::take_for(recipe) {
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

/// In a forked child: makes each `(from, to)` descriptor `from` available as `to`
/// (across an exec too). Each is first copied above every target, so that placing one
/// never overwrites another still to be placed; the copies are close-on-exec (an exec, or
/// the caller's `close_range`, ends them). Raw calls only, no allocation: fit for
/// between fork and exec.
pub(crate) fn give<const N: usize>(pairs: &[(i32, i32); N]) -> io::Result<()> {
    let mut copies = [0; N];
    for (copy, (from, _)) in copies.iter_mut().zip(pairs) {
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) takes descriptors and touches no memory.
        *copy = unsafe { libc::fcntl(*from, libc::F_DUPFD_CLOEXEC, 10) };
        if *copy < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    for (copy, (_, to)) in copies.iter().zip(pairs) {
        // SAFETY: dup2 takes descriptors and touches no memory; the copy (close-on-exec)
        // goes away at exec.
        if unsafe { libc::dup2(*copy, *to) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
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

/// A program's whole environment, in order (a later variable of the same name wins):
/// the fixed variables, its language's (`recipe_env`), the Python path and matplotlib's
/// backend where the package set has them.
pub(crate) fn environment(
    recipe_env: &BTreeMap<String, String>,
    python_paths: &[String],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("PATH", PATH),
        ("HOME", HOME),
        ("USER", "sandbox"),
        ("LANG", "C.UTF-8"),
        ("TMPDIR", "/tmp"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.extend(recipe_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let packages = Path::new(PACKAGES).join("python");
    let mut path: Vec<&str> = python_paths.iter().map(String::as_str).collect();
    if packages.is_dir() {
        path.extend(packages.to_str());
    }
    if !path.is_empty() {
        env.push(("PYTHONPATH".into(), path.join(":")));
    }
    if packages.join(PLOTS_MODULE_FILE).is_file() {
        env.push(("MPLBACKEND".into(), PLOTS_BACKEND.into()));
    }
    env
}

/// When the sandbox runs out of memory, the kernel must kill the program, never the
/// agent: raising a score needs no privilege, and everything the program starts
/// inherits it. The child is made dumpable first, as the agent is not, so that it owns
/// its /proc files. Then it becomes the program user, if one is set (its exec makes it
/// dumpable again, now as that user), and enters the home folder, which only that user
/// may enter.
///
/// It runs in the child of a multi-threaded process between fork and exec: raw system
/// calls on static strings only, no allocation, no lock.
pub(crate) fn harden(user: Option<(u32, u32)>) -> io::Result<()> {
    nix::sys::prctl::set_dumpable(true)?;
    write_static(c"/proc/self/oom_score_adj", b"1000")?;
    if let Some(user) = user {
        become_program_user(user)?;
    }
    // SAFETY: chdir reads a NUL-terminated string that lives for the whole program.
    if unsafe { libc::chdir(HOME_C.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes `contents` to the file at `path` with raw calls (async-signal-safe).
fn write_static(path: &std::ffi::CStr, contents: &[u8]) -> io::Result<()> {
    // SAFETY: open reads a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: write reads `contents.len()` bytes of a live slice from a descriptor we
    // own; close releases it once.
    let written = unsafe { libc::write(fd, contents.as_ptr().cast(), contents.len()) };
    let error = io::Error::last_os_error();
    // SAFETY: as above.
    unsafe { libc::close(fd) };
    match written {
        n if n == contents.len() as isize => Ok(()),
        n if n < 0 => Err(error),
        _ => Err(io::Error::from(io::ErrorKind::WriteZero)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_home_folders_c_string_names_home() {
        assert_eq!(super::HOME_C.to_str(), Ok(crate::HOME));
    }
}
