//! `sandbox-runner image build|prune`: the VM image, with the toolchains of the
//! languages this runner offers. The language table is loaded as `serve` loads it (the
//! shipped rows and the languages file, `--languages-file` or `RUNNER_LANGUAGES`,
//! checked on this host), and the toolchains of the offered languages `--languages`
//! selects ([`selection`]) go to the image builder (`sandbox_image::build`) as plain data:
//! each one's Debian packages, required files and shared paths. By default the rows of
//! Debian's toolchains (`debian.toml`) stay out: the image holds the built-in languages
//! and the operator's; `--languages all` or a list of names puts Debian's in.

pub mod selection;

use crate::config::{current_package_set, ConfigError};
use crate::languages::{Context, Languages, LanguagesError};
use sandbox_image::build::{ImageError, PruneArgs, Toolchain};
use sandbox_protocol::api::defaults;
use selection::{LanguagesValue, Selection, SelectionError};
use std::path::PathBuf;

/// The `image` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ImageCommand {
    /// Build (or find in the cache) the kernel, initramfs and root image of VM
    /// sandboxes, with the toolchains of the built-in languages and the operator's
    /// (`--languages` adds those of Debian's rows, debian.toml), then prune the cache.
    Build(ImageBuildArgs),
    /// Remove cached images other than `current` that no running runner uses.
    Prune(PruneArgs),
}

/// `sandbox-runner image build` settings.
#[derive(Debug, Clone, clap::Args)]
pub struct ImageBuildArgs {
    /// The image's own settings.
    #[command(flatten)]
    pub image: sandbox_image::build::BuildArgs,
    /// Languages of Debian's toolchains (debian.toml) the image holds too: `all` (every
    /// language this host offers) or a comma list of names (`rust,lua`), added to the
    /// built-in languages and the operator's rows, which are always in. Unset: none of
    /// Debian's. (A value naming an existing file or holding a `/` is still read as the
    /// languages file, with a warning: give it as --languages-file.)
    #[arg(long, value_name = "all|NAME,...")]
    pub languages: Option<String>,
    /// The languages file `serve` is given (rows added to the shipped ones, replacing
    /// or removing them): the image holds the toolchains of the file's own rows that
    /// this host offers, with the built-in languages.
    #[arg(long, env = "RUNNER_LANGUAGES", value_name = "FILE")]
    pub languages_file: Option<PathBuf>,
}

