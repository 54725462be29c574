//! This machine's Debian packages, as the root file system takes them: the installed
//! packages and their dependencies (`dpkg-query -W`), the closure of a set of them, the
//! packages that own given files (`dpkg-query -S`), their files (`dpkg -L`), and the
//! links of the alternatives system, which no package lists (`/usr/bin/java` ->
//! `/etc/alternatives/java` -> the JDK's `java`).

use super::{run, ImageError};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `update-alternatives` keeps its groups (one file per group).
const ALTERNATIVES_ADMIN: &str = "/var/lib/dpkg/alternatives";
/// Where the alternatives system's links point (`/etc/alternatives/<name>`).
const ALTERNATIVES_LINKS: &str = "/etc/alternatives";
/// What `dpkg-query -W` prints of each package: its name with its architecture where
/// dpkg needs it, its state, what it provides, pre-depends on and depends on.
const QUERY_FORMAT: &str =
    "${binary:Package}\t${db:Status-Status}\t${Provides}\t${Pre-Depends}\t${Depends}\n";

/// One installed package.
#[derive(Debug, Default)]
struct Package {
    /// How `dpkg -L` names it (`libc6:amd64`; several when more than one architecture
    /// of it is installed).
    ids: Vec<String>,
    /// Its Pre-Depends and Depends: each a list of alternatives (`a | b`).
    depends: Vec<Vec<String>>,
}

/// The installed packages, by name.
#[derive(Debug, Default)]
pub struct Installed {
    packages: BTreeMap<String, Package>,
    /// Virtual package -> the installed packages that provide it.
    providers: BTreeMap<String, Vec<String>>,
}

impl Installed {
    /// Reads dpkg's database.
    pub fn read() -> Result<Installed, ImageError> {
        let mut cmd = Command::new("dpkg-query");
        cmd.args(["-W", "-f", QUERY_FORMAT]);
        Ok(Installed::parse(&run(&mut cmd, "dpkg-query -W")?))
    }

    /// Parses `dpkg-query -W -f QUERY_FORMAT`'s output: packages in any state other
    /// than installed (removed with their configuration kept, half-installed) count as
    /// absent.
    pub(super) fn parse(text: &str) -> Installed {
        let mut installed = Installed::default();
        for line in text.lines() {
            let fields: Vec<&str> = line.split('\t').collect();
            let [id, status, provides, pre_depends, depends] = fields[..] else {
                continue;
            };
            if status != "installed" {
                continue;
            }
            let name = bare_name(id);
            for virtual_name in provides.split(',').map(bare_name) {
                if !virtual_name.is_empty() {
                    let providers = installed.providers.entry(virtual_name).or_default();
                    if !providers.contains(&name) {
                        providers.push(name.clone());
                    }
                }
            }
            let package = installed.packages.entry(name).or_default();
            package.ids.push(id.to_owned());
            package.depends.extend(
                [pre_depends, depends]
                    .iter()
                    .flat_map(|list| list.split(','))
                    .map(|clause| clause.split('|').map(bare_name).collect::<Vec<_>>())
                    .filter(|alternatives| alternatives.iter().any(|a| !a.is_empty())),
            );
        }
        installed
    }

    /// Whether an installed package is, or provides, `name`.
    pub fn meets(&self, name: &str) -> bool {
        self.resolve(name).is_some()
    }

    /// The installed package a dependency on `name` is met by: `name` itself, or the
    /// first installed package that provides it (a virtual package).
    fn resolve(&self, name: &str) -> Option<&str> {
        if let Some((name, _)) = self.packages.get_key_value(name) {
            return Some(name);
        }
        self.providers
            .get(name)
            .and_then(|providers| providers.first())
            .map(String::as_str)
    }

