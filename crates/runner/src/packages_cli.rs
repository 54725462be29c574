//! `sandbox-runner packages build`: installs a package set on this host (with its pip
//! and npm configuration, from the index they reach: an operator's mirror in
//! production) into the package store, and points the store's `current` at it. `serve`
//! shows `current` read-only in every sandbox; `image build` copies it into VM images.

use sandbox_packages::{build, human, BuildSpec, Store, DEFAULT_NODE, DEFAULT_PYTHON};
use std::path::PathBuf;
use std::time::Duration;

/// The `packages` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum PackagesCommand {
    /// Build a package set (by default the data stack: numpy, pandas, matplotlib, ...)
    /// and make it the current one; a set already built is only made current.
    Build(BuildArgs),
}

/// `sandbox-runner packages build` settings.
#[derive(Debug, Clone, clap::Args)]
pub struct BuildArgs {
    /// The package store.
    #[arg(long, env = "RUNNER_PACKAGES_DIR", default_value = sandbox_packages::DEFAULT_STORE)]
    pub packages_dir: PathBuf,
    /// A Python requirement (`pandas`, `numpy>=2`); repeat for more. Default: the
    /// default set.
    #[arg(long = "python", value_name = "REQUIREMENT")]
    pub python: Vec<String>,
    /// A requirements file (one requirement a line; `#` comments), added to --python.
    #[arg(long, value_name = "FILE")]
    pub requirements: Option<PathBuf>,
    /// An npm package (`lodash`, `zod@3`); repeat for more. Default: the default set.
    #[arg(long = "npm", value_name = "PACKAGE")]
    pub npm: Vec<String>,
    /// No npm packages.
    #[arg(long, conflicts_with = "npm")]
    pub no_npm: bool,
    /// The Python the sandboxes run (wheels are chosen for it).
    #[arg(long, default_value = "/usr/bin/python3")]
    pub interpreter: PathBuf,
    /// How long the whole build may take, in seconds.
    #[arg(long, default_value_t = 1800)]
    pub timeout_s: u64,
}

/// Runs a `packages` subcommand.
pub async fn main(command: PackagesCommand) -> anyhow::Result<()> {
    match command {
        PackagesCommand::Build(args) => build_set(args).await,
    }
}

async fn build_set(args: BuildArgs) -> anyhow::Result<()> {
    let mut python = args.python.clone();
    if let Some(file) = &args.requirements {
        let text = std::fs::read_to_string(file)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
        python.extend(requirement_lines(&text));
    }
    if python.is_empty() && args.requirements.is_none() {
        python = DEFAULT_PYTHON.iter().map(|s| s.to_string()).collect();
    }
    let node = match (args.no_npm, args.npm.is_empty()) {
        (true, _) => Vec::new(),
        (false, true) => DEFAULT_NODE.iter().map(|s| s.to_string()).collect(),
        (false, false) => args.npm.clone(),
    };
    let spec = BuildSpec {
        python,
        node,
        interpreter: args.interpreter.clone(),
        timeout: Duration::from_secs(args.timeout_s),
        ..BuildSpec::default()
    };
    let store = Store::open(&args.packages_dir)?;
    eprintln!("packages: store {}", store.root().display());
    let mut progress = |step: sandbox_packages::Progress| eprintln!("packages: {step}");
    let report = build(&store, &spec, &mut progress).await?;
    println!(
        "package set {}{}: {} python packages ({}), {} npm packages ({}), in {:.1} s",
        report.key,
        if report.cached { " (cached)" } else { "" },
        report.python_packages,
        human(report.python_bytes),
        report.node_packages,
        human(report.node_bytes),
        report.elapsed.as_secs_f64(),
    );
    println!("current: {}", report.set.dir.display());
    Ok(())
}

/// The requirements of a requirements file: blank lines and comments dropped.
fn requirement_lines(text: &str) -> impl Iterator<Item = String> + '_ {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_requirements_file_drops_comments_and_blank_lines() {
        let lines: Vec<String> =
            super::requirement_lines("# data\nnumpy>=2  # fast\n\n pandas\n").collect();
        assert_eq!(lines, ["numpy>=2", "pandas"]);
    }
}