/// Why an `image` subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageCliError {
    /// The package store could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The language table could not be made (its message names the file).
    #[error(transparent)]
    Languages(#[from] LanguagesError),
    /// `--languages` cannot be used.
    #[error(transparent)]
    Selection(#[from] SelectionError),
    /// The build or the prune failed.
    #[error(transparent)]
    Image(#[from] ImageError),
}

/// Runs an `image` subcommand.
pub fn main(command: ImageCommand) -> Result<(), ImageCliError> {
    match command {
        ImageCommand::Build(args) => {
            let toolchains = toolchains(&args)?;
            sandbox_image::build::build(&args.image, &toolchains)?;
        }
        ImageCommand::Prune(args) => sandbox_image::build::prune(&args)?,
    }
    Ok(())
}

/// The languages file and the selection `--languages` and `--languages-file` give.
fn languages_plan(args: &ImageBuildArgs) -> Result<(Option<PathBuf>, Selection), ImageCliError> {
    match args
        .languages
        .as_deref()
        .map(LanguagesValue::parse)
        .transpose()?
    {
        None => Ok((args.languages_file.clone(), Selection::Default)),
        Some(LanguagesValue::Selection(selection)) => Ok((args.languages_file.clone(), selection)),
        // The older form wins over --languages-file and RUNNER_LANGUAGES, as the flag
        // did over its variable.
        Some(LanguagesValue::File(file)) => {
            tracing::warn!(
                file = %file.display(),
                in_place_of = ?args.languages_file,
                "`--languages FILE` is read as the languages file, as before: give it as \
                 `--languages-file` (`--languages` now takes `all` or a comma list of names)"
            );
            Ok((Some(file), Selection::Default))
        }
    }
}

/// The toolchains of the offered languages the selection picks, from the table as
/// `serve` would load it with the same package store; a name not offered fails here,
/// before anything is built.
fn toolchains(args: &ImageBuildArgs) -> Result<Vec<Toolchain>, ImageCliError> {
    let (file, selection) = languages_plan(args)?;
    let set = current_package_set(&args.image.packages_dir)?;
    let context = Context {
        // Only commands run in a sandbox use it, and the image holds none of them.
        memory_mb: defaults::MEMORY_MB,
        packages: set.map(|set| set.dir),
    };
    let languages = Languages::load(file.as_deref(), &context)?;
    let rows = Languages::rows(file.as_deref())?;
    selection.check(&languages.names(), |name| {
        rows.iter().any(|row| row.name.as_str() == name)
    })?;
    Ok(in_image(&languages, &selection))
}

/// The toolchains an image of `selection` holds.
fn in_image(languages: &Languages, selection: &Selection) -> Vec<Toolchain> {
    languages
        .iter()
        .filter(|language| selection.holds(language.name().as_str(), language.origin))
        .map(|language| Toolchain {
            language: language.name().to_string(),
            debian_packages: language.debian_packages.clone(),
            requires: language.requires.clone(),
            share: language.share.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::io::Write;

    /// `image build`'s flags, as the binary parses them.
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        build: ImageBuildArgs,
    }

    fn plan(args: &[&str]) -> Result<(Option<PathBuf>, Selection), ImageCliError> {
        let cli = Cli::try_parse_from(std::iter::once("build").chain(args.iter().copied()))
            .expect("the flags parse");
        languages_plan(&cli.build)
    }

    fn held(languages: &Languages, selection: &Selection) -> Vec<String> {
        in_image(languages, selection)
            .into_iter()
            .map(|t| t.language)
            .collect()
    }

    #[test]
    fn languages_takes_a_selection_and_languages_file_the_file() {
        let (file, selection) = plan(&[]).unwrap();
        assert_eq!((file, selection), (None, Selection::Default));
        let (file, selection) = plan(&["--languages", "all"]).unwrap();
        assert_eq!((file, selection), (None, Selection::All));
        let (file, selection) =
            plan(&["--languages", "rust,lua", "--languages-file", "/etc/l.toml"]).unwrap();
        assert_eq!(file, Some(PathBuf::from("/etc/l.toml")));
        assert_eq!(
            selection,
            Selection::Adding(vec!["rust".into(), "lua".into()])
        );
        // The older form: the file, in the place of --languages-file.
        let (file, selection) = plan(&["--languages", "/etc/sandbox/languages.toml"]).unwrap();
        assert_eq!(file, Some(PathBuf::from("/etc/sandbox/languages.toml")));
        assert_eq!(selection, Selection::Default);
        let err = plan(&["--languages", "all,lua"]).unwrap_err();
        assert!(
            matches!(err, ImageCliError::Selection(SelectionError::AllInList(_))),
            "{err}"
        );
    }

    #[test]
    fn an_image_leaves_debian_s_rows_out_unless_selected_but_not_the_operator_s() {
        // Debian's perl row is offered wherever /usr/bin/perl is (every Debian system);
        // the operator's own tcl row replaces Debian's, and is the operator's.
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let row =
            "[[language]]\nname = \"tcl\"\nfile = \"main.tcl\"\nrun = [\"tclsh\", \"{file}\"]\n";
        file.write_all(row.as_bytes()).unwrap();
        let context = Context {
            memory_mb: 256,
            packages: None,
        };
        let languages = Languages::load(Some(file.path()), &context).unwrap();
        assert!(languages.get("perl").is_ok(), "{:?}", languages.names());
        let names = held(&languages, &Selection::Default);
        assert!(!names.contains(&"perl".to_owned()), "{names:?}");
        assert!(names.contains(&"tcl".to_owned()), "{names:?}");
        assert!(names.contains(&"bash".to_owned()), "{names:?}");
        let with_perl = held(&languages, &Selection::Adding(vec!["perl".into()]));
        assert_eq!(with_perl.len(), names.len() + 1, "{with_perl:?}");
        assert!(with_perl.contains(&"perl".to_owned()), "{with_perl:?}");
        let all = held(&languages, &Selection::All);
        assert_eq!(all, languages.names(), "`all` is every offered language");
    }
}
