//! Languages as data: the table of languages a runner offers.
//!
//! A row says how a program of one language runs (its file name, an optional compile
//! command, the run command, an optional warm-start loader), what it needs on the host
//! (`requires`: the toolchain's paths), how the toolchain tells its version, and which
//! Debian packages a VM image needs for it. The built-in rows (`builtin.toml`) are
//! bash, python, node, typescript, c, cpp, go and java; the rows of Debian's toolchains
//! (`debian.toml`: rust, ruby, php, haskell, ...) follow them, offered wherever the host
//! has the toolchain; an operator's file (`RUNNER_LANGUAGES`) adds rows, replaces shipped
//! ones by name, removes them, or leaves out Debian's (`debian = false`).
//!
//! At start every row is checked ([`probe`]): one whose toolchain is missing, or whose
//! version command fails, is left out with a logged reason, never offered broken.
//!
//! - `mod.rs`: the table and its lookups;
//! - `row.rs`: a row as written, and how it becomes the agent's recipe;
//! - `probe.rs`: the checks on the host.

mod probe;
mod row;

pub use row::{LanguageFile, Origin, Row};

use sandbox_protocol::language::{LanguageInfo, Recipe};
use sandbox_protocol::Lang;
use std::path::{Path, PathBuf};

/// The built-in rows.
const BUILTIN: &str = include_str!("builtin.toml");
/// The rows of Debian's toolchains.
const DEBIAN: &str = include_str!("debian.toml");

/// Why the table could not be made (the runner refuses to start).
#[derive(Debug, thiserror::Error)]
pub enum LanguagesError {
    /// The operator's file could not be read.
    #[error("reading the languages file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The operator's file (or a built-in row) is not a valid table.
    #[error("the languages file {path}: {message}")]
    Invalid {
        /// The file (`builtin` for the built-in rows).
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// No row is left to offer.
    #[error("no language can be offered: {0}")]
    Empty(String),
}

/// A language name the runner does not offer.
#[derive(Debug, thiserror::Error)]
#[error("unknown language {name:?}: this runner offers {offered}")]
pub struct UnknownLanguage {
    /// The name asked for.
    pub name: String,
    /// The offered names, comma-separated.
    pub offered: String,
}

/// What the table's placeholders stand for on this runner.
#[derive(Debug, Clone)]
pub struct Context {
    /// The memory of a sandbox, MiB (`{memory_mb}` in commands).
    pub memory_mb: u64,
    /// The package set's folder on the host (`{packages}` in `requires` and version
    /// commands; in commands run in the sandbox it is `/opt/packages`).
    pub packages: Option<PathBuf>,
}

/// One offered language.
#[derive(Debug, Clone)]
pub struct Language {
    /// Where its row comes from.
    pub origin: Origin,
    /// How the agent runs it.
    pub recipe: Recipe,
    /// How `/health` lists it.
    pub info: LanguageInfo,
    /// The Debian packages a VM image needs for it.
    pub debian_packages: Vec<String>,
    /// The host paths its toolchain requires (checked when the table was loaded; a VM
    /// image includes the packages that own them).
    pub requires: Vec<PathBuf>,
    /// Host paths its sandboxes are shown read-only (beyond the system folders).
    pub share: Vec<PathBuf>,
}

impl Language {
    /// Its name.
    pub fn name(&self) -> &Lang {
        &self.info.name
    }
}

/// The languages a runner offers, in table order.
#[derive(Debug, Clone)]
pub struct Languages {
    offered: Vec<Language>,
    /// The host paths the offered languages share into sandboxes, sorted, once.
    shared: Vec<PathBuf>,
}

impl Languages {
    /// The shipped rows (built-in, then Debian's) and the operator's `file`, checked on
    /// this host: rows whose toolchain is missing are left out (logged).
    pub fn load(file: Option<&Path>, context: &Context) -> Result<Languages, LanguagesError> {
        let rows = Self::rows(file)?;
        let mut offered = Vec::new();
        let mut missing = Vec::new();
        for (row, probed) in rows.iter().zip(probe::check_all(&rows, context)) {
            match probed {
                Ok(version) => offered.push(row.language(version, context)),
                Err(reason) => {
                    tracing::warn!(language = %row.name, %reason, "language left out");
                    missing.push(format!("{}: {reason}", row.name));
                }
            }
        }
        if offered.is_empty() {
            return Err(LanguagesError::Empty(missing.join("; ")));
        }
        let names: Vec<&str> = offered.iter().map(|l| l.name().as_str()).collect();
        tracing::info!(languages = %names.join(", "), "languages offered");
        Ok(Languages::of(offered))
    }

