//! PEP 723 inline script metadata: the `# /// script` block at the top of a Python script.
//!
//! Follows the specification
//! (<https://packaging.python.org/en/latest/specifications/inline-script-metadata/>):
//! blocks are found with its regular expression, the content lines lose their leading
//! `# ` or `#`, the `script` block is parsed as TOML, and more than one `script` block is
//! an error. Blocks of other types are ignored.

use std::sync::LazyLock;

use regex::Regex;

use crate::names::parse_requirement;

/// The regular expression of the specification, verbatim.
static BLOCK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
        .expect("the PEP 723 regular expression compiles")
});

/// What a script's `script` block declares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptMetadata {
    /// The `dependencies` array, as written (each a plain PEP 508 requirement).
    pub dependencies: Vec<String>,
    /// The `requires-python` version specifier, if any.
    pub requires_python: Option<String>,
}

/// Why a script's metadata block cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// The specification makes more than one `script` block an error.
    #[error("more than one `# /// script` block")]
    MultipleBlocks,
    /// The block's content is not TOML.
    #[error("the `# /// script` block is not valid TOML: {0}")]
    Toml(String),
    /// `dependencies` is there but not an array of strings.
    #[error("`dependencies` must be an array of strings{0}")]
    Dependencies(String),
    /// `requires-python` is there but not a string.
    #[error("`requires-python` must be a string")]
    RequiresPython,
    /// A dependency string that is not a plain requirement.
    #[error("dependency {dependency:?} is refused: {reason}")]
    BadDependency {
        /// The string as written.
        dependency: String,
        /// Why.
        reason: String,
    },
    /// A `requires-python` specifier this crate cannot evaluate.
    #[error("`requires-python` {0:?} is not a version specifier like \">=3.9\" or \"~=3.11\"")]
    BadRequiresPython(String),
}

