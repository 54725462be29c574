//! Which of a set's Python modules bring the data stack with them: the warm imports
//! (numpy, pandas, matplotlib by default) and every package of the set that requires one
//! of them, directly or through another (seaborn, scipy, scikit-learn, ...).
//!
//! The runner gives a program that imports one of these a sandbox whose interpreter
//! holds the warm imports, and any other program a lean one; it asks once, at start.
//! Read from the set's installed metadata (each `*.dist-info` folder's `METADATA`, and
//! `top_level.txt` or else `RECORD` for the modules it installs), never by running
//! anything. A folder the set does not describe (no metadata) counts as its own module
//! and requires nothing.
//!
//! Not for: what a program imports (the runner reads that from its source).

use crate::names::normalize_name;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::path::Path;

/// The most `*.dist-info` folders read from a set.
const MAX_DISTRIBUTIONS: usize = 4096;
/// The most bytes read of one metadata file (`RECORD` of a big package is ~1 MiB).
const MAX_FILE: u64 = 16 << 20;

/// One installed distribution: the modules it puts on the path and what it requires.
#[derive(Debug, Default)]
struct Distribution {
    modules: BTreeSet<String>,
    requires: BTreeSet<String>,
}

/// The top-level module names of `python_dir` (a set's pip `--target` tree) that are,
/// or whose distribution requires (transitively), one of `roots`' top-level modules;
/// `roots`' own top-level names are always in. A set that cannot be read gives just
/// those.
pub fn data_stack_modules(python_dir: &Path, roots: &[String]) -> BTreeSet<String> {
    let mut modules: BTreeSet<String> = roots.iter().map(|r| top_level(r).to_owned()).collect();
    let distributions = read_distributions(python_dir);
    let mut stack: BTreeSet<&str> = distributions
        .iter()
        .filter(|(_, d)| !d.modules.is_disjoint(&modules))
        .map(|(name, _)| name.as_str())
        .collect();
    loop {
        let more: Vec<&str> = distributions
            .iter()
            .filter(|(name, d)| {
                !stack.contains(name.as_str())
                    && d.requires.iter().any(|r| stack.contains(r.as_str()))
            })
            .map(|(name, _)| name.as_str())
            .collect();
        if more.is_empty() {
            break;
        }
        stack.extend(more);
    }
    for name in stack {
        modules.extend(distributions[name].modules.iter().cloned());
    }
    modules
}

/// `a` of a dotted module name `a.b.c`.
fn top_level(module: &str) -> &str {
    module.split('.').next().unwrap_or(module).trim()
}

/// The set's distributions by normalised name (empty if the folder cannot be read).
fn read_distributions(python_dir: &Path) -> BTreeMap<String, Distribution> {
    let Ok(entries) = fs::read_dir(python_dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| e.file_name().to_string_lossy().ends_with(".dist-info"))
        .take(MAX_DISTRIBUTIONS)
        .filter_map(|e| read_distribution(&e.path()))
        .collect()
}

/// One `*.dist-info` folder: its name, modules and requirements (none without a
/// readable `METADATA` naming it).
fn read_distribution(dir: &Path) -> Option<(String, Distribution)> {
    let metadata = read_bounded(&dir.join("METADATA"))?;
    let name = header_values(&metadata, "Name").next()?;
    let requires = header_values(&metadata, "Requires-Dist")
        .filter(|r| {
            !r.split_once(';')
                .is_some_and(|(_, marker)| marker.contains("extra"))
        })
        .filter_map(requirement_name)
        .collect();
    let modules = match read_bounded(&dir.join("top_level.txt")) {
        Some(text) => text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        None => read_bounded(&dir.join("RECORD"))
            .map(|record| record_modules(&record))
            .unwrap_or_default(),
    };
    Some((normalize_name(&name), Distribution { modules, requires }))
}

/// The values of the email-style header `key` in `METADATA` (its headers end at the
/// first empty line).
fn header_values<'a>(metadata: &'a str, key: &'a str) -> impl Iterator<Item = String> + 'a {
    metadata
        .lines()
        .take_while(|l| !l.is_empty())
        .filter_map(move |l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case(key))
        })
        .map(|(_, v)| v.trim().to_owned())
}

/// The normalised name a `Requires-Dist` value starts with (`numpy>=1.25; ...`).
fn requirement_name(value: String) -> Option<String> {
    let end = value
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(value.len());
    (end > 0).then(|| normalize_name(&value[..end]))
}

/// The top-level modules a `RECORD` lists: the first part of each path, a package
/// folder or a module file (`x.py`, `x.cpython-311-x86_64-linux-gnu.so`), but the
/// distribution's own folders, scripts, data and bundled libraries.
fn record_modules(record: &str) -> BTreeSet<String> {
    record
        .lines()
        .filter_map(|line| line.split(',').next())
        .filter_map(|path| {
            let (first, rest) = path.split_once('/').unwrap_or((path, ""));
            let module = if rest.is_empty() {
                first
                    .strip_suffix(".py")
                    .or_else(|| first.ends_with(".so").then(|| top_level(first)))?
            } else {
                first
            };
            let skipped = module.is_empty()
                || module.starts_with("..")
                || module == "__pycache__"
                || module.ends_with(".dist-info")
                || module.ends_with(".data")
                || module.ends_with(".libs")
                || matches!(module, "bin" | "share" | "include");
            (!skipped).then(|| module.to_owned())
        })
        .collect()
}

