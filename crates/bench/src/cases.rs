//! The one-liners measured, one per language, and how each path runs them.

use sandbox_protocol::Lang;
use std::path::{Path, PathBuf};

/// What every one-liner prints.
pub const EXPECTED_STDOUT: &str = "1\n";
/// Where the interpreters are looked up: the same PATH the sandbox agent uses, so that
/// both paths start the same binary.
const SEARCH_PATH: [&str; 3] = ["/usr/local/bin", "/usr/bin", "/bin"];

/// One language's one-liner.
#[derive(Debug, Clone)]
pub struct Case {
    /// The language.
    pub lang: Lang,
    /// The program text.
    pub code: &'static str,
    /// The interpreter's name.
    pub program: &'static str,
    /// The interpreter's option that takes a program text.
    pub inline_flag: &'static str,
    /// The sandbox-mcp tool that runs it.
    pub tool: &'static str,
    /// A program for the interpreter that starts and then waits on stdin, idle.
    pub idle_code: &'static str,
}

/// The three languages, in report order.
pub const CASES: [Case; 3] = [
    Case {
        lang: Lang::BASH,
        code: "echo 1",
        program: "bash",
        inline_flag: "-c",
        tool: "run_bash",
        idle_code: "read -r line",
    },
    Case {
        lang: Lang::PYTHON,
        code: "print(1)",
        program: "python3",
        inline_flag: "-c",
        tool: "run_python",
        idle_code: "import os; os.read(0, 1)",
    },
    Case {
        lang: Lang::NODE,
        code: "console.log(1)",
        program: "node",
        inline_flag: "-e",
        tool: "run_node",
        idle_code: "require('fs').readSync(0, Buffer.alloc(1))",
    },
];

impl Case {
    /// The interpreter's path on the search path the sandbox uses.
    pub fn interpreter(&self) -> anyhow::Result<PathBuf> {
        SEARCH_PATH
            .iter()
            .map(|dir| Path::new(dir).join(self.program))
            .find(|path| path.is_file())
            .ok_or_else(|| anyhow::anyhow!("{} is not installed in {SEARCH_PATH:?}", self.program))
    }

    /// The clean environment a direct spawn gets: the one the agent gives programs.
    pub fn clean_env() -> [(&'static str, &'static str); 4] {
        [
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("HOME", "/tmp"),
            ("LANG", "C.UTF-8"),
            ("TMPDIR", "/tmp"),
        ]
    }
}
