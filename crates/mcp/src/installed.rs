//! What a run tool's description says a program can import: the runner's package set
//! (from `GET /health`), its warm imports, plots as images, and inline dependencies.

use sandbox_protocol::api::{PackageVersion, Packages};
use sandbox_protocol::Lang;

/// The sentences for `lang`'s tool ("" for a runner that says nothing of packages, or
/// a language that has none), on a runner whose sandboxes have `network` (hosts opened
/// through its proxy, which the tool's description then names) or none.
pub fn describe(lang: &Lang, packages: &Packages, network: bool) -> String {
    match lang.as_str() {
        "python" => python(packages, network),
        "node" | "typescript" => node(packages, network),
        "bash" => bash(packages),
        _ => String::new(),
    }
}

fn python(packages: &Packages, network: bool) -> String {
    let mut text = if network {
        match packages.python.is_empty() {
            true => " Only the standard library is installed.".to_owned(),
            false => format!(" Installed (import directly): {}.", list(&packages.python)),
        }
    } else if packages.python.is_empty() {
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

fn node(packages: &Packages, network: bool) -> String {
    if network {
        match packages.node.is_empty() {
            true => " Only Node's built-in modules are installed.".to_owned(),
            false => format!(" Installed npm packages: {}.", list(&packages.node)),
        }
    } else if packages.node.is_empty() {
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
        let python = describe(&Lang::PYTHON, &set(), false);
        assert!(python.contains("numpy 1.0, matplotlib 1.0"), "{python}");
        assert!(python.contains("PNG images"), "{python}");
        assert!(python.contains("PEP 723"), "{python}");
        assert!(python.contains("Already imported"), "{python}");
        assert!(describe(&Lang::NODE, &set(), false).contains("lodash 1.0"));
        assert!(describe(&Lang::BASH, &set(), false).contains("same installed packages"));
    }

    #[test]
    fn without_a_set_only_the_standard_library_is_promised() {
        let bare = Packages::default();
        let python = describe(&Lang::PYTHON, &bare, false);
        assert!(python.contains("Only the standard library"), "{python}");
        assert!(!python.contains("PEP 723"), "{python}");
        assert!(describe(&Lang::NODE, &bare, false).contains("built-in modules"));
        assert_eq!(describe(&Lang::BASH, &bare, false), "");
    }

    #[test]
    fn where_hosts_are_open_no_sentence_says_there_is_no_network() {
        for packages in [set(), Packages::default()] {
            for lang in [Lang::PYTHON, Lang::NODE] {
                let text = describe(&lang, &packages, true);
                assert!(!text.contains("no network"), "{lang}: {text}");
                assert!(!text.contains("cannot"), "{lang}: {text}");
            }
        }
        assert!(describe(&Lang::PYTHON, &set(), true).contains("numpy 1.0"));
    }
}
