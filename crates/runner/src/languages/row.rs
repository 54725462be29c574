//! A row of the language table as written (TOML), its checks, and what it becomes: the
//! agent's [`Recipe`] and the [`LanguageInfo`] that `/health` lists.

use super::{Context, Language, LanguagesError};
use sandbox_jail::layout::PACKAGES;
use sandbox_protocol::language::{
    LanguageInfo, Loader, Recipe, BUILD, FILE, LOADER_FILE, LOADER_SOURCE,
};
use sandbox_protocol::Lang;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Stands for the package set's folder (on the host in `requires` and `version`, in the
/// sandbox in commands).
pub const PACKAGES_PLACEHOLDER: &str = "{packages}";
/// Stands for the sandbox's memory in MiB.
const MEMORY_PLACEHOLDER: &str = "{memory_mb}";
/// A compile step's time when a row gives none, ms.
const DEFAULT_COMPILE_TIMEOUT_MS: u64 = 30_000;
/// The longest compile step a row may ask for, ms.
const MAX_COMPILE_TIMEOUT_MS: u64 = 600_000;
/// The most memory a row may ask for its sandboxes, MiB.
const MAX_MEMORY_MB: u64 = 65_536;

/// A languages file: rows to add or replace (by name), and shipped names to remove.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanguageFile {
    /// `false`: the rows of Debian's toolchains (`debian.toml`) are left out, so that
    /// only the built-in rows and the file's own are offered.
    #[serde(default)]
    pub debian: Option<bool>,
    /// Names of rows to take out (shipped ones, usually).
    #[serde(default)]
    pub remove: Vec<Lang>,
    /// Rows: one with the name of an existing row replaces it, others are added.
    #[serde(default)]
    pub language: Vec<Row>,
}

/// Where a row comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Origin {
    /// `builtin.toml`: the eight languages every runner and VM image has.
    Builtin,
    /// `debian.toml`: Debian's toolchains, offered where the host has them; a VM image
    /// holds them only when asked to.
    Debian,
    /// The operator's file (`RUNNER_LANGUAGES`).
    #[default]
    Operator,
}

/// One language, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    /// Where it comes from (set by the loader, never written in a file).
    #[serde(skip)]
    pub origin: Origin,
    /// The name a run's `lang` gives (and the tool `run_<name>`).
    pub name: Lang,
    /// The program's file name in the home folder.
    pub file: String,
    /// The compile command (none: not compiled).
    #[serde(default)]
    pub compile: Vec<String>,
    /// The run command (none: the loader runs every program).
    #[serde(default)]
    pub run: Vec<String>,
    /// Variables added to the environment of both commands.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// How long a compile may take, ms (default 30 s for compiled languages).
    #[serde(default)]
    pub compile_timeout_ms: Option<u64>,
    /// The memory of its sandboxes (compile and program), MiB, where its toolchain needs
    /// more than every sandbox has (less is ignored: a row cannot lower the limit).
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// A warm start: which of the agent's loaders, and the command that starts it.
    #[serde(default)]
    pub loader: Option<Loader>,
    /// Host paths the toolchain needs; a missing one leaves the language out.
    #[serde(default)]
    pub requires: Vec<String>,
    /// Host paths outside the system folders (`/usr`, `/lib`, ...) that sandboxes are
    /// shown read-only at the same place: a toolchain's configuration under `/etc`.
    #[serde(default)]
    pub share: Vec<PathBuf>,
    /// A command that prints the toolchain's version (its first line is kept).
    #[serde(default)]
    pub version: Vec<String>,
    /// The Debian packages a VM image installs for it.
    #[serde(default)]
    pub debian_packages: Vec<String>,
    /// How it runs, in words, for tool descriptions (default: the commands).
    #[serde(default)]
    pub describe_run: Option<String>,
    /// How it compiles, in words, for tool descriptions (default: the compile command;
    /// for a row whose compile is a `sh -c` script).
    #[serde(default)]
    pub describe_compile: Option<String>,
}

impl LanguageFile {
    /// Parses and checks a file's text.
    pub fn parse(text: &str, path: &Path) -> Result<LanguageFile, LanguagesError> {
        let invalid = |message: String| LanguagesError::Invalid {
            path: path.to_owned(),
            message,
        };
        let file: LanguageFile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        for row in &file.language {
            row.check()
                .map_err(|m| invalid(format!("language {}: {m}", row.name)))?;
        }
        let mut names: Vec<&str> = file.language.iter().map(|r| r.name.as_str()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(invalid(format!("language {} is given twice", pair[0])));
        }
        Ok(file)
    }

    /// The file's rows, marked as coming from `origin`.
    pub fn rows_from(self, origin: Origin) -> Vec<Row> {
        let mark = |row: Row| Row { origin, ..row };
        self.language.into_iter().map(mark).collect()
    }

    /// Changes `rows` as the file says.
    pub fn apply(self, rows: &mut Vec<Row>, path: &Path) -> Result<(), LanguagesError> {
        if self.debian == Some(false) {
            rows.retain(|row| row.origin != Origin::Debian);
        }
        for name in &self.remove {
            let before = rows.len();
            rows.retain(|row| &row.name != name);
            if rows.len() == before {
                return Err(LanguagesError::Invalid {
                    path: path.to_owned(),
                    message: format!("remove: there is no language {name}"),
                });
            }
        }
        for row in self.language {
            match rows.iter_mut().find(|r| r.name == row.name) {
                Some(existing) => *existing = row,
                None => rows.push(row),
            }
        }
        Ok(())
    }
}

