//! The languages' loaders, as sources the agent writes or passes on a command line: a
//! loader is started ahead of its job and waits for a request on descriptor 3 (the
//! program's path, JSON), then runs the program as the cold start would, or, in a
//! session, stays as the language's resident interpreter (`resident.rs`), reporting each
//! run's end on descriptor 4.

/// Python's loader (`python3 -c LOADER`); a Python template defines it ahead of its
/// sandboxes.
pub(crate) const PYTHON_LOADER: &str = include_str!("python.py");
/// Node's (and TypeScript's); it makes the program's stdout and stderr streams while it
/// waits, so that a run does not pay for them.
pub(crate) const NODE_LOADER: &str = include_str!("node.js");
/// The JVM languages' (Java, Clojure, Groovy, Kotlin; its command's first argument after
/// the file names the language): a JVM holding the language's runtime, or its compiler,
/// which runs the program in the same JVM (written to a file, which its command names).
pub(crate) const JVM_LOADER: &str = include_str!("SandboxLoader.java");
/// Ruby's (`ruby -e LOADER`).
pub(crate) const RUBY_LOADER: &str = include_str!("ruby.rb");
/// Lua's (`lua5.4 -e LOADER`).
pub(crate) const LUA_LOADER: &str = include_str!("lua.lua");
/// Perl's (`perl -e LOADER`).
pub(crate) const PERL_LOADER: &str = include_str!("perl.pl");
/// Not a loader: what a session's bash runs around each program, so that it starts in
/// the working folder and with the exported variables the run before ended with.
pub(crate) const BASH_SESSION: &str = include_str!("bash_session.sh");
