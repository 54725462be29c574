//! The toolchains the image holds: those of the languages the runner offers, given by
//! the runner (which reads its language table and checks it on this machine) as plain
//! data, so that this crate knows nothing of language rows.
//!
//! Each toolchain's Debian packages are the installed ones its row names, and those that
//! own the files its toolchain requires: a row may name a meta package the machine went
//! without (`default-jdk-headless` where `openjdk-17-jdk-headless` was installed
//! directly), and what the runner checked is what the image must hold.

use super::{dpkg, ImageError};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// One offered language's toolchain, as the image needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// The language's name (for messages and `image.json`).
    pub language: String,
    /// The Debian packages its row names.
    pub debian_packages: Vec<String>,
    /// The files on this machine the toolchain requires (`/usr/bin/javac`).
    pub requires: Vec<PathBuf>,
    /// Paths outside the system folders its sandboxes are shown read-only
    /// (`/etc/java-17-openjdk`): copied into the image, and listed for the guest.
    pub share: Vec<PathBuf>,
}

/// The packages the image starts from: `base` (which must all be installed) and, for
/// each toolchain, the installed packages its row names and those owning the files it
/// requires. A toolchain with neither cannot be put in the image.
pub fn roots(
    installed: &dpkg::Installed,
    base: &[&str],
    toolchains: &[Toolchain],
) -> Result<BTreeSet<String>, ImageError> {
    let missing: Vec<String> = base
        .iter()
        .filter(|name| !installed.meets(name))
        .map(|name| name.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(ImageError::BaseNotInstalled { packages: missing });
    }
    let mut roots: BTreeSet<String> = base.iter().map(|name| name.to_string()).collect();
    for toolchain in toolchains {
        let (named, absent): (Vec<&String>, Vec<&String>) = toolchain
            .debian_packages
            .iter()
            .partition(|name| installed.meets(name));
        let owners = dpkg::owners(&toolchain.requires)?;
        if named.is_empty() && owners.is_empty() {
            return Err(ImageError::NoToolchain {
                language: toolchain.language.clone(),
                packages: toolchain.debian_packages.clone(),
            });
        }
        if !absent.is_empty() {
            eprintln!(
                "image: {}: {} not installed; its toolchain's files are those of {}",
                toolchain.language,
                listed(absent.iter().copied()),
                listed(owners.iter()),
            );
        }
        roots.extend(named.into_iter().cloned());
        roots.extend(owners);
    }
    Ok(roots)
}

/// The paths the toolchains share, sorted, each once; each must be absolute and fit on
/// a line of the image's list.
pub fn shared_paths(toolchains: &[Toolchain]) -> Result<Vec<PathBuf>, ImageError> {
    let mut paths: Vec<PathBuf> = toolchains.iter().flat_map(|t| t.share.clone()).collect();
    paths.sort();
    paths.dedup();
    match paths
        .iter()
        .find(|p| !p.is_absolute() || p.to_string_lossy().contains('\n'))
    {
        Some(bad) => Err(ImageError::BadSharedPath(bad.clone())),
        None => Ok(paths),
    }
}

fn listed<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names.map(String::as_str).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toolchain(share: &[&str]) -> Toolchain {
        Toolchain {
            language: "java".into(),
            debian_packages: Vec::new(),
            requires: Vec::new(),
            share: share.iter().map(PathBuf::from).collect(),
        }
    }

    #[test]
    fn shared_paths_are_listed_once_and_must_be_absolute_lines() {
        let paths = shared_paths(&[
            toolchain(&["/etc/java-17-openjdk", "/etc/b"]),
            toolchain(&["/etc/b"]),
        ])
        .unwrap();
        assert_eq!(
            paths,
            [
                PathBuf::from("/etc/b"),
                PathBuf::from("/etc/java-17-openjdk")
            ]
        );
        assert!(shared_paths(&[toolchain(&["etc/x"])]).is_err());
        assert!(shared_paths(&[toolchain(&["/etc/x\n/etc/y"])]).is_err());
    }

    #[test]
    fn a_toolchain_needs_an_installed_package_and_the_base_must_be_installed() {
        let installed = dpkg::Installed::parse(
            "bash\tinstalled\t\t\t\n\
             gcc\tinstalled\tc-compiler\t\t\n\
             default-jdk-headless\tconfig-files\t\t\t\n",
        );
        let mut c = toolchain(&[]);
        c.debian_packages = vec!["gcc".into(), "libc6-dev".into()];
        let found = roots(&installed, &["bash"], &[c]).unwrap();
        assert_eq!(found.into_iter().collect::<Vec<_>>(), ["bash", "gcc"]);
        let mut java = toolchain(&[]);
        java.debian_packages = vec!["default-jdk-headless".into()];
        let err = roots(&installed, &["bash"], &[java]).unwrap_err();
        assert!(
            matches!(&err, ImageError::NoToolchain { language, .. } if language == "java"),
            "{err}"
        );
        let err = roots(&installed, &["bash", "nodejs"], &[]).unwrap_err();
        assert!(
            matches!(&err, ImageError::BaseNotInstalled { packages } if packages == &["nodejs"]),
            "{err}"
        );
    }
}
