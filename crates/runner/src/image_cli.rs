//! `sandbox-runner image build|prune`: the VM image, with the toolchains of the
//! languages this runner offers. The language table is loaded as `serve` loads it (the
//! shipped rows and `RUNNER_LANGUAGES`, checked on this host), and each offered
//! language's Debian packages, required files and shared paths go to the image builder
//! (`sandbox_image::build`) as plain data. The rows of Debian's toolchains
//! (`debian.toml`) stay out of the image: it holds the built-in languages and the
//! operator's.

use crate::config::{current_package_set, ConfigError};
use crate::languages::{Context, Languages, LanguagesError, Origin};
use sandbox_image::build::{ImageError, PruneArgs, Toolchain};
use sandbox_protocol::api::defaults;
use std::path::PathBuf;

/// The `image` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ImageCommand {
    /// Build (or find in the cache) the kernel, initramfs and root image of VM
    /// sandboxes, with the toolchains of the languages this runner offers (but those of
    /// Debian's rows, debian.toml), then prune the cache.
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
    /// The languages file `serve` is given (rows added to the shipped ones, replacing
    /// or removing them): the image holds the toolchains of the built-in languages and
    /// of the file's own rows that this host offers.
    #[arg(long, env = "RUNNER_LANGUAGES")]
    pub languages: Option<PathBuf>,
}

/// Why an `image` subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageCliError {
    /// The package store could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The language table could not be made.
    #[error("RUNNER_LANGUAGES: {0}")]
    Languages(#[from] LanguagesError),
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

/// The offered languages' toolchains, from the table as `serve` would load it with the
/// same package store.
fn toolchains(args: &ImageBuildArgs) -> Result<Vec<Toolchain>, ImageCliError> {
    let set = current_package_set(&args.image.packages_dir)?;
    let context = Context {
        // Only commands run in a sandbox use it, and the image holds none of them.
        memory_mb: defaults::MEMORY_MB,
        packages: set.map(|set| set.dir),
    };
    let languages = Languages::load(args.languages.as_deref(), &context)?;
    Ok(in_image(&languages))
}

/// The toolchains an image holds: every offered language's but those of Debian's rows.
fn in_image(languages: &Languages) -> Vec<Toolchain> {
    languages
        .iter()
        .filter(|language| language.origin != Origin::Debian)
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
    use std::io::Write;

    #[test]
    fn an_image_leaves_debian_s_rows_out_but_not_the_operator_s() {
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
        let names: Vec<String> = in_image(&languages)
            .into_iter()
            .map(|t| t.language)
            .collect();
        assert!(!names.contains(&"perl".to_owned()), "{names:?}");
        assert!(names.contains(&"tcl".to_owned()), "{names:?}");
        assert!(names.contains(&"bash".to_owned()), "{names:?}");
    }
}
