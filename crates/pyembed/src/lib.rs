//! The host's CPython, loaded at run time into a process of ours, to be forked.
//!
//! A fork server (issue 16) keeps one interpreter that has done what every sandbox would
//! repeat (its start-up, the operator's warm imports) and makes each sandbox's program
//! from a fork of it. The interpreter is the host's own shared library
//! (`libpython3.X.so.1.0`), opened with `dlopen` rather than linked: a binary of ours must
//! start on a host without it, where sandboxes are made as before.
//!
//! Only what a fork server needs of the C API is bound: naming the program, starting the
//! interpreter, running source in `__main__`, and the fork hooks that keep the
//! interpreter's locks and thread state right in both halves of a fork
//! (`PyOS_BeforeFork`, `PyOS_AfterFork_Parent`, `PyOS_AfterFork_Child`: what `os.fork`
//! does). The library is opened `RTLD_GLOBAL`, so that extension modules (numpy, ...),
//! which are built against no particular libpython, find its symbols.
//!
//! One interpreter per process, started once, from one thread; a fork is safe only while
//! the process has one thread (the child would get none of the others), which
//! [`Python::fork`] checks.

use std::ffi::{c_char, c_int, CString};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use libloading::os::unix::{Library, Symbol, RTLD_GLOBAL, RTLD_NOW};

/// Source a forked child runs before anything else: it draws new seeds from the kernel
/// for the random generators a template may hold, so that siblings never share a stream.
/// `random`'s module-level generator is reseeded by CPython itself in a child (an
/// at-fork hook [`Python::fork`] runs); numpy's legacy global generator, seeded once when
/// `numpy.random` is imported, is not (tests/fork.rs shows siblings sharing it without
/// this). What forked siblings still share: the address-space layout, the stack canary
/// and the hash seed.
pub const RESEED: &str = "\
import sys as _sandbox_sys
if 'random' in _sandbox_sys.modules:
    _sandbox_sys.modules['random'].seed()
if 'numpy' in _sandbox_sys.modules:
    try:
        _sandbox_sys.modules['numpy'].random.seed()
    except Exception:
        pass
del _sandbox_sys
";

/// Whether this process has started an interpreter (the C API allows one).
static STARTED: AtomicBool = AtomicBool::new(false);

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The shared library could not be opened.
    #[error("opening {library}: {source}")]
    Open {
        /// The library asked for.
        library: PathBuf,
        /// What the loader said.
        source: libloading::Error,
    },
    /// The library lacks a function of the C API this crate calls.
    #[error("{library} has no {symbol}: {source}")]
    Symbol {
        /// The library.
        library: PathBuf,
        /// The missing function.
        symbol: &'static str,
        /// What the loader said.
        source: libloading::Error,
    },
    /// This process already started an interpreter.
    #[error("an interpreter was already started in this process")]
    AlreadyStarted,
    /// A string handed to the interpreter holds a NUL byte.
    #[error("{0} holds a NUL byte")]
    Nul(&'static str),
    /// Source run in `__main__` raised an exception (printed to standard error by the
    /// interpreter, as `python3 -c` would).
    #[error("the source raised an exception (printed on standard error)")]
    Raised,
    /// The process has more than one thread: a fork would leave the child without them.
    #[error("the process has {0} threads: a fork needs exactly one")]
    Threads(usize),
    /// fork(2) failed, or the thread count could not be read.
    #[error("fork: {0}")]
    Fork(io::Error),
}

/// The C functions called, resolved once.
struct Api {
    set_program_name: Symbol<unsafe extern "C" fn(*const libc::wchar_t)>,
    initialize_ex: Symbol<unsafe extern "C" fn(c_int)>,
    run_simple_string: Symbol<unsafe extern "C" fn(*const c_char) -> c_int>,
    before_fork: Symbol<unsafe extern "C" fn()>,
    after_fork_parent: Symbol<unsafe extern "C" fn()>,
    after_fork_child: Symbol<unsafe extern "C" fn()>,
}

/// A started interpreter, for the life of the process.
pub struct Python {
    api: Api,
    /// `Py_SetProgramName` keeps the pointer: the name must outlive the interpreter.
    _program_name: Vec<libc::wchar_t>,
    /// Kept open: the interpreter lives in it.
    _library: Library,
}

/// Which half of a fork this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The parent, with the child's pid.
    Parent(libc::pid_t),
    /// The child.
    Child,
}

impl Python {
    /// Opens `library` (a file name the loader searches, `libpython3.11.so.1.0`, or a
    /// path) and starts its interpreter as `program` (`sys.executable`, and where it
    /// finds its standard library), with Python's signal handlers (a program gets
    /// `KeyboardInterrupt` on SIGINT, as under `python3`). Once per process.
    pub fn start(library: &Path, program: &str) -> Result<Python, EmbedError> {
        if STARTED.swap(true, Ordering::SeqCst) {
            return Err(EmbedError::AlreadyStarted);
        }
        let lib = open(library)?;
        let api = Api::resolve(&lib, library)?;
        if program.contains('\0') {
            return Err(EmbedError::Nul("the program name"));
        }
        let name = wide(program);
        // SAFETY: the name is a NUL-terminated wide string kept alive in `Python` for the
        // rest of the process; the interpreter is started once (STARTED), from this thread,
        // after its name is set, as the C API asks.
        unsafe {
            (api.set_program_name)(name.as_ptr());
            (api.initialize_ex)(1);
        }
        Ok(Python {
            api,
            _program_name: name,
            _library: lib,
        })
    }

