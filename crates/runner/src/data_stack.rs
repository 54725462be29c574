//! Which Python programs get the data stack warm: a program that imports one of the
//! warm imports (numpy, pandas, matplotlib by default), or a package of the set that
//! requires one (seaborn, scipy, scikit-learn, ...), is given a sandbox whose
//! interpreter holds them already; any other program a lean one, which costs a fresh
//! sandbox far less to make (a fork of a ~20 MiB interpreter instead of a ~100 MiB
//! one, with its copy-on-write faults and teardown). docs/packages.md, "Warm imports".
//!
//! The choice is read from the program's source, before a sandbox is taken: its
//! `import` and `from ... import` statements (anywhere, at any indentation) and
//! `__import__("x")` / `import_module("x")` calls with a literal name. A guess either
//! way changes no result, only the time: a lean sandbox imports what its program asks
//! for, as any interpreter does (a second of CPU or so for the data stack), and a data
//! sandbox's warm modules are only in `sys.modules`.
//!
//! Not for: which modules those are (sandbox-packages' `data_stack_modules` reads the
//! set's metadata), nor how a sandbox is made with or without them (the pool and the
//! backend).

use crate::config::SandboxConfig;
use sandbox_protocol::agent::Job;
use sandbox_protocol::language::LoaderKind;
use std::collections::BTreeSet;

/// The top-level module names that bring the data stack with them.
#[derive(Debug, Clone)]
pub struct DataStack {
    modules: BTreeSet<String>,
}

impl DataStack {
    /// The data stack of a runner with `config`: none where every Python sandbox is
    /// the same (no warm imports). A VM too is prepared with the warm imports only for
    /// a program that uses them: under emulation they take seconds after its boot, which
    /// a `print(1)` would otherwise wait for.
    pub fn of(config: &SandboxConfig) -> Option<DataStack> {
        let warm = &config.packages.warm_imports;
        if warm.is_empty() {
            return None;
        }
        // Without a set, the warm imports alone (an empty path reads as no set).
        let python_dir = config.packages.set.as_ref().map(|set| set.python_dir());
        let modules = sandbox_packages::data_stack_modules(&python_dir.unwrap_or_default(), warm);
        tracing::info!(
            modules = modules.iter().cloned().collect::<Vec<_>>().join(","),
            "python programs that import these get the warm imports; others a lean sandbox"
        );
        Some(DataStack { modules })
    }

    /// Whether `job` is a Python program that imports a module of the data stack.
    pub fn wanted_by(&self, job: &Job) -> bool {
        let python = job
            .recipe
            .loader
            .as_ref()
            .is_some_and(|l| l.kind == LoaderKind::Python);
        python && imported_modules(&job.code).any(|m| self.modules.contains(m))
    }
}

/// The top-level names of the modules `code` imports, as far as its text says (see the
/// module's documentation), duplicates included.
fn imported_modules(code: &str) -> impl Iterator<Item = &str> {
    let statements = code
        .lines()
        .flat_map(|line| line.split(';'))
        .flat_map(statement_modules);
    let calls = ["__import__(", "import_module("]
        .into_iter()
        .flat_map(move |call| {
            code.match_indices(call)
                .map(move |(at, _)| &code[at + call.len()..])
        })
        .filter_map(literal_module);
    statements.chain(calls)
}

/// The modules of one statement: `import a.b as c, d` gives `a` and `d`; `from a.b
/// import c` gives `a`; a relative import or anything else gives none.
fn statement_modules(statement: &str) -> Vec<&str> {
    let statement = statement.trim_start();
    if let Some(names) = statement.strip_prefix("import ") {
        let names = names.split('#').next().unwrap_or_default();
        return names
            .split(',')
            .filter_map(|n| n.split_whitespace().next())
            .map(|n| n.split('.').next().unwrap_or(n))
            .filter(|n| is_identifier(n))
            .collect();
    }
    if let Some(rest) = statement.strip_prefix("from ") {
        let module = rest.split_whitespace().next().unwrap_or_default();
        let top = module.split('.').next().unwrap_or_default();
        if is_identifier(top) {
            return vec![top];
        }
    }
    Vec::new()
}

/// The top-level name of a quoted module name at the start of a call's arguments.
fn literal_module(arguments: &str) -> Option<&str> {
    let arguments = arguments.trim_start();
    let quote = arguments
        .chars()
        .next()
        .filter(|c| matches!(c, '"' | '\''))?;
    let name = arguments[1..].split(quote).next()?;
    let top = name.split('.').next()?;
    is_identifier(top).then_some(top)
}

/// A Python identifier of ASCII letters, digits and `_`, not starting with a digit.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imports(code: &str) -> Vec<&str> {
        imported_modules(code).collect()
    }

    #[test]
    fn statements_anywhere_give_their_top_level_modules() {
        let code = "import os, numpy.linalg as la\n\
                    from pandas.api import types\n\
                    def f():\n    import matplotlib.pyplot as plt  # plots\n\
                    x = 1; import seaborn\n\
                    from . import sibling\nfrom .pkg import x\n\
                    import (bad\nimportant = 3\nfromage = 4\n";
        assert_eq!(
            imports(code),
            ["os", "numpy", "pandas", "matplotlib", "seaborn"]
        );
    }

    #[test]
    fn calls_with_a_literal_name_count() {
        let code = "m = __import__('pandas')\nimport importlib\n\
                    n = importlib.import_module(\"scipy.stats\")\np = __import__(name)\n";
        assert_eq!(imports(code), ["importlib", "pandas", "scipy"]);
    }

    #[test]
    fn a_program_wants_the_stack_only_when_it_imports_from_it() {
        let stack = DataStack {
            modules: ["numpy", "pandas", "matplotlib", "seaborn"]
                .map(String::from)
                .into(),
        };
        let job = |kind: Option<LoaderKind>, code: &str| {
            let mut job = crate::pool::tests::job(sandbox_protocol::Lang::PYTHON);
            job.code = code.into();
            job.recipe.loader = kind.map(|kind| sandbox_protocol::language::Loader {
                kind,
                command: vec!["python3".into()],
            });
            job
        };
        let python = Some(LoaderKind::Python);
        assert!(stack.wanted_by(&job(python, "import pandas as pd\n")));
        assert!(stack.wanted_by(&job(python, "from matplotlib import pyplot\n")));
        assert!(!stack.wanted_by(&job(python, "print(1)\n")));
        assert!(!stack.wanted_by(&job(python, "import json, requests\n")));
        assert!(!stack.wanted_by(&job(None, "import numpy\n")));
    }
}