    /// `roots` (installed names) and every installed package they depend on, directly
    /// or not. Of alternatives (`a | b`) the first one installed is followed; a
    /// dependency no installed package meets is not this machine's to fill (dpkg
    /// allows none among installed packages, so it is a recommendation's leftover or a
    /// forced install) and is skipped.
    pub fn closure<'a>(&self, roots: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
        let mut todo: Vec<&str> = roots.into_iter().filter_map(|r| self.resolve(r)).collect();
        let mut closure = BTreeSet::new();
        while let Some(name) = todo.pop() {
            if !closure.insert(name.to_owned()) {
                continue;
            }
            let Some(package) = self.packages.get(name) else {
                continue;
            };
            for alternatives in &package.depends {
                if let Some(met) = alternatives.iter().find_map(|a| self.resolve(a)) {
                    todo.push(met);
                }
            }
        }
        closure
    }

    /// The files of the named installed packages (`dpkg -L`): folders too, as dpkg
    /// lists them.
    pub fn files(&self, names: &BTreeSet<String>) -> Result<Vec<PathBuf>, ImageError> {
        let ids = names
            .iter()
            .filter_map(|name| self.packages.get(name))
            .flat_map(|package| package.ids.iter());
        let mut cmd = Command::new("dpkg");
        cmd.arg("-L").args(ids);
        let out = run(&mut cmd, "dpkg -L")?;
        Ok(out
            .lines()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .collect())
    }
}

