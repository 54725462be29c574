//! A program's environment: built from an empty one, the same for every program of a
//! language (and for what a Python template imports ahead of its sandboxes).

use sandbox_jail::layout::{HOME, PACKAGES, PATH};
use std::collections::BTreeMap;
use std::path::Path;

/// The matplotlib backend of the package set that saves figures into `outputs/`.
const PLOTS_MODULE_FILE: &str = "sandbox_plots.py";
const PLOTS_BACKEND: &str = "module://sandbox_plots";

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
