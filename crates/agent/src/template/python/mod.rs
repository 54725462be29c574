//! The interpreter a Python template holds (feature `embedded-python`), from which its
//! sandboxes' Python programs are forked (issue 16), instead of a `python3` executed for
//! each.
//!
//! A template started with a [`PythonSpec`] loads the host's libpython and starts its
//! interpreter once, confined as the template is; every sandbox forked from the template
//! holds a copy of it. That copy is not the agent's: the sandbox's first process forks
//! a [keeper](keeper) from it, then executes the agent afresh (so that the agent shares
//! neither its address layout nor its stack canary with the program, the template or
//! another sandbox). When the agent prepares a Python loader the keeper can stand for,
//! the keeper becomes it, instead of a `python3 -c LOADER` executed: it takes the descriptors, process group,
//! user and folder the executed one would have, sets up what the command line and
//! environment would have set up (`sys.argv`, `sys.path` from `PYTHONPATH`,
//! `os.environ`, the signal dispositions CPython installs at start), draws new seeds for
//! the random generators it holds ([`RESEED`]), and runs the same loader. What differs
//! from an executed `python3`, as a program can see it: `/proc/self/exe` (the runner's
//! binary), the mappings of `/proc/self/maps` (the template's, as its address layout
//! and stack canary are), `sys.flags` and `sys.orig_argv`, and the hash seed, shared by
//! every sandbox of the template (docs/security.md).
//!
//! Not for: the agent's side of the keeper (which loader it stands for, the request the
//! agent sends it), which is the agent's (`crate::agent`, `keeper.rs`); nor any other
//! language, whose programs are executed.

pub(super) mod keeper;

use super::spec::PythonSpec;
use crate::agent::child::{give, harden};
use crate::agent::environment::environment;
use crate::agent::loader::PYTHON_LOADER;
use sandbox_pyembed::{EmbedError, Python, RESEED};
use std::io;
use std::os::fd::RawFd;
use std::sync::OnceLock;

/// The interpreter of this process (a template, or a copy of one).
static PYTHON: OnceLock<Python> = OnceLock::new();

/// What the template runs once its interpreter has started: the imports of the loader
/// and of [`START`], the definitions of both (so that a forked child compiles neither),
/// then every object made so far leaves the collector's sight (`gc.freeze`; the warm
/// imports that follow are hidden likewise by `_sandbox_warm`), so that a
/// forked program's collections neither walk nor write to the pages it shares with the
/// template.
fn template_source() -> String {
    let imports = "import atexit, gc, importlib, importlib.machinery, json, os, select, signal, \
                   sys, threading\n";
    let loader = PYTHON_LOADER
        .trim_end()
        .strip_suffix(LOADER_CALL)
        .unwrap_or(PYTHON_LOADER);
    format!("{imports}{START}{loader}\ngc.freeze()\n")
}

/// What imports `modules` in the template, as a warm loader would in a sandbox (the
/// loader's own `_sandbox_warm`, which [`template_source`] defined): with the
/// sandboxes' environment (the package set on the path, matplotlib's backend, the home
/// folder's path, which is the template's own), math libraries single-threaded (a
/// template must stay one thread to fork), each failure skipped, output discarded.
fn warm_source(modules: &[String]) -> io::Result<String> {
    let env: std::collections::BTreeMap<String, String> =
        environment(&Default::default(), &[]).into_iter().collect();
    let config = serde_json::json!({"env": env, "modules": modules.join(",")});
    let literal = serde_json::to_string(&config.to_string()).map_err(io::Error::other)?;
    Ok(format!(
        "def _sandbox_template_warm(config):
    import json, os, sys
    config = json.loads(config)
    os.environ.update(config['env'])
    paths = [p for p in config['env'].get('PYTHONPATH', '').split(':') if p]
    sys.path[:0] = [p for p in paths if p not in sys.path]
    _sandbox_warm(config['modules'])
_sandbox_template_warm({literal})
del _sandbox_template_warm
"
    ))
}