    /// The rows as written: the built-in ones and Debian's, changed by the operator's
    /// file.
    pub fn rows(file: Option<&Path>) -> Result<Vec<Row>, LanguagesError> {
        let mut rows =
            LanguageFile::parse(BUILTIN, Path::new("builtin"))?.rows_from(Origin::Builtin);
        let debian = LanguageFile::parse(DEBIAN, Path::new("debian"))?;
        rows.extend(debian.rows_from(Origin::Debian));
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| LanguagesError::Read {
                path: path.to_owned(),
                source,
            })?;
            LanguageFile::parse(&text, path)?.apply(&mut rows, path)?;
        }
        Ok(rows)
    }

    /// Leaves out the languages `present` does not name (those a VM image lacks the
    /// toolchain of), saying so in the log; an error when none is left.
    pub fn keep_only(&mut self, present: &[String], place: &str) -> Result<(), LanguagesError> {
        let not_in = format!("not in {place}");
        self.retain(
            |l| (!present.iter().any(|p| p == l.name().as_str())).then(|| not_in.clone()),
            &format!("{place} holds none of them"),
        )
    }

    /// Leaves out the languages whose row asks for more memory than every sandbox has:
    /// on the vm backend, whose guests get their memory when they boot, before anyone
    /// knows the language of the run they will take.
    pub fn without_own_memory(&mut self) -> Result<(), LanguagesError> {
        self.retain(
            |l| {
                l.recipe.memory_mb.map(|mb| {
                    format!("its row asks for {mb} MiB, and a VM's memory is set when it boots")
                })
            },
            "every one asks for memory of its own, which VMs cannot have",
        )
    }

    /// Adds `env` to every language's programs' environment (the proxy's variables, where
    /// the operator opened hosts): what each program, a session's resident interpreter
    /// and what a sandbox prepares ahead start with.
    pub fn add_env(&mut self, env: &[(&str, String)]) {
        for language in &mut self.offered {
            let vars = env.iter().map(|(k, v)| ((*k).to_owned(), v.clone()));
            language.recipe.env.extend(vars);
        }
    }

    /// Keeps the languages `left_out` gives no reason for, logging the others' reasons;
    /// `if_none` says why when none is kept.
    fn retain(
        &mut self,
        left_out: impl Fn(&Language) -> Option<String>,
        if_none: &str,
    ) -> Result<(), LanguagesError> {
        let mut kept = Vec::new();
        for language in std::mem::take(&mut self.offered) {
            match left_out(&language) {
                Some(reason) => {
                    tracing::warn!(language = %language.name(), %reason, "language left out")
                }
                None => kept.push(language),
            }
        }
        if kept.is_empty() {
            return Err(LanguagesError::Empty(if_none.to_owned()));
        }
        *self = Languages::of(kept);
        Ok(())
    }

    /// The table of `offered`, with the paths they share worked out.
    fn of(offered: Vec<Language>) -> Languages {
        let mut shared: Vec<PathBuf> = offered.iter().flat_map(|l| l.share.clone()).collect();
        shared.sort();
        shared.dedup();
        Languages { offered, shared }
    }

    /// The language called `name`, or why not (naming those offered).
    pub fn get(&self, name: &str) -> Result<&Language, UnknownLanguage> {
        self.offered
            .iter()
            .find(|l| l.name().as_str() == name)
            .ok_or_else(|| UnknownLanguage {
                name: name.to_owned(),
                offered: self.names().join(", "),
            })
    }

    /// The offered names, in table order.
    pub fn names(&self) -> Vec<&str> {
        self.offered.iter().map(|l| l.name().as_str()).collect()
    }

    /// Every offered language.
    pub fn iter(&self) -> impl Iterator<Item = &Language> {
        self.offered.iter()
    }

    /// How `/health` lists them.
    pub fn infos(&self) -> Vec<LanguageInfo> {
        self.offered.iter().map(|l| l.info.clone()).collect()
    }

    /// The host paths every sandbox is shown for the offered languages.
    pub fn shared_paths(&self) -> &[PathBuf] {
        &self.shared
    }

    /// The languages with a warm-start loader, in table order: those a warm sandbox
    /// can be prepared for.
    pub fn warm(&self) -> Vec<Lang> {
        self.offered
            .iter()
            .filter(|l| l.recipe.loader.is_some())
            .map(|l| l.name().clone())
            .collect()
    }
}

#[cfg(test)]
mod tests;