/// Reads the `script` metadata block of `code`: `Ok(None)` when there is none.
///
/// Each dependency is checked to be a plain requirement (name, extras, version
/// specifiers, marker); URLs, paths and pip options are refused.
pub fn parse_script_metadata(code: &str) -> Result<Option<ScriptMetadata>, MetadataError> {
    let mut blocks = BLOCK.captures_iter(code).filter(|c| &c["type"] == "script");
    let Some(block) = blocks.next() else {
        return Ok(None);
    };
    if blocks.next().is_some() {
        return Err(MetadataError::MultipleBlocks);
    }
    let content: String = block["content"]
        .split_inclusive('\n')
        .map(|line| {
            line.strip_prefix("# ")
                .or_else(|| line.strip_prefix('#'))
                .unwrap_or(line)
        })
        .collect();
    let table: toml::Table =
        toml::from_str(&content).map_err(|e| MetadataError::Toml(e.message().to_owned()))?;

    let dependencies = match table.get("dependencies") {
        None => Vec::new(),
        Some(toml::Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                toml::Value::String(s) => Ok(s.clone()),
                other => Err(MetadataError::Dependencies(format!(
                    " (item {i} is a {})",
                    other.type_str()
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(MetadataError::Dependencies(format!(
                " (it is a {})",
                other.type_str()
            )))
        }
    };
    for dependency in &dependencies {
        parse_requirement(dependency).map_err(|reason| MetadataError::BadDependency {
            dependency: dependency.clone(),
            reason,
        })?;
    }
    let requires_python = match table.get("requires-python") {
        None => None,
        Some(toml::Value::String(s)) => {
            // Checked now, so that a script hears of a bad specifier before anything runs.
            python_satisfies(s, "3.0")?;
            Some(s.clone())
        }
        Some(_) => return Err(MetadataError::RequiresPython),
    };
    Ok(Some(ScriptMetadata {
        dependencies,
        requires_python,
    }))
}

/// Whether the Python `version` (`3.11.2`) satisfies the specifier `spec` (`>=3.9,<4`).
///
/// Covers the operators of PEP 440 on release numbers (`==`, `!=` with or without `.*`,
/// `<`, `<=`, `>`, `>=`, `~=`, `===`); pre-, post- and dev-release parts are refused.
pub fn python_satisfies(spec: &str, version: &str) -> Result<bool, MetadataError> {
    let bad = || MetadataError::BadRequiresPython(spec.to_owned());
    let have = release(version).ok_or_else(bad)?;
    let mut all = true;
    for clause in spec.split(',').map(str::trim) {
        if clause.is_empty() {
            return Err(bad());
        }
        let op_len = clause
            .find(|c: char| !matches!(c, '<' | '>' | '=' | '!' | '~'))
            .ok_or_else(bad)?;
        let (op, value) = (&clause[..op_len], clause[op_len..].trim());
        let (value, wildcard) = match value.strip_suffix(".*") {
            Some(v) => (v, true),
            None => (value, false),
        };
        let want = release(value).ok_or_else(bad)?;
        let ok = match (op, wildcard) {
            ("==", true) => prefix_eq(&have, &want),
            ("!=", true) => !prefix_eq(&have, &want),
            ("==" | "===", false) => cmp(&have, &want).is_eq(),
            ("!=", false) => cmp(&have, &want).is_ne(),
            ("<", false) => cmp(&have, &want).is_lt(),
            ("<=", false) => cmp(&have, &want).is_le(),
            (">", false) => cmp(&have, &want).is_gt(),
            (">=", false) => cmp(&have, &want).is_ge(),
            ("~=", false) if want.len() >= 2 => {
                cmp(&have, &want).is_ge() && prefix_eq(&have, &want[..want.len() - 1])
            }
            _ => return Err(bad()),
        };
        all &= ok;
    }
    Ok(all)
}

fn release(v: &str) -> Option<Vec<u64>> {
    let v = v.strip_prefix('v').unwrap_or(v);
    v.split('.').map(|part| part.parse().ok()).collect()
}

fn cmp(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    let n = a.len().max(b.len());
    let at = |x: &[u64], i: usize| x.get(i).copied().unwrap_or(0);
    (0..n)
        .map(|i| at(a, i).cmp(&at(b, i)))
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

fn prefix_eq(have: &[u64], prefix: &[u64]) -> bool {
    prefix
        .iter()
        .enumerate()
        .all(|(i, p)| have.get(i).copied().unwrap_or(0) == *p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_block_is_read() {
        let code = "\
# /// script
# requires-python = \">=3.11\"
# dependencies = [
#   \"requests<3\",
#   \"rich\",
# ]
# ///

import requests
";
        let m = parse_script_metadata(code).unwrap().unwrap();
        assert_eq!(m.dependencies, ["requests<3", "rich"]);
        assert_eq!(m.requires_python.as_deref(), Some(">=3.11"));
    }

    #[test]
    fn no_block_is_none() {
        assert_eq!(parse_script_metadata("print(1)\n").unwrap(), None);
        assert_eq!(parse_script_metadata("").unwrap(), None);
        // Not at the start of a line, or no closing line: not a block.
        assert_eq!(
            parse_script_metadata("x = 1  # /// script\n# dependencies = []\n# ///\n").unwrap(),
            None
        );
        assert_eq!(
            parse_script_metadata("# /// script\n# dependencies = []\nprint(1)\n").unwrap(),
            None
        );
        // Other block types are ignored.
        assert_eq!(
            parse_script_metadata("# /// pyproject\n# x = 1\n# ///\n").unwrap(),
            None
        );
    }

    #[test]
    fn a_block_without_dependencies_is_empty() {
        let m = parse_script_metadata("# /// script\n# requires-python = \">=3\"\n# ///\n")
            .unwrap()
            .unwrap();
        assert!(m.dependencies.is_empty());
    }

    #[test]
    fn two_script_blocks_are_an_error() {
        let code = "# /// script\n# dependencies = [\"a\"]\n# ///\n\n\
                    # /// script\n# dependencies = [\"b\"]\n# ///\n";
        assert_eq!(
            parse_script_metadata(code),
            Err(MetadataError::MultipleBlocks)
        );
    }

    #[test]
    fn bad_toml_is_an_error() {
        let code = "# /// script\n# dependencies = [\"a\"\n# ///\n";
        assert!(matches!(
            parse_script_metadata(code),
            Err(MetadataError::Toml(_))
        ));
    }

    #[test]
    fn non_string_dependencies_are_an_error() {
        for code in [
            "# /// script\n# dependencies = [1]\n# ///\n",
            "# /// script\n# dependencies = \"six\"\n# ///\n",
            "# /// script\n# dependencies = [{name = \"six\"}]\n# ///\n",
        ] {
            assert!(
                matches!(
                    parse_script_metadata(code),
                    Err(MetadataError::Dependencies(_))
                ),
                "{code}"
            );
        }
        assert_eq!(
            parse_script_metadata("# /// script\n# requires-python = 3.11\n# ///\n"),
            Err(MetadataError::RequiresPython)
        );
    }

    #[test]
    fn bare_hash_lines_are_blank_lines() {
        let code = "# /// script\n#\n# dependencies = [\n#\n#   \"six\",\n# ]\n#\n# ///\n";
        let m = parse_script_metadata(code).unwrap().unwrap();
        assert_eq!(m.dependencies, ["six"]);
    }

    #[test]
    fn the_block_ends_at_the_last_closing_line() {
        // The greedy content group makes the last `# ///` of a comment run the end.
        let code = "# /// script\n# dependencies = [\"six\"]\n# ///\n# tool = 1\n# ///\nx = 1\n";
        assert!(matches!(
            parse_script_metadata(code),
            Err(MetadataError::Toml(_))
        ));
    }

    #[test]
    fn urls_and_options_are_refused_as_dependencies() {
        let code = "# /// script\n# dependencies = [\"six @ https://evil/six.whl\"]\n# ///\n";
        assert!(matches!(
            parse_script_metadata(code),
            Err(MetadataError::BadDependency { .. })
        ));
        let code = "# /// script\n# dependencies = [\"--index-url=http://evil\"]\n# ///\n";
        assert!(matches!(
            parse_script_metadata(code),
            Err(MetadataError::BadDependency { .. })
        ));
    }

    #[test]
    fn requires_python_is_evaluated() {
        let yes = |s| python_satisfies(s, "3.11.2").unwrap();
        assert!(yes(">=3.9"));
        assert!(yes(">=3.9, <4"));
        assert!(yes("~=3.11"));
        assert!(yes("==3.11.*"));
        assert!(yes("==3.11.2"));
        assert!(yes("!=3.10.*"));
        assert!(!yes(">=3.12"));
        assert!(!yes("~=3.12"));
        assert!(!yes("<3.11"));
        assert!(!yes("==3.11"));
        assert!(yes("<=3.11.2"));
        assert!(python_satisfies(">=3.12a1", "3.11.2").is_err());
        assert!(python_satisfies("3.11", "3.11.2").is_err());
        assert!(python_satisfies("", "3.11.2").is_err());
        assert!(matches!(
            parse_script_metadata("# /// script\n# requires-python = \"banana\"\n# ///\n"),
            Err(MetadataError::BadRequiresPython(_))
        ));
    }
}