/// A regular file's text, if it is at most [`MAX_FILE`] bytes. Opened without following
/// a symbolic link and without waiting (a FIFO in a set must not hang the runner's start),
/// then checked to be a regular file.
fn read_bounded(path: &Path) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_FILE + 1).read_to_string(&mut text).ok()?;
    (text.len() as u64 <= MAX_FILE).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(root: &Path, name: &str, requires: &[&str], top: Option<&str>, record: &str) {
        let dir = root.join(format!("{}-1.0.dist-info", name.replace('-', "_")));
        fs::create_dir_all(&dir).unwrap();
        let mut metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n");
        for r in requires {
            metadata.push_str(&format!("Requires-Dist: {r}\n"));
        }
        metadata.push_str("\nRequires-Dist: notaheader\n");
        fs::write(dir.join("METADATA"), metadata).unwrap();
        if let Some(top) = top {
            fs::write(dir.join("top_level.txt"), top).unwrap();
        }
        fs::write(dir.join("RECORD"), record).unwrap();
    }

    fn set() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let p = root.path();
        dist(p, "numpy", &[], None, "numpy/__init__.py,sha256=x,1\nnumpy-1.0.dist-info/METADATA,,\n../../bin/f2py,,\nnumpy.libs/libx.so,,\n");
        dist(
            p,
            "pandas",
            &[
                "numpy>=2.0.2; python_version < \"3.14\"",
                "tzdata; sys_platform == \"win32\"",
            ],
            None,
            "pandas/__init__.py,,\n",
        );
        dist(
            p,
            "scipy",
            &["numpy<2.7,>=1.26.4"],
            None,
            "scipy/__init__.py,,\n",
        );
        dist(
            p,
            "scikit-learn",
            &["scipy>=1.10.0", "joblib>=1.4"],
            None,
            "sklearn/__init__.py,,\n",
        );
        dist(p, "joblib", &["cloudpickle"], Some("joblib\n"), "");
        dist(
            p,
            "seaborn",
            &["pandas>=1.2"],
            None,
            "seaborn/__init__.py,,\n",
        );
        dist(
            p,
            "requests",
            &["idna<4", "PySocks!=1.5.7; extra == \"socks\""],
            Some("requests\n"),
            "",
        );
        dist(p, "pyyaml", &[], Some("_yaml\nyaml\n"), "");
        dist(
            p,
            "typing-extensions",
            &[],
            None,
            "typing_extensions.py,,\n__pycache__/typing_extensions.cpython-311.pyc,,\n",
        );
        dist(p, "tzdata", &[], Some("tzdata\n"), "");
        root
    }

    #[test]
    fn the_warm_imports_and_what_requires_them_directly_or_not() {
        let root = set();
        let roots = ["numpy".to_owned(), "matplotlib.pyplot".to_owned()];
        let modules = data_stack_modules(root.path(), &roots);
        let names: Vec<&str> = modules.iter().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "matplotlib",
                "numpy",
                "pandas",
                "scipy",
                "seaborn",
                "sklearn"
            ],
            "requests, yaml, joblib, tzdata and typing_extensions need no warm import"
        );
    }

    #[test]
    fn a_set_that_cannot_be_read_gives_the_warm_imports_only() {
        let roots = ["pandas".to_owned()];
        let modules = data_stack_modules(Path::new("/nonexistent/python"), &roots);
        assert_eq!(modules, BTreeSet::from(["pandas".to_owned()]));
    }

    #[test]
    fn metadata_that_is_a_fifo_or_a_link_is_skipped_without_waiting() {
        let root = set();
        let p = root.path();
        // A distribution requiring numpy whose METADATA is a FIFO nobody writes: an
        // open that waited would hang here.
        let fifo = p.join("hang-1.0.dist-info");
        fs::create_dir_all(&fifo).unwrap();
        nix::unistd::mkfifo(&fifo.join("METADATA"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        // One whose METADATA links to a file outside the set.
        let outside = tempfile::NamedTempFile::new().unwrap();
        fs::write(outside.path(), "Name: linked\nRequires-Dist: numpy\n").unwrap();
        let linked = p.join("linked-1.0.dist-info");
        fs::create_dir_all(&linked).unwrap();
        std::os::unix::fs::symlink(outside.path(), linked.join("METADATA")).unwrap();
        fs::write(linked.join("top_level.txt"), "linked\n").unwrap();
        let modules = data_stack_modules(p, &["numpy".to_owned()]);
        assert!(modules.contains("pandas"), "{modules:?}");
        assert!(!modules.contains("linked"), "{modules:?}");
    }

    #[test]
    fn record_modules_skip_what_is_not_a_module() {
        let record = "a/__init__.py,,\nb.py,,\nc.cpython-311-x86_64-linux-gnu.so,,\n\
                      d-1.0.dist-info/RECORD,,\nd-1.0.data/scripts/x,,\n../../bin/tool,,\n\
                      __pycache__/b.cpython-311.pyc,,\nd.libs/libz.so,,\nREADME,,\n";
        let names: Vec<String> = record_modules(record).into_iter().collect();
        assert_eq!(names, ["a", "b", "c"]);
    }

    #[test]
    fn requirement_names_are_normalised() {
        assert_eq!(
            requirement_name("Scikit_Learn>=1".into()).as_deref(),
            Some("scikit-learn")
        );
        assert_eq!(requirement_name("numpy".into()).as_deref(), Some("numpy"));
        assert_eq!(requirement_name(">=1".into()), None);
    }
}