/// The installed packages that own any of `paths` (as given, or with their links
/// resolved, since a toolchain's command is often a link of the alternatives system
/// that no package owns); a path no package owns is skipped.
pub fn owners(paths: &[PathBuf]) -> Result<BTreeSet<String>, ImageError> {
    let mut asked: BTreeSet<PathBuf> = paths.iter().cloned().collect();
    asked.extend(paths.iter().filter_map(|p| fs::canonicalize(p).ok()));
    if asked.is_empty() {
        return Ok(BTreeSet::new());
    }
    let out = Command::new("dpkg-query")
        .arg("-S")
        .args(&asked)
        .output()
        .map_err(|source| ImageError::Spawn {
            tool: "dpkg-query -S".into(),
            source,
        })?;
    // It exits with 1 when some path is no package's: those are skipped, by design.
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(ImageError::Tool {
            tool: "dpkg-query -S".into(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(parse_owners(&String::from_utf8_lossy(&out.stdout)))
}

/// Package names from `dpkg-query -S` lines (`a, b:amd64: /path`; `diversion by ...`
/// lines name no owner).
fn parse_owners(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with("diversion "))
        .filter_map(|line| line.split_once(": /").map(|(owners, _)| owners))
        .flat_map(|owners| owners.split(", ").map(bare_name))
        .filter(|name| !name.is_empty())
        .collect()
}

/// The links of every alternatives group (master and slaves, e.g. `/usr/bin/java`)
/// whose current choice is one of `files`.
pub fn alternative_links(files: &BTreeSet<PathBuf>) -> Result<Vec<PathBuf>, ImageError> {
    let admin = Path::new(ALTERNATIVES_ADMIN);
    let Ok(groups) = fs::read_dir(admin) else {
        return Ok(Vec::new()); // no alternatives on this machine
    };
    let mut links = Vec::new();
    for group in groups {
        let group = group.map_err(|e| ImageError::io("reading", admin, e))?;
        let path = group.path();
        let text = fs::read_to_string(&path).map_err(|e| ImageError::io("reading", &path, e))?;
        let master = group.file_name().to_string_lossy().into_owned();
        for (name, link) in group_links(&text, &master) {
            let chosen = fs::read_link(Path::new(ALTERNATIVES_LINKS).join(&name));
            if chosen.is_ok_and(|chosen| files.contains(&chosen)) {
                links.push(link);
            }
        }
    }
    Ok(links)
}

/// The (name, link) pairs of one group's file: its mode, the master's link, then slave
/// names and links in pairs up to an empty line (what follows is the choices).
fn group_links(text: &str, master: &str) -> Vec<(String, PathBuf)> {
    let mut lines = text.lines().skip(1);
    let Some(master_link) = lines.next() else {
        return Vec::new();
    };
    let mut links = vec![(master.to_owned(), PathBuf::from(master_link))];
    let slaves: Vec<&str> = lines.take_while(|line| !line.is_empty()).collect();
    for pair in slaves.chunks_exact(2) {
        links.push((pair[0].to_owned(), PathBuf::from(pair[1])));
    }
    links
}

/// A package name without its architecture or version (`python3:any (>= 3.5)` ->
/// `python3`).
fn bare_name(text: &str) -> String {
    let name = text.trim().split([' ', '(']).next().unwrap_or("");
    name.split(':').next().unwrap_or("").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATABASE: &str = "\
default-jdk-headless\tconfig-files\t\t\topenjdk-17-jdk-headless\n\
openjdk-17-jdk-headless:amd64\tinstalled\tjava-compiler, java-sdk-headless (= 17)\t\topenjdk-17-jre-headless (= 17.0.15), libc6 (>= 2.34)\n\
openjdk-17-jre-headless:amd64\tinstalled\tjava-runtime-headless (= 17)\t\tca-certificates-java, libc6 (>= 2.34), libcups2 | libcups3\n\
ca-certificates-java\tinstalled\t\t\tca-certificates (>= 20210120), java17-runtime-headless | java-runtime-headless\n\
ca-certificates\tinstalled\t\t\topenssl (>= 1.1.1), debconf (>= 0.5) | debconf-2.0\n\
cdebconf\tinstalled\tdebconf-2.0\t\t\n\
libc6:amd64\tinstalled\t\t\tlibgcc-s1\n\
libc6:i386\tinstalled\t\t\tlibgcc-s1\n\
libgcc-s1:amd64\tinstalled\t\tlibc6 (>= 2.35)\tgcc-12-base (= 12.2.0)\n\
python3\tinstalled\t\tpython3-minimal (= 3.11.2)\t\n\
nodejs\tinstalled\t\t\tpython3:any, libcups9 | libcups8\n";

    #[test]
    fn the_closure_follows_depends_pre_depends_providers_and_the_installed_alternative() {
        let installed = Installed::parse(DATABASE);
        assert!(!installed.meets("default-jdk-headless"), "not installed");
        assert!(installed.meets("libc6") && installed.meets("java-compiler"));
        let closure = installed.closure(["openjdk-17-jdk-headless"]);
        let names: Vec<&str> = closure.iter().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "ca-certificates",
                "ca-certificates-java",
                "cdebconf",
                "libc6",
                "libgcc-s1",
                "openjdk-17-jdk-headless",
                "openjdk-17-jre-headless",
            ],
            "debconf-2.0 is met by cdebconf, the java runtime by the JRE itself, \
             libcups2 | libcups3 and openssl by nothing installed"
        );
        assert_eq!(
            installed.packages["libc6"].ids,
            ["libc6:amd64", "libc6:i386"]
        );
        let virtual_root = installed.closure(["java-compiler"]);
        assert!(virtual_root.contains("openjdk-17-jre-headless"));
        let any = installed.closure(["nodejs"]);
        assert_eq!(any.len(), 2, "python3:any is python3: {any:?}");
        assert!(installed.closure(["default-jdk-headless"]).is_empty());
    }

    #[test]
    fn owners_are_read_from_dpkg_query_s() {
        let text = "bash: /bin/bash\n\
                    openjdk-17-jre-headless:amd64: /usr/lib/jvm/java-17-openjdk-amd64/bin/java\n\
                    diversion by dash from: /bin/sh\n\
                    libc6:amd64, libc6:i386: /usr/share/doc/libc6\n";
        let owners: Vec<String> = parse_owners(text).into_iter().collect();
        assert_eq!(owners, ["bash", "libc6", "openjdk-17-jre-headless"]);
    }

    #[test]
    fn a_group_s_links_are_its_master_and_its_slaves() {
        let awk = "auto\n/usr/bin/awk\nawk.1.gz\n/usr/share/man/man1/awk.1.gz\nnawk\n\
                   /usr/bin/nawk\n\n/usr/bin/mawk\n5\n/usr/share/man/man1/mawk.1.gz\n";
        let links = group_links(awk, "awk");
        let expected = [
            ("awk", "/usr/bin/awk"),
            ("awk.1.gz", "/usr/share/man/man1/awk.1.gz"),
            ("nawk", "/usr/bin/nawk"),
        ];
        assert_eq!(links.len(), expected.len(), "{links:?}");
        for ((name, link), (want_name, want_link)) in links.iter().zip(expected) {
            assert_eq!(
                (name.as_str(), link.as_path()),
                (want_name, Path::new(want_link))
            );
        }
        assert!(group_links("", "x").is_empty());
    }

    #[test]
    fn names_lose_their_architecture_and_version() {
        assert_eq!(bare_name(" python3:any (>= 3.5)"), "python3");
        assert_eq!(bare_name("libc6:amd64"), "libc6");
        assert_eq!(bare_name("java-sdk-headless (= 17)"), "java-sdk-headless");
        assert_eq!(bare_name(""), "");
    }
}
