//! `image build --languages`: which of the offered languages' toolchains an image holds.
//!
//! By default an image holds the built-in languages and the operator's rows, not those
//! of Debian's toolchains (`debian.toml`, about 3 GB together). `all` puts in every
//! language this host offers (built-in, Debian's, the operator's); a comma list of names
//! adds those to the default (the built-in languages and the operator's rows are always
//! in, so that a list only adds). A value that names an existing file or holds a `/` is
//! a languages file, as `--languages` took before `--languages-file`.

use crate::languages::Origin;
use std::path::{Path, PathBuf};

/// The `--languages` value for every offered language.
pub const ALL: &str = "all";

/// What a `--languages` value says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LanguagesValue {
    /// A languages file, as the flag took before `--languages-file` (still read, with a
    /// warning).
    File(PathBuf),
    /// Which languages the image holds.
    Selection(Selection),
}

/// Which offered languages an image holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Selection {
    /// The built-in languages and the operator's rows (no `--languages`).
    #[default]
    Default,
    /// Every offered language, Debian's included.
    All,
    /// The default and these (each once, in the order given).
    Adding(Vec<String>),
}

/// A `--languages` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// `all` among other names.
    #[error("--languages {0:?}: `all` stands alone; give `all` or a comma list of names")]
    AllInList(String),
    /// A name this host does not offer.
    #[error("--languages: {name:?} {why}; this host offers {offered} (or give `all`)")]
    NotOffered {
        /// The name given.
        name: String,
        /// Why it is not offered.
        why: &'static str,
        /// The offered names, comma-separated.
        offered: String,
    },
}

impl LanguagesValue {
    /// Reads a `--languages` value: a languages file when it names an existing file or
    /// holds a `/`, else a selection.
    pub fn parse(value: &str) -> Result<LanguagesValue, SelectionError> {
        if value.contains('/') || Path::new(value).is_file() {
            return Ok(LanguagesValue::File(PathBuf::from(value)));
        }
        Selection::parse(value).map(LanguagesValue::Selection)
    }
}

impl Selection {
    /// `all`, or names separated by commas (spaces around them and empty items are
    /// ignored; no name at all is the default).
    pub fn parse(value: &str) -> Result<Selection, SelectionError> {
        let value = value.trim();
        if value == ALL {
            return Ok(Selection::All);
        }
        let mut names: Vec<String> = Vec::new();
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == ALL {
                return Err(SelectionError::AllInList(value.to_owned()));
            }
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        Ok(if names.is_empty() {
            Selection::Default
        } else {
            Selection::Adding(names)
        })
    }

    /// Checks that every name given is `offered`; `in_table` tells a row left out on
    /// this host (its toolchain missing) from a name no row has.
    pub fn check(
        &self,
        offered: &[&str],
        in_table: impl Fn(&str) -> bool,
    ) -> Result<(), SelectionError> {
        let Selection::Adding(names) = self else {
            return Ok(());
        };
        match names.iter().find(|name| !offered.contains(&name.as_str())) {
            None => Ok(()),
            Some(name) => Err(SelectionError::NotOffered {
                name: name.clone(),
                why: if in_table(name) {
                    "is not offered on this host (its toolchain is missing or failed its \
                     check: the log above says which)"
                } else {
                    "is no language of the table"
                },
                offered: offered.join(", "),
            }),
        }
    }

    /// Whether an image of this selection holds the offered language `name`, whose row
    /// comes from `origin`.
    pub fn holds(&self, name: &str, origin: Origin) -> bool {
        match self {
            _ if origin != Origin::Debian => true,
            Selection::All => true,
            Selection::Adding(names) => names.iter().any(|n| n == name),
            Selection::Default => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn adding(names: &[&str]) -> Selection {
        Selection::Adding(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn a_value_is_all_a_list_or_a_languages_file() {
        let parse = |v: &str| LanguagesValue::parse(v).unwrap();
        assert_eq!(parse("all"), LanguagesValue::Selection(Selection::All));
        assert_eq!(parse(" all "), LanguagesValue::Selection(Selection::All));
        assert_eq!(
            parse("lua, tcl,,lua,"),
            LanguagesValue::Selection(adding(&["lua", "tcl"]))
        );
        assert_eq!(parse("rust"), LanguagesValue::Selection(adding(&["rust"])));
        assert_eq!(parse(""), LanguagesValue::Selection(Selection::Default));
        assert_eq!(parse(" , "), LanguagesValue::Selection(Selection::Default));
        // The older form: a path, whether or not the file exists yet (reading it says).
        assert_eq!(
            parse("/etc/sandbox/languages.toml"),
            LanguagesValue::File("/etc/sandbox/languages.toml".into())
        );
        assert_eq!(
            parse("./langs.toml"),
            LanguagesValue::File("./langs.toml".into())
        );
        assert_eq!(
            LanguagesValue::parse("lua,all"),
            Err(SelectionError::AllInList("lua,all".into()))
        );
    }

    #[test]
    fn a_bare_name_that_is_an_existing_file_is_the_languages_file() {
        let mut file = tempfile::NamedTempFile::new_in(".").unwrap();
        file.write_all(b"remove = []\n").unwrap();
        let name = file
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert!(!name.contains('/'));
        assert_eq!(
            LanguagesValue::parse(&name).unwrap(),
            LanguagesValue::File(name.clone().into())
        );
        drop(file);
        assert_eq!(
            LanguagesValue::parse(&name).unwrap(),
            LanguagesValue::Selection(adding(&[&name]))
        );
    }

    #[test]
    fn a_list_adds_debian_s_languages_to_the_built_in_and_operator_s_ones() {
        let cases = [
            ("bash", Origin::Builtin),
            ("mine", Origin::Operator),
            ("lua", Origin::Debian),
            ("ruby", Origin::Debian),
        ];
        let held = |selection: &Selection| -> Vec<&str> {
            cases
                .iter()
                .filter(|(name, origin)| selection.holds(name, *origin))
                .map(|(name, _)| *name)
                .collect()
        };
        assert_eq!(held(&Selection::Default), ["bash", "mine"]);
        assert_eq!(held(&adding(&["lua"])), ["bash", "mine", "lua"]);
        assert_eq!(held(&adding(&["bash"])), ["bash", "mine"]);
        assert_eq!(held(&Selection::All), ["bash", "mine", "lua", "ruby"]);
    }

    #[test]
    fn a_name_not_offered_is_refused_naming_the_offered_ones() {
        let offered = ["bash", "python", "lua"];
        let in_table = |name: &str| ["bash", "python", "lua", "ocaml"].contains(&name);
        assert_eq!(adding(&["lua", "bash"]).check(&offered, in_table), Ok(()));
        assert_eq!(Selection::All.check(&offered, in_table), Ok(()));
        assert_eq!(Selection::Default.check(&offered, in_table), Ok(()));
        let err = adding(&["lua", "ocaml"])
            .check(&offered, in_table)
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("\"ocaml\" is not offered on this host"),
            "{text}"
        );
        assert!(text.contains("bash, python, lua"), "{text}");
        let err = adding(&["cobol2"]).check(&offered, in_table).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("\"cobol2\" is no language of the table"),
            "{text}"
        );
        assert!(text.contains("bash, python, lua"), "{text}");
    }
}