    /// Runs `source` in `__main__` (as `python3 -c` does); an uncaught exception is
    /// printed on standard error and gives [`EmbedError::Raised`]. A `SystemExit` ends the
    /// process with its code, as in `python3`.
    pub fn run(&self, source: &str) -> Result<(), EmbedError> {
        let source = CString::new(source).map_err(|_| EmbedError::Nul("the source"))?;
        // SAFETY: the interpreter is started and this thread holds its GIL (the only one
        // it has ever had); the source is a NUL-terminated string alive for the call.
        let rc = unsafe { (self.api.run_simple_string)(source.as_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(EmbedError::Raised)
        }
    }

    /// Forks the process, with the interpreter's fork hooks around it. Refused while the
    /// process has more than one thread.
    pub fn fork(&self) -> Result<Forked, EmbedError> {
        let threads = thread_count().map_err(EmbedError::Fork)?;
        if threads != 1 {
            return Err(EmbedError::Threads(threads));
        }
        // SAFETY: the hooks are called around fork from the thread holding the GIL, in
        // the order the C API documents; the process has one thread, so the child is a
        // whole copy of it.
        unsafe {
            (self.api.before_fork)();
            match libc::fork() {
                -1 => {
                    let error = io::Error::last_os_error();
                    (self.api.after_fork_parent)();
                    Err(EmbedError::Fork(error))
                }
                0 => {
                    (self.api.after_fork_child)();
                    Ok(Forked::Child)
                }
                pid => {
                    (self.api.after_fork_parent)();
                    Ok(Forked::Parent(pid))
                }
            }
        }
    }
}

impl Api {
    fn resolve(lib: &Library, library: &Path) -> Result<Api, EmbedError> {
        Ok(Api {
            set_program_name: symbol(lib, library, "Py_SetProgramName")?,
            initialize_ex: symbol(lib, library, "Py_InitializeEx")?,
            run_simple_string: symbol(lib, library, "PyRun_SimpleString")?,
            before_fork: symbol(lib, library, "PyOS_BeforeFork")?,
            after_fork_parent: symbol(lib, library, "PyOS_AfterFork_Parent")?,
            after_fork_child: symbol(lib, library, "PyOS_AfterFork_Child")?,
        })
    }
}

fn open(library: &Path) -> Result<Library, EmbedError> {
    // SAFETY: loading libpython runs its initialisers, which only set up the library's
    // own state; RTLD_GLOBAL makes its symbols visible to the extension modules it loads.
    unsafe { Library::open(Some(library), RTLD_NOW | RTLD_GLOBAL) }.map_err(|source| {
        EmbedError::Open {
            library: library.to_owned(),
            source,
        }
    })
}

fn symbol<T>(lib: &Library, library: &Path, name: &'static str) -> Result<Symbol<T>, EmbedError> {
    // SAFETY: each name is a function of CPython's stable C API whose signature is the
    // `T` it is resolved as (see `Api`).
    unsafe { lib.get(name.as_bytes()) }.map_err(|source| EmbedError::Symbol {
        library: library.to_owned(),
        symbol: name,
        source,
    })
}

/// `text` as a NUL-terminated wide string (`wchar_t` is a 32-bit code point on Linux).
fn wide(text: &str) -> Vec<libc::wchar_t> {
    text.chars()
        .map(|c| c as libc::wchar_t)
        .chain(std::iter::once(0))
        .collect()
}

/// The shared library of the interpreter `python` (`/usr/bin/python3`), as its own
/// build configuration names it (`LIBDIR/INSTSONAME`); `None` where the interpreter was
/// built without one, or the file is absent (Debian's `libpython3.X` not installed).
pub fn shared_library_of(python: &Path) -> io::Result<Option<PathBuf>> {
    let out = std::process::Command::new(python)
        .args([
            "-I",
            "-c",
            "import sysconfig as s; print(s.get_config_var('LIBDIR') or '');\
             print(s.get_config_var('INSTSONAME') or '')",
        ])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{} exited with {}",
            python.display(),
            out.status
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let (dir, name) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    if dir.is_empty() || !name.contains(".so") {
        return Ok(None);
    }
    let path = Path::new(dir).join(name);
    Ok(path.is_file().then_some(path))
}

/// The threads of this process now.
pub fn thread_count() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_strings_end_with_nul_and_keep_code_points() {
        assert_eq!(wide("pé"), vec!['p' as libc::wchar_t, 0xe9, 0]);
    }
}