impl Row {
    /// What makes a row unusable whatever the host has.
    fn check(&self) -> Result<(), String> {
        let plain = !self.file.is_empty()
            && !self.file.contains('/')
            && !self.file.contains('\0')
            && self.file != "."
            && self.file != "..";
        if !plain {
            return Err(format!("file {:?} must be a plain file name", self.file));
        }
        if self.run.is_empty() && self.loader.is_none() {
            return Err("needs a run command or a loader".into());
        }
        for (what, command) in [("compile", &self.compile), ("run", &self.run)] {
            if command.iter().any(|arg| arg.contains('\0')) {
                return Err(format!("{what}: an argument holds a NUL byte"));
            }
        }
        if let Some(loader) = &self.loader {
            let stands = |arg: &String| arg.contains(LOADER_SOURCE) || arg.contains(LOADER_FILE);
            if !loader.command.iter().any(stands) {
                return Err(format!(
                    "the loader's command must hold {LOADER_SOURCE} or {LOADER_FILE}"
                ));
            }
        }
        if let Some(path) = self.share.iter().find(|p| !shareable(p)) {
            return Err(format!(
                "share: {} must be an absolute path without `..`, outside /proc, /sys, \
                 /dev, /tmp, /home, /run and /opt",
                path.display()
            ));
        }
        if let Some(key) = self
            .env
            .keys()
            .find(|k| k.is_empty() || k.contains(['=', '\0']))
        {
            return Err(format!("env: {key:?} is not a variable name"));
        }
        if self
            .compile_timeout_ms
            .is_some_and(|t| t == 0 || t > MAX_COMPILE_TIMEOUT_MS)
        {
            return Err(format!(
                "compile_timeout_ms must be between 1 and {MAX_COMPILE_TIMEOUT_MS}"
            ));
        }
        if self.memory_mb.is_some_and(|m| m == 0 || m > MAX_MEMORY_MB) {
            return Err(format!("memory_mb must be between 1 and {MAX_MEMORY_MB}"));
        }
        Ok(())
    }

    /// Whether a program of it is compiled before it runs.
    fn compiled(&self) -> bool {
        !self.compile.is_empty() || self.loader.as_ref().is_some_and(|l| l.kind.compiles())
    }

    /// A host path it requires or a version command's argument, with `{packages}`
    /// standing for the set's folder on the host (`None`: no set, so not available).
    pub fn on_host(arg: &str, context: &Context) -> Option<String> {
        if !arg.contains(PACKAGES_PLACEHOLDER) {
            return Some(arg.to_owned());
        }
        let dir = context.packages.as_ref()?;
        Some(arg.replace(PACKAGES_PLACEHOLDER, &dir.to_string_lossy()))
    }

    /// The offered language, its toolchain's version being `version`.
    pub fn language(&self, version: String, context: &Context) -> Language {
        let memory_mb = self.memory_mb.unwrap_or(0).max(context.memory_mb);
        let fill = |arg: &String| {
            arg.replace(MEMORY_PLACEHOLDER, &memory_mb.to_string())
                .replace(PACKAGES_PLACEHOLDER, PACKAGES)
        };
        let fill_all = |args: &[String]| args.iter().map(fill).collect::<Vec<_>>();
        let compile_timeout_ms = match self.compiled() {
            true => self
                .compile_timeout_ms
                .unwrap_or(DEFAULT_COMPILE_TIMEOUT_MS),
            false => 0,
        };
        let recipe = Recipe {
            file: self.file.clone(),
            compile: fill_all(&self.compile),
            run: fill_all(&self.run),
            env: self.env.iter().map(|(k, v)| (k.clone(), fill(v))).collect(),
            compile_timeout_ms,
            loader: self.loader.as_ref().map(|l| Loader {
                kind: l.kind,
                command: fill_all(&l.command),
            }),
            memory_mb: (memory_mb > context.memory_mb).then_some(memory_mb),
        };
        // As a caller would type it in the program's folder: the build folder is the
        // working one, the memory the sandbox's.
        let shown = |args: &[String]| {
            args.iter()
                .map(|arg| {
                    fill(arg)
                        .replace(FILE, &self.file)
                        .replace(&format!("{BUILD}/"), "./")
                        .replace(BUILD, ".")
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let info = LanguageInfo {
            name: self.name.clone(),
            version,
            file: self.file.clone(),
            compile: (!self.compile.is_empty()).then(|| {
                self.describe_compile
                    .clone()
                    .unwrap_or_else(|| shown(&self.compile))
            }),
            run: self
                .describe_run
                .clone()
                .unwrap_or_else(|| shown(&self.run)),
            compile_timeout_ms,
            warm: self.loader.is_some(),
            keeps_state: self.loader.as_ref().is_some_and(|l| l.kind.resident()),
            memory_mb: Some(memory_mb),
        };
        Language {
            origin: self.origin,
            recipe,
            info,
            debian_packages: self.debian_packages.clone(),
            requires: self
                .requires
                .iter()
                .filter_map(|path| Row::on_host(path, context))
                .map(PathBuf::from)
                .collect(),
            share: self.share.clone(),
        }
    }
}

/// Whether a path may be shared into sandboxes: absolute, plain, and not where the
/// sandbox has its own (kernel file systems, its tmpfs folders, the package set).
fn shareable(path: &Path) -> bool {
    const OWN: [&str; 7] = ["/proc", "/sys", "/dev", "/tmp", "/home", "/run", "/opt"];
    let plain = path.is_absolute()
        && path.components().count() > 1
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    plain && !OWN.iter().any(|own| path.starts_with(own))
}
