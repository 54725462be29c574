//! What a run tool's description says a program can import: the runner's package set
//! (from `GET /health`), its warm imports, plots as images, and inline dependencies.

use sandbox_protocol::api::{PackageVersion, Packages};
use sandbox_protocol::Lang;

/// The sentences for `lang`'s tool ("" for a runner that says nothing of packages, or
/// a language that has none).
pub fn describe(lang: &Lang, packages: &Packages) -> String {
    match lang.as_str() {
        "python" => python(packages),
        "node" | "typescript" => node(packages),
        "bash" => bash(packages),
        _ => String::new(),
    }
}

fn python(packages: &Packages) -> String {
    let mut text = if packages.python.is_empty() {
        " Only the standard library is installed; there is no network, so pip cannot \
         install anything."
            .to_owned()
    } else {
        format!(
            " Installed (import directly; there is no network and pip install does not \
             work): {}.",
            list(&packages.python)
        )
    };
    if packages.python.iter().any(|p| p.name == "matplotlib") {
        text.push_str(
            " matplotlib figures shown with plt.show(), or left open when the program \
             ends, come back as PNG images.",
        );
    }
    if !packages.warm_imports.is_empty() && !packages.python.is_empty() {
        text.push_str(&format!(
            " Already imported, so free to import: {}.",
            packages.warm_imports.join(", ")
        ));
    }
    if packages.inline_dependencies {
        text.push_str(
            " Other PyPI packages (wheels only) may be declared at the top of the program \
             in a PEP 723 block, which the runner installs before the run: \
             \"# /// script\\n# dependencies = [\\\"humanize\\\"]\\n# ///\".",
        );
    }
    text
}

fn node(packages: &Packages) -> String {
    if packages.node.is_empty() {
        " Only Node's built-in modules are available; there is no network, so npm cannot \
         install anything."
            .to_owned()
    } else {
        format!(
            " Installed npm packages (require or import them; there is no network): {}.",
            list(&packages.node)
        )
    }
}

fn bash(packages: &Packages) -> String {
    if packages.python.is_empty() {
        String::new()
    } else {
        " python3 and node in the script see the same installed packages as run_python and \
         run_node."
            .to_owned()
    }
}

/// "numpy 2.3.1, pandas 2.3.0, ..."
fn list(packages: &[PackageVersion]) -> String {
    let items: Vec<String> = packages
        .iter()
        .map(|p| format!("{} {}", p.name, p.version))
        .collect();
    items.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Packages {
        let v = |name: &str| PackageVersion {
            name: name.to_owned(),
            version: "1.0".to_owned(),
        };
        Packages {
            key: Some("k".to_owned()),
            python: vec![v("numpy"), v("matplotlib")],
            node: vec![v("lodash")],
            warm_imports: vec!["numpy".to_owned()],
            inline_dependencies: true,
        }
    }

    #[test]
    fn each_tool_names_what_it_can_import() {
        let python = describe(&Lang::PYTHON, &set());
        assert!(python.contains("numpy 1.0, matplotlib 1.0"), "{python}");
        assert!(python.contains("PNG images"), "{python}");
        assert!(python.contains("PEP 723"), "{python}");
        assert!(python.contains("Already imported"), "{python}");
        assert!(describe(&Lang::NODE, &set()).contains("lodash 1.0"));
        assert!(describe(&Lang::BASH, &set()).contains("same installed packages"));
    }

    #[test]
    fn without_a_set_only_the_standard_library_is_promised() {
        let bare = Packages::default();
        let python = describe(&Lang::PYTHON, &bare);
        assert!(python.contains("Only the standard library"), "{python}");
        assert!(!python.contains("PEP 723"), "{python}");
        assert!(describe(&Lang::NODE, &bare).contains("built-in modules"));
        assert_eq!(describe(&Lang::BASH, &bare), "");
    }
}
