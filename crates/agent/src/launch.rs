//! Starting the interpreter: cold (`python3 main.py`) or ahead of time (a small loader
//! that waits for the program's path on descriptor 3, then runs it as the cold start
//! would).

use crate::identity::{become_program_user, program_user};
use crate::{HOME, HOME_C, PATH};
use sandbox_protocol::Lang;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The descriptor a loader reads the program's path from.
const GO_FD: i32 = 3;
const PYTHON_LOADER: &str = include_str!("loader/python.py");
const NODE_LOADER: &str = include_str!("loader/node.js");

/// An interpreter started ahead of its job, waiting for the program's path.
pub struct Prepared {
    lang: Lang,
    child: Child,
    go: File,
}

impl Prepared {
    /// The language it runs.
    pub fn lang(&self) -> Lang {
        self.lang
    }

    /// Lets the waiting interpreter run the program at `path`.
    pub(crate) fn start(mut self, path: &Path) -> io::Result<Child> {
        self.go.write_all(path.as_os_str().as_encoded_bytes())?;
        drop(self.go); // end of file: the loader stops reading
        Ok(self.child)
    }

    /// Ends the waiting interpreter (the job is in another language).
    pub(crate) fn discard(mut self) {
        drop(self.go); // the loader reads an empty path and exits
        let _ = self.child.kill();
        let _ = self.child.wait();
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

/// Starts the interpreter of `lang` on `file`.
pub(crate) fn cold(lang: Lang, file: &Path) -> io::Result<Child> {
    let (program, options) = interpreter(lang);
    let mut cmd = command(program);
    cmd.args(options).arg(file);
    let user = program_user();
    // SAFETY: between fork and exec the child only runs `harden`, which is
    // async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(move || harden(user));
    }
    cmd.spawn()
}

/// Starts a loader for `lang`, if the language has one (bash starts in a millisecond
/// and has none).
pub fn prepare(lang: Lang) -> io::Result<Option<Prepared>> {
    let loader = match lang {
        Lang::Bash => return Ok(None),
        Lang::Python => ["-c", PYTHON_LOADER],
        Lang::Node => ["-e", NODE_LOADER],
    };
    let (program, options) = interpreter(lang);
    let (go_read, go_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let mut cmd = command(program);
    cmd.args(options).args(loader);
    let go_raw = go_read.as_raw_fd();
    let user = program_user();
    // SAFETY: between fork and exec the child makes only async-signal-safe calls, and
    // allocates nothing: dup2 gives the loader the read end as descriptor 3 (without
    // close-on-exec), then `harden` (see there).
    unsafe {
        cmd.pre_exec(move || {
            if nix::libc::dup2(go_raw, GO_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            harden(user)
        });
    }
    let child = cmd.spawn()?;
    drop::<OwnedFd>(go_read);
    Ok(Some(Prepared {
        lang,
        child,
        go: File::from(go_write),
    }))
}

fn command(program: &str) -> Command {
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