/// The call that ends the loader's source.
const LOADER_CALL: &str = "_sandbox_loader()";

/// What `python3 -c` with a given environment and arguments sets up before running its
/// code (the JSON of `{"env": {...}, "argv": [...]}` in, once per forked child).
const START: &str = "\
def _sandbox_start(config):
    import json, os, signal, sys
    config = json.loads(config)
    os.environ.clear()
    os.environ.update(config['env'])
    paths = [p for p in config['env'].get('PYTHONPATH', '').split(':') if p]
    sys.path[:0] = [''] + [p for p in paths if p not in sys.path]
    sys.argv[:] = config['argv']
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
";

/// Starts the interpreter `spec` names in this process (once).
pub(super) fn start(spec: &PythonSpec) -> Result<(), EmbedError> {
    let python = Python::start(&spec.library, &spec.program)?;
    python.run(&template_source())?;
    if !spec.warm_imports.is_empty() {
        let source = warm_source(&spec.warm_imports).map_err(|_| EmbedError::Raised)?;
        python.run(&source)?;
    }
    let _ = PYTHON.set(python);
    let _ = PROGRAM.set(spec.program.clone());
    Ok(())
}

/// The interpreter's program, as its spec named it.
static PROGRAM: OnceLock<String> = OnceLock::new();

/// The interpreter of this process and its program, if it holds one.
pub(super) fn held() -> Option<(&'static Python, &'static str)> {
    Some((PYTHON.get()?, PROGRAM.get()?))
}

/// What the keeper runs to become the loader: [`START`] with `config` (the JSON of
/// `{"env": {...}, "argv": [...]}` an executed `python3 -c LOADER` would have had, as
/// the agent sent it), [`RESEED`], the loader.
fn loader_source(config: &str) -> io::Result<String> {
    // A JSON string is a Python string literal.
    let literal = serde_json::to_string(config).map_err(io::Error::other)?;
    Ok(format!(
        "_sandbox_start({literal})\n{RESEED}{LOADER_CALL}\n"
    ))
}

/// In the forked interpreter about to run its loader (the keeper): its descriptors in
/// place (every other one closed), its own process group, then what an executed
/// program's child does before exec (`harden`).
fn child_setup(fds: &[(RawFd, RawFd); 5], user: Option<(u32, u32)>) -> io::Result<()> {
    give(fds)?;
    // SAFETY: close_range only closes descriptors; those above 4 (the descriptors as
    // they came, the copies) are never used by this process again.
    if unsafe { libc::syscall(libc::SYS_close_range, 5, u32::MAX, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0))?;
    set_command_line(COMMAND_LINE)?;
    harden(user)?;
    // What an exec would do after the change of user: the program owns its /proc files
    // (the change made the process not dumpable).
    nix::sys::prctl::set_dumpable(true).map_err(io::Error::from)
}

/// What the forked interpreter's `/proc/self/cmdline` says: an executed loader's first
/// two arguments (its third, the loader's source, is left out).
const COMMAND_LINE: &[u8] = b"python3\0-c\0";

/// Writes `line` over this process's argument area (the memory `/proc/self/cmdline`
/// reads), the rest of it zeroed; an area too small is left as it is.
fn set_command_line(line: &[u8]) -> io::Result<()> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    // arg_start and arg_end are fields 48 and 49 of stat(5); `fields` starts at 3.
    let number = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<usize>().ok());
    let (Some(start), Some(end)) = (number(48), number(49)) else {
        return Err(io::Error::other("no argument area in /proc/self/stat"));
    };
    if end < start + line.len() {
        return Ok(());
    }
    // SAFETY: [start, end) is this process's argument area, on its own stack, mapped
    // and writable for its whole life; nothing of this forked child reads the old
    // arguments again.
    unsafe {
        let area = std::slice::from_raw_parts_mut(start as *mut u8, end - start);
        area.fill(0);
        area[..line.len()].copy_from_slice(line);
    }
    Ok(())
}
