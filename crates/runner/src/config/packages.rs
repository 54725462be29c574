//! The packages' settings: the package set every sandbox sees, the modules a warm
//! Python interpreter imports, and the policy for a program's inline dependencies.

use super::{check, ConfigError};
use sandbox_packages::Policy;
use std::path::PathBuf;
use std::time::Duration;

/// The default warm imports: what a data-analysis program imports first.
pub const DEFAULT_WARM_IMPORTS: &str = "numpy,pandas,matplotlib.pyplot";

/// Packages' settings (see docs/packages.md).
#[derive(Debug, Clone, clap::Args)]
pub struct PackageArgs {
    /// The package store (made by `sandbox-runner packages build`); its `current` set
    /// is shown read-only in every sandbox. Without one, sandboxes have the standard
    /// library only.
    #[arg(long, env = "RUNNER_PACKAGES_DIR", default_value = sandbox_packages::DEFAULT_STORE)]
    pub packages_dir: PathBuf,
    /// Modules a warm Python interpreter imports while it waits, comma-separated (empty:
    /// none). Each costs memory in every warm sandbox, counted in its memory limit.
    #[arg(long, env = "RUNNER_WARM_IMPORTS", default_value = DEFAULT_WARM_IMPORTS)]
    pub warm_imports: String,
    /// Refuse programs that declare inline dependencies (PEP 723), rather than resolve
    /// them on the host.
    #[arg(long, env = "RUNNER_NO_INLINE_DEPS")]
    pub no_inline_deps: bool,
    /// The only packages inline dependencies may bring (comma-separated names; empty:
    /// any not denied). Checked against every package resolved, not only those named.
    #[arg(long, env = "RUNNER_DEPS_ALLOW", default_value = "")]
    pub deps_allow: String,
    /// Packages inline dependencies may not bring (comma-separated names).
    #[arg(long, env = "RUNNER_DEPS_DENY", default_value = "")]
    pub deps_deny: String,
    /// The most one program's inline dependencies may take installed, in MiB.
    #[arg(long, env = "RUNNER_DEPS_MAX_MB", default_value_t = 256)]
    pub deps_max_mb: u64,
    /// How long resolving and installing one program's inline dependencies may take,
    /// in milliseconds (apart from the run's own timeout).
    #[arg(long, env = "RUNNER_DEPS_TIMEOUT_MS", default_value_t = 120_000)]
    pub deps_timeout_ms: u64,
}

impl PackageArgs {
    /// The warm imports, checked: each a dotted Python module name.
    pub fn warm_imports(&self) -> Result<Vec<String>, ConfigError> {
        let modules = names(&self.warm_imports);
        for module in &modules {
            let valid = module.split('.').all(|part| {
                !part.is_empty()
                    && !part.starts_with(|c: char| c.is_ascii_digit())
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
            check(
                valid,
                "RUNNER_WARM_IMPORTS",
                "comma-separated Python module names",
                module,
            )?;
        }
        Ok(modules)
    }

    /// The inline dependencies' policy, or None when they are refused.
    pub fn deps_policy(&self) -> Result<Option<Policy>, ConfigError> {
        check(
            (1..=64 * 1024).contains(&self.deps_max_mb),
            "RUNNER_DEPS_MAX_MB",
            "between 1 and 65536",
            self.deps_max_mb,
        )?;
        check(
            (1_000..=3_600_000).contains(&self.deps_timeout_ms),
            "RUNNER_DEPS_TIMEOUT_MS",
            "between 1000 and 3600000",
            self.deps_timeout_ms,
        )?;
        if self.no_inline_deps {
            return Ok(None);
        }
        let allow = names(&self.deps_allow);
        Ok(Some(Policy {
            allow: (!allow.is_empty()).then_some(allow),
            deny: names(&self.deps_deny),
            max_bytes: self.deps_max_mb * 1024 * 1024,
            timeout: Duration::from_millis(self.deps_timeout_ms),
        }))
    }
}

/// The non-empty, trimmed items of a comma-separated list.
fn names(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        packages: PackageArgs,
    }

    fn parse(args: &[&str]) -> PackageArgs {
        Cli::parse_from(std::iter::once("x").chain(args.iter().copied())).packages
    }

    #[test]
    fn warm_imports_are_module_names_and_may_be_none() {
        let default = parse(&[]).warm_imports().unwrap();
        assert_eq!(default, ["numpy", "pandas", "matplotlib.pyplot"]);
        assert!(parse(&["--warm-imports", ""])
            .warm_imports()
            .unwrap()
            .is_empty());
        for bad in ["os;import sys", "a..b", "1x", "x y"] {
            assert!(
                parse(&["--warm-imports", bad]).warm_imports().is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_policy_reads_its_lists_and_can_be_off() {
        let policy = parse(&["--deps-allow", "six, humanize", "--deps-deny", "torch"])
            .deps_policy()
            .unwrap()
            .unwrap();
        assert_eq!(policy.allow.unwrap(), ["six", "humanize"]);
        assert_eq!(policy.deny, ["torch"]);
        assert!(parse(&["--no-inline-deps"])
            .deps_policy()
            .unwrap()
            .is_none());
        assert!(parse(&["--deps-max-mb", "0"]).deps_policy().is_err());
    }
}
