//! Starting the interpreter: cold (`python3 main.py`) or ahead of time (a small loader
//! that waits for a request on descriptor 3, then runs the program as the cold start
//! would, or, in a session, as its [`Resident`](crate::resident::Resident) interpreter).

use crate::identity::{become_program_user, program_user};
use crate::{HOME, HOME_C, PATH};
use sandbox_jail::layout::PACKAGES;
use sandbox_protocol::Lang;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The descriptor a loader reads its requests from.
const GO_FD: i32 = 3;
/// The descriptor a session's loader reports a program's end on.
const DONE_FD: i32 = 4;
const PYTHON_LOADER: &str = include_str!("loader/python.py");
const NODE_LOADER: &str = include_str!("loader/node.js");
const BASH_SESSION: &str = include_str!("loader/bash_session.sh");
/// The matplotlib backend of the package set that saves figures into `outputs/`.
const PLOTS_MODULE_FILE: &str = "sandbox_plots.py";
const PLOTS_BACKEND: &str = "module://sandbox_plots";

/// An interpreter started ahead of its job, waiting for a request.
pub struct Prepared {
    lang: Lang,
    child: Child,
    go: File,
    done: OwnedFd,
}

impl Prepared {
    /// The language it runs.
    pub fn lang(&self) -> Lang {
        self.lang
    }

    /// Lets the waiting interpreter run the program at `path` as a one-shot job, with
    /// `python_paths` ahead of the package set on its import path.
    pub(crate) fn start(mut self, path: &Path, python_paths: &[String]) -> io::Result<Child> {
        let request = serde_json::json!({ "path": path, "paths": python_paths });
        let line = request.to_string() + "\n";
        self.go.write_all(line.as_bytes())?;
        drop(self.go); // end of file: the loader stops reading
        Ok(self.child)
    }

    /// Ends the waiting interpreter (the job is in another language).
    pub(crate) fn discard(mut self) {
        drop(self.go); // the loader reads no request and exits
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its parts, for a session to keep it: language, process, request and report pipes.
    pub(crate) fn into_parts(self) -> (Lang, Child, File, OwnedFd) {
        (self.lang, self.child, self.go, self.done)
    }
}

/// The interpreter for a language, looked up on [`PATH`], and its options.
/// Node detects ES-module syntax (`import`, top-level `await`) and runs the file as a
/// module then, as Node 22 does by default.
fn interpreter(lang: Lang) -> (&'static str, &'static [&'static str]) {
    match lang {
        Lang::Bash => ("bash", &[]),
        Lang::Python => ("python3", &[]),
        Lang::Node => ("node", &["--experimental-detect-module"]),
    }
}

/// Starts the interpreter of `lang` on `file`, with `python_paths` ahead of the package
/// set on Python's import path; a session's bash (`session`) in the working directory
/// and with the exported variables of its previous run.
pub(crate) fn cold(
    lang: Lang,
    file: &Path,
    session: bool,
    python_paths: &[String],
) -> io::Result<Child> {
    let (program, options) = interpreter(lang);
    let mut cmd = command(program, python_paths);
    cmd.args(options);
    if session && lang == Lang::Bash {
        cmd.args(["-c", BASH_SESSION, "bash"]);
    }
    cmd.arg(file);
    let user = program_user();
    // SAFETY: between fork and exec the child only runs `harden`, which is
    // async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(move || harden(user));
    }
    cmd.spawn()
}

/// Starts a loader for `lang`, if the language has one (bash starts in a millisecond
/// and has none); a Python one imports `warm_imports` while it waits.
pub fn prepare(lang: Lang, warm_imports: &[String]) -> io::Result<Option<Prepared>> {
    let loader = match lang {
        Lang::Bash => return Ok(None),
        Lang::Python => ["-c", PYTHON_LOADER],
        Lang::Node => ["-e", NODE_LOADER],
    };
    let (program, options) = interpreter(lang);
    let (go_read, go_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (done_read, done_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let mut cmd = command(program, &[]);
    cmd.args(options).args(loader);
    if lang == Lang::Python && !warm_imports.is_empty() {
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
    let child = cmd.spawn()?;
    drop::<OwnedFd>(go_read);
    drop::<OwnedFd>(done_write);
    Ok(Some(Prepared {
        lang,
        child,
        go: File::from(go_write),
        done: done_read,
    }))
}

/// In the child, between fork and exec: makes each `(from, to)` descriptor `from`
/// available as `to` across exec. Each is first copied above every target, so that
/// placing one never overwrites another still to be placed. Raw calls only.
fn give(pairs: &[(i32, i32); 2]) -> io::Result<()> {
    let mut copies = [0; 2];
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

/// The interpreter's command, with the program's environment: the package set's
/// Python folder (after `python_paths`) on `PYTHONPATH`, and matplotlib's backend that
/// turns figures into images in `outputs/` where the set has it.
fn command(program: &str, python_paths: &[String]) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", PATH)
        .env("HOME", HOME)
        .env("USER", "sandbox")
        .env("LANG", "C.UTF-8")
        .env("TMPDIR", "/tmp")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let packages = Path::new(PACKAGES).join("python");
    let mut path: Vec<&str> = python_paths.iter().map(String::as_str).collect();
    if packages.is_dir() {
        path.extend(packages.to_str());
    }
    if !path.is_empty() {
        cmd.env("PYTHONPATH", path.join(":"));
    }
    if packages.join(PLOTS_MODULE_FILE).is_file() {
        cmd.env("MPLBACKEND", PLOTS_BACKEND);
    }
    cmd
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
fn harden(user: Option<(u32, u32)>) -> io::Result<()> {
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
